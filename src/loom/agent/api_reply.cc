#include "loom/agent/api_reply.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {

using json = nlohmann::json;

void SendJson(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(Dump(body), "application/json");
}

void SendError(httplib::Response& res, int status, const std::string& code,
               const std::string& message, const std::string& field) {
  json error = {{"code", code}, {"message", message}};
  if (!field.empty()) error["field"] = field;
  SendJson(res, status, {{"error", std::move(error)}});
}

void SendStatus(httplib::Response& res, const absl::Status& status,
                const std::string& field) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
      SendError(res, 400, "invalid_argument", Str(status.message()), field);
      return;
    case absl::StatusCode::kNotFound:
      SendError(res, 404, "not_found", Str(status.message()), field);
      return;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kFailedPrecondition:
      SendError(res, 409, "failed_precondition", Str(status.message()), field);
      return;
    case absl::StatusCode::kUnavailable:
      SendError(res, 503, "unavailable", Str(status.message()), field);
      return;
    default:
      SendError(res, 500, "internal", Str(status.message()), field);
  }
}

std::optional<json> ObjectBody(const httplib::Request& req,
                               httplib::Response& res) {
  if (absl::StripAsciiWhitespace(req.body).empty()) return json::object();
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    SendError(res, 400, "invalid_argument",
              "the request body must be a JSON object", "body");
    return std::nullopt;
  }
  return body;
}

std::string NamedNode(const httplib::Request& req, const json& body) {
  std::string name = req.get_param_value("node");
  if (auto it = body.find("node");
      name.empty() && it != body.end() && it->is_string()) {
    name = it->get<std::string>();
  }
  return name;
}

std::string TaskIdOf(const httplib::Request& req, httplib::Response& res) {
  const std::string id = req.matches[1];
  if (!ValidTaskId(id)) {
    SendError(res, 404, "not_found", absl::StrCat("no task '", id, "'"));
    return "";
  }
  return id;
}

}  // namespace loom
