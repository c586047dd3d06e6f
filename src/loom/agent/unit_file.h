#pragma once

// The unit file of a task of several processes (`<node>/units/<task>.json`):
// which launcher processes make up the task, so that an agent that restarts
// finds the task whole again. A one-process task needs none: the launcher's
// own record is the task.

#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/task_state.h"

namespace loom {

// The file's text: version, task id, job, task index, GPUs, each
// process's launcher id and log paths, and a service replica's port, start
// time and probes (`port`, `started_at_ms`, `readiness`, `liveness`).
std::string UnitFileText(const TaskUnit& unit);

// The task a unit file describes: ids, GPUs, and its processes with only
// their launcher ids and log paths set (state kStarting), and a replica's
// port and probes. `InvalidArgument` for a file that is not one (bad JSON,
// no task id, no processes, a process without a launcher id, a port or a
// probe that is not one).
absl::StatusOr<TaskUnit> ParseUnitFile(const std::string& text);

}  // namespace loom
