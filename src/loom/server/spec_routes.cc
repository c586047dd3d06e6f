// The routes of the cluster as code (docs/api.md, docs/cluster-as-code.md):
// plan and apply a cluster spec, its revisions, rollback.

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"

namespace loom {
namespace {

// The spec of a plan or apply body: {"spec": "<yaml>", "source": "name"}.
absl::Status SpecOf(const nlohmann::json& body, std::string* text,
                    std::string* source) {
  auto spec = body.find("spec");
  if (spec == body.end() || !spec->is_string() ||
      spec->get_ref<const std::string&>().empty()) {
    return absl::InvalidArgumentError(
        "spec: required, the cluster spec's YAML text");
  }
  *text = spec->get<std::string>();
  *source = "cluster.yaml";
  if (auto it = body.find("source"); it != body.end()) {
    if (!it->is_string() || it->get_ref<const std::string&>().empty() ||
        it->get_ref<const std::string&>().size() > 256) {
      return absl::InvalidArgumentError(
          "source: must be the spec's file name, 1 to 256 bytes");
    }
    *source = it->get<std::string>();
  }
  return absl::OkStatus();
}

// An optional revision number of the body: -1 when absent.
absl::StatusOr<int64_t> RevisionOf(const nlohmann::json& body,
                                   const char* field) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return -1;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": must be a revision number (0 or more)"));
  }
  return it->get<int64_t>();
}

}  // namespace

void HttpServer::SpecRoutes() {
  Handle("POST", "/v1/cluster/plan", [this](const Request& req, Response& res) {
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    std::string text, source;
    if (absl::Status st = SpecOf(*body, &text, &source); !st.ok()) {
      return ReplyError(res, st);
    }
    ReplyResult(res, controller_->PlanCluster(text, source, absl::Now()));
  });
  Handle(
      "POST", "/v1/cluster/apply", [this](const Request& req, Response& res) {
        absl::StatusOr<nlohmann::json> body = JsonBody(req);
        if (!body.ok()) return ReplyError(res, body.status());
        std::string text, source;
        if (absl::Status st = SpecOf(*body, &text, &source); !st.ok()) {
          return ReplyError(res, st);
        }
        absl::StatusOr<int64_t> expected = RevisionOf(*body, "revision");
        if (!expected.ok()) return ReplyError(res, expected.status());
        ReplyResult(
            res, controller_->ApplyCluster(text, source, *expected,
                                           PrincipalOf(req).user, absl::Now()));
        Wake();
      });
  Handle("POST", "/v1/cluster/rollback",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           absl::StatusOr<int64_t> to = RevisionOf(*body, "to");
           if (!to.ok()) return ReplyError(res, to.status());
           absl::StatusOr<int64_t> expected = RevisionOf(*body, "revision");
           if (!expected.ok()) return ReplyError(res, expected.status());
           ReplyResult(res, controller_->RollbackCluster(
                                *to < 0 ? 0 : *to, *expected,
                                PrincipalOf(req).user, absl::Now()));
           Wake();
         });
  Handle("GET", "/v1/cluster/revisions", [this](const Request&, Response& res) {
    ReplyResult(res, controller_->ClusterHistory());
  });
  Handle("GET", "/v1/cluster/revisions/{id}",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> n = JobIdOf(req);
           if (!n.ok()) return ReplyError(res, n.status());
           ReplyResult(res, controller_->ClusterRevision(*n));
         });
}

}  // namespace loom
