#include "loom/server/token_request.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

constexpr double kMaxTtlSeconds = 10 * 365 * 86400.0;

absl::Status Bad(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", why));
}

absl::StatusOr<std::vector<std::string>> Names(const nlohmann::json& v,
                                               absl::string_view field) {
  if (!v.is_array()) return Bad(field, "must be a list of strings");
  std::vector<std::string> out;
  for (const nlohmann::json& e : v) {
    if (!e.is_string()) return Bad(field, "must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

bool HasControl(const std::string& s) {
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) return true;
  }
  return false;
}

}  // namespace

absl::StatusOr<TokenRequest> ParseTokenRequest(const nlohmann::json& body,
                                               const Cluster& cluster) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  static constexpr const char* kFields[] = {
      "role",     "user",  "projects", "ttl_seconds",
      "reusable", "nodes", "once",     "description"};
  for (const auto& [key, value] : body.items()) {
    if (std::find(std::begin(kFields), std::end(kFields), key) ==
        std::end(kFields)) {
      std::string shown = key.substr(0, 64);
      if (HasControl(shown)) shown = "(a name with control characters)";
      return Bad(shown,
                 "unknown field (the known ones are role, user, projects, "
                 "ttl_seconds, reusable, nodes, once, description)");
    }
  }
  TokenRequest t;
  std::string role_name = "user";
  if (auto it = body.find("role"); it != body.end()) {
    if (!it->is_string()) return Bad("role", "must be a string");
    role_name = it->get<std::string>();
  }
  absl::StatusOr<Role> role = ParseRole(role_name);
  if (!role.ok()) return role.status();
  if (*role == Role::kNode || *role == Role::kJob) {
    return Bad("role",
               "node credentials come from joining, job tokens from the "
               "server");
  }
  t.role = *role;
  const bool join = t.role == Role::kJoin;
  if (auto it = body.find("user"); it != body.end()) {
    if (!it->is_string()) return Bad("user", "must be a string");
    t.user = it->get<std::string>();
    if (join && !t.user.empty()) return Bad("user", "a join token has none");
  }
  if (!join) {
    if (t.user.empty()) return Bad("user", "required");
    if (!IsValidUserName(t.user)) {
      return Bad("user", absl::StrCat(
                             "not a valid user name (1 to ", kMaxUserNameLength,
                             " letters, digits, '_', '.', '-', '@', starting "
                             "with a letter, digit or '_', not digits "
                             "only)"));
    }
  }
  if (auto it = body.find("projects"); it != body.end()) {
    absl::StatusOr<std::vector<std::string>> projects = Names(*it, "projects");
    if (!projects.ok()) return projects.status();
    if (join && !projects->empty()) {
      return Bad("projects", "a join token has none");
    }
    for (const std::string& p : *projects) {
      if (p != "*" && !IsValidProjectName(p)) {
        return Bad("projects",
                   "each must be a project name (1 to 128 characters, no "
                   "spaces or control characters) or *");
      }
    }
    t.projects = *std::move(projects);
  }
  if (auto it = body.find("ttl_seconds"); it != body.end()) {
    if (!it->is_number()) return Bad("ttl_seconds", "must be a number");
    const double ttl = it->get<double>();
    if (!(ttl == 0 || (ttl >= 1 && ttl <= kMaxTtlSeconds))) {
      return Bad("ttl_seconds", "0 (no expiry) or 1 second to 10 years");
    }
    t.ttl = absl::Seconds(ttl);
  }
  // `once` is what older clients send (`false` unless asked): single use
  // is the default now whatever it says, and only `reusable` makes a join
  // token reusable, so that an old client never makes one by accident.
  for (const char* flag : {"reusable", "once"}) {
    auto it = body.find(flag);
    if (it == body.end()) continue;
    if (!it->is_boolean()) return Bad(flag, "must be true or false");
  }
  if (auto it = body.find("reusable"); it != body.end() && it->get<bool>()) {
    if (!join) return Bad("reusable", "only for a join token");
    t.reusable = true;
  }
  if (auto it = body.find("nodes"); it != body.end()) {
    absl::StatusOr<std::vector<std::string>> nodes = Names(*it, "nodes");
    if (!nodes.ok()) return nodes.status();
    if (!join && !nodes->empty()) return Bad("nodes", "only for a join token");
    for (const std::string& n : *nodes) {
      bool known = false;
      for (const NodeSpec& spec : cluster.nodes) known |= spec.name == n;
      if (!known) {
        return Bad("nodes", absl::StrCat("no node '", n.substr(0, 64),
                                         "' in the cluster spec"));
      }
    }
    t.nodes = *std::move(nodes);
  }
  if (auto it = body.find("description"); it != body.end()) {
    if (!it->is_string()) return Bad("description", "must be a string");
    t.description = it->get<std::string>();
    if (t.description.size() > kMaxTokenDescription ||
        HasControl(t.description)) {
      return Bad("description",
                 absl::StrCat("at most ", kMaxTokenDescription,
                              " characters, no control characters"));
    }
  }
  return t;
}

}  // namespace loom
