// The routes of services (docs/services.md, docs/api.md): apply, list,
// read, scale, delete; and the gateway's: its configuration and its
// reports.

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/core/service_spec.h"
#include "loom/server/container_check.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"
#include "loom/server/service_record.h"
#include "loom/server/submission_policy.h"

namespace loom {

void HttpServer::ServiceRoutes() {
  Handle("POST", "/v1/services", [this](const Request& req, Response& res) {
    absl::StatusOr<ServiceSpec> spec =
        ParseServiceSpec(req.body, "request body");
    if (!spec.ok()) return ReplyError(res, spec.status());
    // Who may run what: the checks of a job's submission, on the job spec
    // of one replica; its image resolved to a digest once, here.
    JobSpec replica = ReplicaJobSpec(*spec);
    if (absl::Status st = CheckSubmission(PrincipalOf(req),
                                          *controller_->cluster(), &replica);
        !st.ok()) {
      return ReplyError(res, st);
    }
    spec->user = replica.user;
    if (replica.container.has_value()) {
      if (absl::Status st = ResolveContainer(*controller_->cluster(),
                                             options_.image_resolver, &replica);
          !st.ok()) {
        return ReplyError(res, st);
      }
      spec->container = replica.container;
    }
    ReplyResult(res, controller_->ApplyService(*std::move(spec), absl::Now()));
    Wake();
  });
  Handle("GET", "/v1/services", [this](const Request&, Response& res) {
    Reply(res, 200, controller_->ListServices(absl::Now()));
  });
  Handle(
      "GET", "/v1/services/{name}", [this](const Request& req, Response& res) {
        ReplyResult(res, controller_->GetService(req.matches[1], absl::Now()));
      });
  // Scale and delete: the owner's service (or any, for an admin).
  auto owned = [this](const Request& req) -> absl::Status {
    absl::StatusOr<nlohmann::json> s =
        controller_->GetService(req.matches[1], absl::Now());
    if (!s.ok()) return s.status();
    const Principal p = PrincipalOf(req);
    if (!p.admin() && (*s)["user"] != p.user) {
      return absl::PermissionDeniedError(
          absl::StrCat("service ", req.matches[1], " belongs to user ",
                       (*s)["user"].get<std::string>()));
    }
    return absl::OkStatus();
  };
  Handle(
      "POST", "/v1/services/{name}/scale",
      [this, owned](const Request& req, Response& res) {
        if (absl::Status st = owned(req); !st.ok()) {
          return ReplyError(res, st);
        }
        absl::StatusOr<nlohmann::json> body = JsonBody(req);
        if (!body.ok()) return ReplyError(res, body.status());
        auto n = body->find("replicas");
        if (n == body->end() || !n->is_number_integer()) {
          return ReplyError(
              res, absl::InvalidArgumentError("replicas: must be an integer"));
        }
        const int64_t v = n->get<int64_t>();
        if (v < 0 || v > kMaxServiceReplicas) {
          return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                     "replicas: must be 0 to ",
                                     kMaxServiceReplicas, ", got ", v)));
        }
        ReplyResult(res, controller_->ScaleService(
                             req.matches[1], static_cast<int>(v), absl::Now()));
        Wake();
      });
  Handle("POST", "/v1/services/{name}/delete",
         [this, owned](const Request& req, Response& res) {
           if (absl::Status st = owned(req); !st.ok()) {
             return ReplyError(res, st);
           }
           ReplyResult(res,
                       controller_->DeleteService(req.matches[1], absl::Now()));
           Wake();
         });
  Handle("GET", "/v1/gateway/config", [this](const Request&, Response& res) {
    Reply(res, 200, controller_->GatewayConfig(absl::Now()));
  });
  Handle("POST", "/v1/gateway/report",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           absl::Status st = controller_->GatewayReport(*body, absl::Now());
           if (!st.ok()) return ReplyError(res, st);
           Reply(res, 200, {{"ok", true}});
         });
}

}  // namespace loom
