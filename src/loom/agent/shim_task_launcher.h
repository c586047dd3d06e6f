#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/shim_start.h"
#include "loom/agent/shim_task.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_group.h"
#include "loom/agent/task_launcher.h"

namespace loom {

struct ShimTaskLauncherOptions {
  // Where task records live (created if missing). Must be private to one
  // agent and survive agent restarts (not a tmpfs that a restart clears, if
  // tasks are to be recovered).
  std::string state_dir;
  // Places tasks in cgroups when they ask for limits. Not owned; must outlive
  // the launcher. Null: no cgroups (limits are reported as not applied).
  CgroupManager* cgroups = nullptr;
  // Puts every task in a cgroup v2 group of its own (task_group.h), so that
  // all of its processes can be killed whatever they do. Not owned; must
  // outlive the launcher. Null: tasks are only in their process group.
  TaskGroups* groups = nullptr;
  // The clock for `Stop` deadlines.
  std::function<absl::Time()> now = [] { return absl::Now(); };
  // How long `Launch` waits for the task's exec before it gives up and kills
  // what it started.
  absl::Duration launch_timeout = absl::Seconds(30);
  // The node's lease file (docs/agent.md, "Fencing"). Once the process that
  // launched it is gone, each shim SIGKILLs its task when the lease is older
  // than its fence limit: a task whose agent died (and no agent came back
  // to renew the lease) is stopped as the agent would stop it, before the
  // server runs its job elsewhere. While that process lives, fencing is its
  // job. Empty: shims do not watch a lease.
  std::string lease_path;
};

// A `TaskLauncher` in the style of containerd's shim: every task gets a
// small supervisor process (the shim) that outlives the agent.
//
//   agent --fork--> shim (setsid, child subreaper) --fork--> task (own
//   process group, optional cgroups, stdio to files, execve)
//
// The shim waits for the task, kills and reaps the rest of its process group
// (and of its cgroup v2 group, with `groups`), and writes the exit status to
// `<state_dir>/<task_id>.exit` (atomically). A task never outlives its shim
// unnoticed: its main process dies with the shim (PR_SET_PDEATHSIG), and
// `Poll` (or `Recover`) that finds a shim gone without an exit file kills
// what is left of the task (its group, its process group while that is
// still the task's) and reports it lost at once, "supervisor (shim) died".
// The agent writes `<state_dir>/<task_id>.json` (and the shim
// `<task_id>.pid`) so that a restarted agent can `Recover` the task: adopt it
// when its process still runs (pid and /proc start time match), or report
// its exit or loss. The shim is a fork of the agent that never execs, so it
// only makes async-signal-safe calls (see spawn.h).
//
// The launcher reaps its shims (they are its children) in `Poll`; shims of
// an earlier agent are reparented to init (or a subreaper). Destroying a
// launcher leaves tasks running: that is what makes agent restarts safe.
//
// This class keeps the table of tasks and answers the `TaskLauncher` calls;
// the rest lives in parts: `StartShim` (shim_start.h) starts a task, with
// what task_setup.h prepares; `RunShim` (spawn.h) is the shim itself;
// `ShimTask` (shim_task.h) is one task and how it stands; task_files.h holds
// the files in `state_dir` and their formats.
//
// Thread-safety: thread-safe. One mutex guards the task table; `Launch`
// does not hold it while forking and waiting for the exec, so several
// launches may proceed at once, and `Poll` may run meanwhile.
class ShimTaskLauncher : public TaskLauncher {
 public:
  // Creates `options.state_dir` if needed. Does not recover anything: call
  // `Recover` before launching on a state directory that may hold tasks.
  static absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> Create(
      ShimTaskLauncherOptions options);

  // Leaves running tasks running (their shims keep supervising them). Waits
  // up to 200 ms for the shims of ended tasks, which exit right after
  // recording the exit, so that they do not stay zombies.
  ~ShimTaskLauncher() override;
  ShimTaskLauncher(const ShimTaskLauncher&) = delete;
  ShimTaskLauncher& operator=(const ShimTaskLauncher&) = delete;

  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override;
  absl::Status Signal(const std::string& task_id, int signal) override;
  absl::Status Stop(const std::string& task_id, int first_signal,
                    absl::Duration grace) override;
  std::vector<TaskEvent> Poll() override;
  absl::StatusOr<std::vector<TaskInfo>> Recover() override;
  absl::Status Forget(const std::string& task_id) override;
  std::vector<TaskInfo> List() const override;

  const std::string& state_dir() const { return state_dir_; }

 private:
  using Task = agent_internal::ShimTask;

  ShimTaskLauncher(ShimTaskLauncherOptions options, std::string state_dir);

  std::string PathFor(const std::string& task_id,
                      const std::string& suffix) const;
  void ReapDetachedShims() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // True when `task`'s exit has been recorded (the shim's exit file).
  bool HasExitFile(const std::string& task_id) const;

  // Constant after construction.
  const std::string state_dir_;
  CgroupManager* const cgroups_;
  TaskGroups* const groups_;
  const std::function<absl::Time()> now_;
  // What each `Launch` passes to `StartShim` (the lease path absolute).
  const agent_internal::ShimStartOptions start_options_;

  mutable absl::Mutex mu_;
  std::map<std::string, Task> tasks_ ABSL_GUARDED_BY(mu_);
  // Task ids whose `Launch` is in progress.
  std::set<std::string> launching_ ABSL_GUARDED_BY(mu_);
  // Shims of forgotten tasks that may still run (reaping the escaped
  // descendants of their task): pid and start time, reaped by `Poll`.
  std::vector<std::pair<pid_t, uint64_t>> detached_shims_ ABSL_GUARDED_BY(mu_);
  // cgroup v2 groups of forgotten tasks that still held (dying) processes:
  // removed by a later `Poll`.
  std::vector<std::string> stale_groups_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
