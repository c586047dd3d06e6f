#pragma once

// One cgroup v2 per task, for grouping only (limits are cgroup.h's, v1):
// whatever a task's processes do (a new session, a double fork, a daemon),
// every one of them stays in its group, so the whole tree can be found and
// killed at once. That is what makes "a task never outlives its supervisor"
// hold (docs/agent-tasks.md, "Supervision"): when a task's main process
// ends, its shim kills the group; when the shim itself dies, the agent does.
//
// Groups live in the unified hierarchy (`/sys/fs/cgroup` on a cgroup2 host,
// `/sys/fs/cgroup/unified` on a hybrid one), under the agent's own cgroup:
// `<hierarchy><own>/loom-tasks/<launcher key>/<task id>`. The launcher key
// (a hash of the launcher's state directory) keeps the tasks of agents that
// share a host (tests, the fleet emulator) apart. Where no writable unified
// hierarchy exists, `TaskGroups::Create` says why and tasks are only in
// their own process group, as before.

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace loom {

struct TaskGroupsOptions {
  // The unified hierarchy; empty: found (see above).
  std::string hierarchy;
  // Where the agent's own cgroup is listed (the `0::` line).
  std::string self_cgroup_file = "/proc/self/cgroup";
};

// Thread-safety: thread-safe (no mutable state); calls for different tasks
// may run concurrently.
// For people, when `Create` failed with `why`: what that means for tasks.
std::string NoGroupsNote(const absl::Status& why);

class TaskGroups {
 public:
  // For the launcher whose state directory is `state_dir`. `Unavailable`
  // when the host has no unified hierarchy, or an error when it is not
  // writable here.
  static absl::StatusOr<std::unique_ptr<TaskGroups>> Create(
      const std::string& state_dir, TaskGroupsOptions options = {});

  // Creates the (empty) group of `task_id` and returns its directory; the
  // task joins it by writing its pid into `<dir>/cgroup.procs`. An existing
  // empty group of that id is reused.
  absl::StatusOr<std::string> Make(const std::string& task_id) const;

  // Removes the directory under which this launcher's groups go once it
  // holds none (best effort; `Make` makes it again).
  void RemoveParentIfUnused() const;

  // The directory under which this launcher's groups go.
  const std::string& parent() const { return parent_; }

  // SIGKILLs every process in the group at `dir` (through `cgroup.kill`
  // where the kernel has it, else each pid in `cgroup.procs`, frozen first
  // where `cgroup.freeze` exists, so that none forks meanwhile). Does not
  // wait for them to die. Returns how many processes the group held (at
  // least 1 when it held any); 0 for an empty or missing group.
  static size_t Kill(const std::string& dir);

  // True when no process is left in the group at `dir` (or it is gone).
  static bool Empty(const std::string& dir);

  // Removes the group at `dir`. Missing is not an error;
  // `FailedPrecondition` while it still holds processes.
  static absl::Status Remove(const std::string& dir);

  // The group of `task_id` as a path in the hierarchy ("/<own>/loom-tasks/
  // <key>/<task id>"): what a container runtime takes as its cgroup path,
  // so that a container's processes stay in (a child of) the task's group.
  std::string PathInHierarchy(const std::string& task_id) const {
    return absl::StrCat(parent_.substr(hierarchy_.size()), "/", task_id);
  }

 private:
  TaskGroups(std::string hierarchy, std::string parent)
      : hierarchy_(std::move(hierarchy)), parent_(std::move(parent)) {}

  const std::string hierarchy_;
  const std::string parent_;
};

}  // namespace loom
