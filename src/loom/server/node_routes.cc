// The routes of nodes (docs/api.md): their state and an operator's cordon,
// uncordon, drain and revoke, and the agent protocol (registration and
// heartbeats).

#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"

namespace loom {

void HttpServer::NodeRoutes() {
  Handle("GET", "/v1/nodes", [this](const Request&, Response& res) {
    Reply(res, 200, controller_->ListNodes(absl::Now()));
  });
  Handle("GET", "/v1/nodes/{name}", [this](const Request& req, Response& res) {
    ReplyResult(res, controller_->GetNode(req.matches[1], absl::Now()));
  });
  for (const std::string op : {"cordon", "uncordon", "drain"}) {
    Handle("POST", absl::StrCat("/v1/nodes/{name}/", op),
           [this, op](const Request& req, Response& res) {
             ReplyResult(res, controller_->SetNodeMode(req.matches[1], op,
                                                       absl::Now()));
             Wake();
           });
  }
  Handle("POST", "/v1/nodes/{name}/revoke",
         [this](const Request& req, Response& res) {
           if (absl::Status st = NeedAuthentication(); !st.ok()) {
             return ReplyError(res, st);
           }
           const std::string node = req.matches[1];
           absl::Status st = options_.auth->RevokeNode(node, absl::Now());
           if (!st.ok()) return ReplyError(res, st);
           Reply(res, 200, {{"node", node}, {"revoked", true}});
         });
  Handle("POST", "/v1/agents/register",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           const std::string node = body->value("name", std::string());
           std::optional<JoinedNode> joined;
           Principal p;
           if (options_.auth != nullptr) {
             p = PrincipalOf(req);
             if (p.role == Role::kNode && p.user != node) {
               return ReplyError(res, absl::PermissionDeniedError(absl::StrCat(
                                          "this credential is node ", p.user,
                                          "'s, not ", node, "'s")));
             }
             if (!controller_->GetNode(node, absl::Now()).ok()) {
               return ReplyError(
                   res, absl::NotFoundError(absl::StrCat("no node '", node,
                                                         "' in the cluster "
                                                         "spec")));
             }
             // Before the node's address changes: a join token takes no
             // node that has a live credential (409).
             if (p.role == Role::kJoin) {
               absl::StatusOr<JoinedNode> j =
                   options_.auth->JoinNode(p, node, absl::Now());
               if (!j.ok()) return ReplyError(res, j.status());
               joined = *std::move(j);
             }
           }
           absl::StatusOr<nlohmann::json> r =
               controller_->Register(*body, absl::Now());
           if (!r.ok() && joined) {
             // Nobody got the credential: the token keeps its use.
             (void)options_.auth->UndoJoin(p, node, *joined, absl::Now());
           }
           if (r.ok() && options_.auth != nullptr) {
             // The key this server shows the agent on every call (new with
             // every join), and, for a node that joined just now, the
             // credential of its heartbeats.
             (*r)["agent_key"] = options_.auth->AgentKey(node);
             if (joined) (*r)["credential"] = joined->credential;
           }
           ReplyResult(res, r);
           Wake();
         });
  Handle("POST", "/v1/agents/heartbeat",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           if (options_.auth != nullptr &&
               PrincipalOf(req).user != body->value("name", std::string())) {
             return ReplyError(res, absl::PermissionDeniedError(
                                        "this credential is another node's"));
           }
           absl::StatusOr<nlohmann::json> r =
               controller_->Heartbeat(*body, absl::Now());
           ReplyResult(res, r);
           if (r.ok() && !(*r)["ack"].empty()) Wake();
         });
}

}  // namespace loom
