#pragma once

// How the agent API answers (docs/agent.md, "Errors"): JSON bodies, errors
// as {"error": {code, message, field?}}, an `absl::Status` mapped to its
// HTTP status, and handlers that never let an exception out.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "httplib.h"
#include "nlohmann/json.hpp"

namespace loom {

void SendJson(httplib::Response& res, int status, const nlohmann::json& body);

void SendError(httplib::Response& res, int status, const std::string& code,
               const std::string& message, const std::string& field = "");

// InvalidArgument and OutOfRange: 400; NotFound: 404; AlreadyExists and
// FailedPrecondition: 409; Unavailable: 503; anything else: 500.
void SendStatus(httplib::Response& res, const absl::Status& status,
                const std::string& field = "");

// An optional JSON object body ("" is an empty object); answers 400 and
// returns nullopt for anything else.
std::optional<nlohmann::json> ObjectBody(const httplib::Request& req,
                                         httplib::Response& res);

// The node a request names (`?node=`, else `"node"` of its body `body`);
// "" when it names none.
std::string NamedNode(const httplib::Request& req, const nlohmann::json& body);

// The task id of a `/v1/tasks/{id}...` route (`req.matches[1]`); answers
// 404 and returns "" for an id that cannot be a task's.
std::string TaskIdOf(const httplib::Request& req, httplib::Response& res);

// Runs `handler`; an exception it throws becomes a 500.
template <typename F>
void Guarded(httplib::Response& res, F&& handler) {
  try {
    handler();
  } catch (const std::exception& e) {
    SendError(res, 500, "internal", std::string("internal error: ") + e.what());
  } catch (...) {
    SendError(res, 500, "internal", "internal error");
  }
}

}  // namespace loom
