#pragma once

// Fault injection (`POST /v1/chaos`, docs/fault-tolerance.md).

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "loom/server/controller.h"
#include "nlohmann/json.hpp"

namespace loom {

// Turns the action of `body` (kill_agent, freeze_heartbeats,
// thaw_heartbeats, kill_task, fail_gpu, heal_gpu, slow_agent, heal) into a
// call to the agent that serves the node or task, and returns what to
// answer. `agent_auth` gives the `Authorization` header value of a call to
// a node's agent ("": none). Blocks on that call (seconds at most).
// Errors: InvalidArgument (a bad action or field), NotFound,
// FailedPrecondition (no such running task, the agent refused),
// Unavailable (the agent cannot be reached).
absl::StatusOr<nlohmann::json> Chaos(
    Controller& controller, const nlohmann::json& body,
    const std::function<std::string(const std::string&)>& agent_auth);

}  // namespace loom
