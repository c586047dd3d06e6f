#include "loom/server/route_table.h"

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "loom/core/job.h"
#include "loom/http/http_message.h"

namespace loom {

const std::vector<RouteRule>& RouteTable() {
  static const std::vector<RouteRule> kTable = {
      {"GET", "/", Access::kPublic},
      {"GET", "/healthz", Access::kPublic},
      {"GET", "/v1/leader", Access::kPublic},
      {"GET", "/metrics", Access::kOperator},
      {"GET", "/v1/utilization", Access::kHuman},
      {"GET", "/v1/whoami", Access::kAnyone},
      {"POST", "/v1/jobs", Access::kHuman},
      {"GET", "/v1/jobs", Access::kHuman},
      {"POST", "/v1/jobs/release", Access::kHuman},
      {"GET", "/v1/jobs/{id}", Access::kHuman},
      {"GET", "/v1/jobs/{id}/events", Access::kHuman},
      {"POST", "/v1/jobs/{id}/cancel", Access::kHuman},
      {"POST", "/v1/jobs/{id}/release", Access::kHuman},
      {"POST", "/v1/jobs/{id}/hold", Access::kHuman},
      {"POST", "/v1/jobs/{id}/checkpoint", Access::kJobOrHuman},
      {"GET", "/v1/jobs/{id}/logs", Access::kHuman},
      {"GET", "/v1/nodes", Access::kHuman},
      {"GET", "/v1/nodes/{name}", Access::kHuman},
      {"POST", "/v1/nodes/{name}/cordon", Access::kOperator},
      {"POST", "/v1/nodes/{name}/uncordon", Access::kOperator},
      {"POST", "/v1/nodes/{name}/drain", Access::kOperator},
      {"POST", "/v1/nodes/{name}/revoke", Access::kAdmin},
      {"GET", "/v1/images", Access::kHuman},
      {"POST", "/v1/images/pull", Access::kOperator},
      {"GET", "/v1/projects", Access::kHuman},
      {"GET", "/v1/accounting/jobs", Access::kHuman},
      {"GET", "/v1/usage", Access::kHuman},
      {"POST", "/v1/chaos", Access::kOperator},
      {"POST", "/v1/cluster/plan", Access::kOperator},
      {"POST", "/v1/cluster/apply", Access::kAdmin},
      {"POST", "/v1/cluster/rollback", Access::kAdmin},
      {"GET", "/v1/cluster/revisions", Access::kOperator},
      {"GET", "/v1/cluster/revisions/{id}", Access::kOperator},
      {"POST", "/v1/maintenance", Access::kAdmin},
      {"GET", "/v1/maintenance", Access::kOperator},
      {"GET", "/v1/maintenance/{id}", Access::kOperator},
      {"POST", "/v1/maintenance/{id}/pause", Access::kAdmin},
      {"POST", "/v1/maintenance/{id}/resume", Access::kAdmin},
      {"POST", "/v1/maintenance/{id}/abort", Access::kAdmin},
      {"POST", "/v1/services", Access::kHuman},
      {"GET", "/v1/services", Access::kHuman},
      {"GET", "/v1/services/{name}", Access::kHuman},
      {"POST", "/v1/services/{name}/scale", Access::kHuman},
      {"POST", "/v1/services/{name}/delete", Access::kHuman},
      {"POST", "/v1/datasets", Access::kOperator},
      {"GET", "/v1/datasets", Access::kHuman},
      {"POST", "/v1/datasets/{name}/delete", Access::kOperator},
      {"GET", "/v1/gateway/config", Access::kOperator},
      {"POST", "/v1/gateway/report", Access::kOperator},
      {"GET", "/v1/tokens", Access::kAdmin},
      {"POST", "/v1/tokens", Access::kAdmin},
      {"POST", "/v1/tokens/{token}/revoke", Access::kAdmin},
      {"POST", "/v1/agents/register", Access::kAgent},
      {"POST", "/v1/agents/heartbeat", Access::kNode},
  };
  return kTable;
}

namespace {

// Whether `path` (no query) fits `route`: "{id}" is a canonical job id (1
// to 2^63-1, decimal, no leading zero) or an array element (`12_7`), "{token}"
// lowercase hex, "{name}" any one non-empty segment. With `captures`, what the
// placeholders matched, percent-decoded.
bool RouteMatches(absl::string_view route, absl::string_view path,
                  std::vector<std::string>* captures) {
  std::vector<absl::string_view> want =
      absl::StrSplit(route, '/', absl::SkipEmpty());
  std::vector<absl::string_view> have = absl::StrSplit(path, '/');
  // "/v1/jobs" and "/": a leading '/' gives one empty first segment; a
  // trailing '/' or "//" give empty ones, which no route has.
  if (have.empty() || !have.front().empty()) return false;
  have.erase(have.begin());
  if (path == "/") have.clear();
  if (want.size() != have.size()) return false;
  std::vector<std::string> got;
  for (size_t i = 0; i < want.size(); ++i) {
    const absl::string_view w = want[i], h = have[i];
    if (w == "{id}") {
      // Or an array element, "12_7" (its index without a leading zero).
      const size_t us = h.find('_');
      const absl::string_view job = h.substr(0, us);
      JobId id = 0;
      if (job.empty() || job.size() > 19 || job[0] == '0' ||
          job.find_first_not_of("0123456789") != absl::string_view::npos ||
          !absl::SimpleAtoi(job, &id) || id <= 0) {
        return false;
      }
      if (us != absl::string_view::npos) {
        const absl::string_view index = h.substr(us + 1);
        if (index.empty() || index.size() > 7 ||
            (index[0] == '0' && index.size() > 1) ||
            index.find_first_not_of("0123456789") != absl::string_view::npos) {
          return false;
        }
      }
      got.emplace_back(h);
    } else if (w == "{token}") {
      if (h.empty() || h.size() > 64 ||
          h.find_first_not_of("0123456789abcdef") != absl::string_view::npos) {
        return false;
      }
      got.emplace_back(h);
    } else if (w == "{name}") {
      if (h.empty()) return false;
      std::string decoded = http::PercentDecode(h, false);
      if (decoded.empty() || decoded.find('/') != std::string::npos) {
        return false;
      }
      got.push_back(std::move(decoded));
    } else if (w != h) {
      return false;
    }
  }
  if (captures != nullptr) *captures = std::move(got);
  return true;
}

absl::string_view PathOf(std::string_view full) {
  absl::string_view path(full.data(), full.size());
  const size_t q = path.find('?');
  if (q != absl::string_view::npos) path = path.substr(0, q);
  return path;
}

}  // namespace

const RouteRule* FindRoute(std::string_view method, std::string_view full,
                           std::vector<std::string>* captures) {
  const absl::string_view path = PathOf(full);
  for (const RouteRule& r : RouteTable()) {
    if (r.method == method && RouteMatches(r.route, path, captures)) return &r;
  }
  return nullptr;
}

bool PathHasRoute(std::string_view full) {
  const absl::string_view path = PathOf(full);
  for (const RouteRule& r : RouteTable()) {
    if (RouteMatches(r.route, path, nullptr)) return true;
  }
  return false;
}

std::string AllowedMethods(std::string_view full) {
  const absl::string_view path = PathOf(full);
  std::string allow;
  for (const RouteRule& r : RouteTable()) {
    if (RouteMatches(r.route, path, nullptr)) {
      absl::StrAppend(&allow, allow.empty() ? "" : ", ", r.method);
    }
  }
  return allow;
}

std::string RouteOf(std::string_view full) {
  absl::string_view path = PathOf(full);
  if (path.empty()) path = "/";
  // Literal routes first ("/v1/jobs/release" over "/v1/jobs/{id}").
  for (const RouteRule& r : RouteTable()) {
    if (RouteMatches(r.route, path, nullptr)) return r.route;
  }
  return "other";
}

}  // namespace loom
