// `POST /v1/maintenance` and `GET /v1/maintenance` of the agent API
// (docs/agent.md, "Maintenance"): start a node's maintenance command, and
// how the node's latest one stands. Only the server may call them (the
// routes are secured like the task routes: agent_api.cc).

#include <string>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "loom/agent/agent_api.h"
#include "loom/agent/api_reply.h"
#include "loom/agent/json_values.h"
#include "loom/agent/maintenance_files.h"

namespace loom {
namespace {

// The string field `key` of `body`, or an answer of 400 naming it.
bool MaintenanceStringField(const nlohmann::json& body, const char* key,
                            httplib::Response& res, std::string* out) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string()) {
    SendError(
        res, 400, "invalid_argument",
        absl::StrCat(key, ": required, a string",
                     it == body.end()
                         ? ""
                         : absl::StrCat(", got ", Dump(*it).substr(0, 80))),
        key);
    return false;
  }
  *out = it->get<std::string>();
  return true;
}

}  // namespace

void AgentApi::HandleMaintenanceStart(const httplib::Request& req,
                                      httplib::Response& res) {
  const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
  if (!body.is_object()) {
    SendError(res, 400, "invalid_argument",
              "the request body must be a JSON object: {\"node\", \"id\", "
              "\"command\"}",
              "body");
    return;
  }
  if (auto it = body.find("node"); it != body.end() && !it->is_string()) {
    SendError(res, 400, "invalid_argument", "node: must be a node name",
              "node");
    return;
  }
  std::string id;
  std::string command;
  if (!MaintenanceStringField(body, "id", res, &id) ||
      !MaintenanceStringField(body, "command", res, &command)) {
    return;
  }
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(NamedNode(req, body));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  absl::StatusOr<MaintenanceRunner::StartResult> started =
      maintenance_.Start(**node, id, command);
  if (!started.ok()) {
    const absl::Status& s = started.status();
    const std::string message = Str(s.message());
    switch (s.code()) {
      case absl::StatusCode::kInvalidArgument:
        // "id: ..." or "command: ...".
        SendError(res, 400, "invalid_argument", message,
                  message.substr(0, message.find(':')));
        break;
      case absl::StatusCode::kAlreadyExists:
        SendError(res, 409, "conflict", message);
        break;
      case absl::StatusCode::kFailedPrecondition:
        SendError(res, 409, "failed_precondition", message, "id");
        break;
      default:
        SendError(res, 500, "internal", message);
    }
    return;
  }
  // 202: started now; 200: the node's latest command has this id already
  // (a server that restarted asks again), and it does not run twice.
  SendJson(res, started->started ? 202 : 200, started->status);
}

void AgentApi::HandleMaintenanceGet(const httplib::Request& req,
                                    httplib::Response& res) {
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(req.get_param_value("node"));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  std::optional<nlohmann::json> status = maintenance_.Status(**node);
  if (!status) {
    SendError(res, 404, "not_found",
              absl::StrCat("node ", (*node)->name,
                           " has run no maintenance command"));
    return;
  }
  SendJson(res, 200, *status);
}

}  // namespace loom
