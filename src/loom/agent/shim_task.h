#pragma once

// One task of a `ShimTaskLauncher` (shim_task_launcher.h) as the launcher
// knows it: its record, and what its shim and its files say about how it
// stands. The launcher keeps one `ShimTask` per task and brings it up to date
// with `Refresh`; `LoadShimTask` makes one from the files a task left in the
// state directory (task_files.h), for `Recover`.
//
// Thread-safety: a `ShimTask` is not thread-safe (the launcher guards its
// tasks with its mutex); the functions are safe to call for different tasks
// at once.

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "absl/time/time.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_launcher.h"

namespace loom::agent_internal {

struct ShimTask {
  TaskFileRecord record;
  TaskInfo::State state = TaskInfo::State::kRunning;
  bool adopted = false;
  // The end was returned by `Poll` or `Recover`.
  bool reported = false;
  // The shim has been reaped, or is known to be gone.
  bool shim_done = false;
  int shim_wait_status = 0;
  bool shim_reaped = false;  // `shim_wait_status` is valid
  // `Stop` was called; SIGKILL is due at `kill_deadline` (reset once sent).
  bool stop_requested = false;
  std::optional<absl::Time> kill_deadline;
  ExitRecord exit;
  std::string reason;
};

// Brings a running `task` up to date: reaps its shim (when it is a child of
// this process), reads its exit file in `state_dir`, and decides whether it
// was lost. A task whose shim is gone without an exit file is lost, and
// what is left of it is killed (its cgroup v2 group, and its process group
// while that is still the task's): without its shim nobody else would.
// Returns true when the task ended by this call; an ended task is left as
// it is.
bool Refresh(ShimTask& task, const std::string& state_dir);

// The task `task_id` as its files in `state_dir` describe it: its record
// (`<task_id>.json`), completed from the shim's pid file when the agent
// stopped before it could, marked adopted. It is lost at once when the
// record is unreadable or names no process, and there is no exit file;
// otherwise it is running until `Refresh` says more.
ShimTask LoadShimTask(const std::string& state_dir, const std::string& task_id);

// What `TaskLauncher::List` says about `task`.
TaskInfo InfoOf(const ShimTask& task);

// Reaps the shim with pid `shim.first` and start time `shim.second` if it
// has exited; true when it is gone, reaped, or a zombie another process
// (init, a subreaper) will reap.
bool ReapShim(const std::pair<pid_t, uint64_t>& shim);

}  // namespace loom::agent_internal
