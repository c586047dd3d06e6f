#pragma once

// The few child-process operations haproxy_process.cc needs: start a
// program with its output in a file (a descriptor), run one to completion and
// capture its output, wait for one with a deadline. POSIX fork/exec; the child
// closes every inherited descriptor above stderr. Thread-compatible.

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::gateway {

struct SpawnOptions {
  // stdout and stderr go to this descriptor (borrowed: the caller keeps
  // and closes it; e.g. `RunDir::OpenAppend`'s); stdin is /dev/null.
  // Required.
  int output_fd = -1;
  // The child leads a new process group (its pid), so that a last-resort
  // kill reaches everything it forked.
  bool new_process_group = true;
  // The child gets SIGTERM when the thread that spawned it exits (Linux
  // PR_SET_PDEATHSIG): for tests, so that a crashed test leaves nothing
  // behind.
  bool terminate_with_parent = false;
};

// Starts `argv` (argv[0] a path). Returns the child's pid; the caller must
// reap it (`WaitForExit`). InvalidArgument without an `output_fd`; Internal
// on fork failure; a failing exec shows as exit status 127 with the reason
// in the output.
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv,
                            const SpawnOptions& options);

// Reaps `pid` if it exits within `timeout` (0: only look). Returns its
// wait status (as waitpid gives it), or nullopt if it is still running. A
// pid that is no child of ours (any more: reaped elsewhere) reads as 0.
// With `reap` false the child is left a zombie, so that its pid (and its
// process group's id) cannot be reused until a later call reaps it.
std::optional<int> WaitForExit(pid_t pid, absl::Duration timeout,
                               bool reap = true);

// "exited with status 1", "killed by signal 9".
std::string DescribeWaitStatus(int wait_status);

struct CommandResult {
  int wait_status = 0;
  std::string output;      // stdout and stderr together
  bool succeeded() const;  // exited with status 0
};

// Runs `argv` to completion. DeadlineExceeded (after killing it) when it
// takes longer than `timeout`.
absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout);

}  // namespace loom::gateway
