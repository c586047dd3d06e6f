#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// Resource limits for one task. Unset fields mean "no limit".
struct TaskLimits {
  // Memory (RSS + page cache) in bytes; the kernel OOM-kills the task above.
  std::optional<int64_t> memory_bytes;
  // CPU time in thousandths of a CPU (1500 = one and a half CPUs), enforced as
  // a CFS quota per period.
  std::optional<int64_t> cpu_millis;

  bool empty() const { return !memory_bytes && !cpu_millis; }
};

// Where a task's process goes: the `cgroup.procs` files the task's child
// process writes its pid into before exec, and what that achieves.
struct CgroupPlacement {
  // Files to write the task's pid into, one per controller hierarchy.
  std::vector<std::string> procs_files;
  // Directories created for the task, removed by `CgroupManager::Remove`.
  std::vector<std::string> dirs;
  // True when every requested limit is in place.
  bool limits_applied = false;
  // For people: which limits apply, or why (some) do not.
  std::string note;
};

// Creates and removes the cgroups that hold tasks. A cgroup manager never
// fails a launch: when limits cannot be applied, `Prepare` says so in the
// placement and the task runs without them.
//
// Thread-safety: implementations are thread-safe (they keep no mutable
// state); calls for different task ids may run concurrently.
class CgroupManager {
 public:
  virtual ~CgroupManager() = default;

  // Creates the cgroup(s) for `task_id` and sets `limits`. Controllers that
  // are not available are left out and named in `note`; `InvalidArgument`
  // only for limits that make no sense (negative, zero).
  [[nodiscard]] virtual absl::StatusOr<CgroupPlacement> Prepare(
      const std::string& task_id, const TaskLimits& limits) = 0;

  // Removes the directories of `placement` (once its processes are gone).
  // Missing directories are not an error; `FailedPrecondition` when a cgroup
  // still holds processes.
  [[nodiscard]] virtual absl::Status Remove(
      const CgroupPlacement& placement) = 0;
};

// Places nothing: every requested limit is reported as not applied.
class NoCgroupManager : public CgroupManager {
 public:
  absl::StatusOr<CgroupPlacement> Prepare(const std::string& task_id,
                                          const TaskLimits& limits) override;
  absl::Status Remove(const CgroupPlacement& placement) override;
};

// cgroup v1: one hierarchy per controller under `root` (`<root>/memory`,
// `<root>/cpu`). A task gets `<root>/<controller><own>/loom/<task_id>`, where
// `<own>` is the agent's own cgroup in that hierarchy as listed in
// `self_cgroup_file` (so that a containerised agent creates its tasks'
// cgroups inside its own, where it may write). Memory limits go to
// `memory.limit_in_bytes` (and `memory.memsw.limit_in_bytes` when present),
// CPU limits to `cpu.cfs_period_us`/`cpu.cfs_quota_us`. A controller is used
// when its directory is writable and has the limit file.
//
// `root` and `self_cgroup_file` are parameters so that tests can run against
// a fake directory tree; an empty or unreadable `self_cgroup_file` means the
// hierarchy roots.
class CgroupV1Manager : public CgroupManager {
 public:
  static constexpr int64_t kCpuPeriodUs = 100000;

  explicit CgroupV1Manager(std::string root = "/sys/fs/cgroup",
                           std::string self_cgroup_file = "/proc/self/cgroup");

  absl::StatusOr<CgroupPlacement> Prepare(const std::string& task_id,
                                          const TaskLimits& limits) override;
  absl::Status Remove(const CgroupPlacement& placement) override;

  // The directory that task cgroups of `controller` go under
  // (`<root>/<controller><own>/loom`).
  std::string ParentDir(const std::string& controller) const;

 private:
  // Creates `<ParentDir(controller)>/<task_id>` and writes `files` (name,
  // value) into it; returns the directory.
  absl::StatusOr<std::string> SetUp(
      const std::string& controller, const std::string& task_id,
      const std::string& limit_file,
      const std::vector<std::pair<std::string, std::string>>& files) const;

  const std::string root_;
  const std::string self_cgroup_file_;
};

}  // namespace loom
