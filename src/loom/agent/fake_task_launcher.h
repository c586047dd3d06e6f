#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "loom/agent/task_launcher.h"

namespace loom {

struct FakeTaskLauncherOptions {
  // How long a task "runs" when its environment has no `LOOM_FAKE_SECONDS`.
  absl::Duration default_duration = absl::Seconds(60);
  // The clock that decides when tasks end.
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

// A `TaskLauncher` that runs nothing: `loom agent --fake-tasks`, for scale
// tests with thousands of emulated nodes on one machine.
//
// A launched task "runs" for `LOOM_FAKE_SECONDS` of its environment (a
// non-negative number; `default_duration` when absent) and then exits 0. Its
// stdout file (when given) gets one line saying what would have run; its
// stderr file is created empty. `Signal` (any signal but 0) and `Stop` end the
// task at once as killed by that signal; `Stop` never needs its grace.
//
// Nothing is persisted: a new launcher knows no tasks, so `Recover` returns
// only the tasks of this launcher.
//
// Thread-safety: thread-safe (one mutex).
class FakeTaskLauncher : public TaskLauncher {
 public:
  explicit FakeTaskLauncher(FakeTaskLauncherOptions options = {});

  // `InvalidArgument` for an empty task id or argv, or a bad
  // `LOOM_FAKE_SECONDS`; `AlreadyExists` for a known task id.
  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override;
  absl::Status Signal(const std::string& task_id, int signal) override;
  absl::Status Stop(const std::string& task_id, int first_signal,
                    absl::Duration grace) override;
  std::vector<TaskEvent> Poll() override;
  absl::StatusOr<std::vector<TaskInfo>> Recover() override;
  absl::Status Forget(const std::string& task_id) override;
  std::vector<TaskInfo> List() const override;

 private:
  struct Task {
    TaskInfo info;
    absl::Time end_at;
    bool reported = false;
  };

  // Ends `task` when its time has come.
  void Refresh(Task& task, absl::Time now) const;

  // Constant after construction.
  const absl::Duration default_duration_;
  const std::function<absl::Time()> now_;

  mutable absl::Mutex mu_;
  std::map<std::string, Task> tasks_ ABSL_GUARDED_BY(mu_);
  int next_pid_ ABSL_GUARDED_BY(mu_) = 1000000;
};

}  // namespace loom
