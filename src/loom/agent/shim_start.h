#pragma once

// Starting one task under a new shim: the launch steps of a
// `ShimTaskLauncher` (shim_task_launcher.h) between checking the spec and
// entering the task in its table. See docs/agent-tasks.md, "How a task is
// started".

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_group.h"
#include "loom/agent/task_launcher.h"

namespace loom::agent_internal {

// What every start needs from its launcher. Constant while starts run.
struct ShimStartOptions {
  // Where the task's files go: absolute, existing.
  std::string state_dir;
  // Places tasks in cgroups when they ask for limits. Not owned. Null: no
  // cgroups (limits are reported as not applied).
  CgroupManager* cgroups = nullptr;
  // Gives each task a cgroup v2 group of its own. Not owned. Null: none.
  TaskGroups* groups = nullptr;
  // The clock for the record's `launched_at`. Must be set.
  std::function<absl::Time()> now;
  // How long to wait for the task's exec before killing what was started.
  absl::Duration launch_timeout = absl::Seconds(30);
  // The node's lease file for the shim to fence by (absolute), or empty.
  std::string lease_path;
};

// Starts `spec` (already checked by `ValidateSpec`; its id reserved by the
// caller): resolves its user, creates its working directory, opens its
// output, prepares its cgroups, writes its record (phase "starting") to
// `<state_dir>/<task_id>.json`, forks the shim (`RunShim`, spawn.h) with
// every signal blocked, and waits until the task has exec'd. Returns the
// record, complete (phase "running", pids and start times) and durable.
//
// On failure nothing is left behind: the shim and task are killed and
// reaped, the task's files and cgroups removed. Errors name the task and the
// step: "task 42.1: exec python3: No such file or directory" (the errno's
// code), `DeadlineExceeded` after `launch_timeout`.
//
// Thread-safety: thread-safe for different task ids; the shim is a child of
// the calling process, which must reap it.
absl::StatusOr<TaskFileRecord> StartShim(const TaskSpec& spec,
                                         const ShimStartOptions& options);

}  // namespace loom::agent_internal
