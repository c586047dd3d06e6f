// The routes of rolling maintenance (docs/api.md, docs/maintenance.md):
// start a run, list them, one run, pause, resume and abort.

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"

namespace loom {

void HttpServer::MaintenanceRoutes() {
  Handle("POST", "/v1/maintenance", [this](const Request& req, Response& res) {
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    const std::string user = PrincipalOf(req).user;
    absl::StatusOr<nlohmann::json> m =
        controller_->StartMaintenance(*body, user, absl::Now());
    if (m.ok()) {
      // The audit line: who runs what on which nodes (the run's record
      // keeps it too).
      std::fprintf(
          stderr, "loom server: %s\n",
          nlohmann::json(
              {{"event", "maintenance_started"},
               {"id", (*m)["id"]},
               {"user", user},
               {"command", (*m)["command"]},
               {"pool", (*m)["pool"]},
               {"nodes", m->value("node_status", nlohmann::json()).size()}})
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              .c_str());
    }
    ReplyResult(res, m, 201);
    Wake();
  });
  Handle("GET", "/v1/maintenance", [this](const Request&, Response& res) {
    ReplyResult(res, controller_->ListMaintenances());
  });
  Handle("GET", "/v1/maintenance/{id}",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobIdOf(req);
           if (!id.ok()) return ReplyError(res, id.status());
           ReplyResult(res, controller_->GetMaintenance(*id));
         });
  for (const char* op : {"pause", "resume", "abort"}) {
    Handle("POST", absl::StrCat("/v1/maintenance/{id}/", op),
           [this, op = std::string(op)](const Request& req, Response& res) {
             absl::StatusOr<JobId> id = JobIdOf(req);
             if (!id.ok()) return ReplyError(res, id.status());
             const std::string user = PrincipalOf(req).user;
             absl::StatusOr<nlohmann::json> m =
                 controller_->ChangeMaintenance(*id, op, user, absl::Now());
             if (m.ok()) {
               std::fprintf(stderr, "loom server: %s\n",
                            nlohmann::json({{"event", "maintenance_" + op},
                                            {"id", *id},
                                            {"user", user}})
                                .dump()
                                .c_str());
             }
             ReplyResult(res, std::move(m));
             Wake();
           });
  }
}

}  // namespace loom
