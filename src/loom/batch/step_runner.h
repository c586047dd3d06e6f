#pragma once

// The tasks of srun steps on one node of a batch job (docs/sbatch.md): each
// a child process with its output read from pipes and handed on as
// `OutputChunk`s, and its end reported once the process has exited and its
// output has been read to the end. Used by the step hosts and, for node 0,
// by the batch head itself. Not thread-safe: one event loop drives it.

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "loom/batch/batch_wire.h"

namespace loom::batch {

struct StepTaskSpec {
  uint32_t step = 0;
  uint32_t procid = 0;
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // the whole environment
  std::string cwd;                         // empty: the runner's
};

// How a task ended: its exit code, or the signal that killed it (0: none).
struct TaskEnd {
  uint32_t step = 0;
  uint32_t procid = 0;
  int exit_code = 0;
  int signal = 0;
};

class StepRunner {
 public:
  using OutputFn = std::function<void(OutputChunk)>;
  using EndFn = std::function<void(const TaskEnd&)>;

  StepRunner(OutputFn on_output, EndFn on_end);
  ~StepRunner();  // SIGKILLs what still runs
  StepRunner(const StepRunner&) = delete;
  StepRunner& operator=(const StepRunner&) = delete;

  // Starts one task. A program that cannot be executed still starts: its
  // child writes why to the task's stderr and exits 127, as a shell would.
  // An error only when no process could be made (fork, pipes).
  absl::Status Start(const StepTaskSpec& spec);
  // The pipes to watch, appended to `fds`.
  void AddPollFds(std::vector<pollfd>& fds) const;
  // Reads the pipes that `fds` (as filled by poll) say are ready.
  void OnPoll(const std::vector<pollfd>& fds);
  // Reaps exited tasks; reports those whose output has been read to the end
  // (or that exited more than two seconds ago).
  void Reap();
  // Signals every task of `step` that still runs.
  void Signal(uint32_t step, int signal);
  void SignalAll(int signal);
  bool empty() const { return tasks_.empty(); }
  bool Runs(uint32_t step) const;

 private:
  struct Task {
    uint32_t step = 0;
    uint32_t procid = 0;
    pid_t pid = -1;
    int out = -1;  // read ends; -1 once at EOF
    int err = -1;
    bool exited = false;
    int exit_code = 0;
    int signal = 0;
    int64_t exited_at_ms = 0;
  };
  void ReadPipe(Task& t, int* fd, uint8_t stream);
  static void ClosePipes(Task& t);

  OutputFn on_output_;
  EndFn on_end_;
  std::vector<Task> tasks_;
};

}  // namespace loom::batch
