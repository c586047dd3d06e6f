#pragma once

// What the agent prepares for a task's launch before it forks the shim
// (shim_start.h): the spec checked, the user the task runs as, its output
// files opened, the programs execve will try. Everything here runs in the
// agent, before fork(), so it may allocate and take locks.
//
// Thread-safety: the functions are thread-safe; a `ScopedFd` is not.

#include <sys/types.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/agent/task_launcher.h"

namespace loom::agent_internal {

// "task <task_id>: ", the start of every error about a task.
std::string TaskPrefix(const std::string& task_id);

// An error for `errno` value `err` while doing `what` for the task:
// "task 42.1: open /x: No such file or directory".
absl::Status TaskErrno(const std::string& task_id, int err,
                       const std::string& what);

// `InvalidArgument` unless `spec` can be launched as given: a valid task id
// (`ValidTaskId`), a program to run, no NUL bytes in arguments, environment
// or paths, no '=' in environment names, positive limits.
absl::Status ValidateSpec(const TaskSpec& spec);

// Owns a file descriptor: closes it when destroyed or reset.
class ScopedFd {
 public:
  ScopedFd() = default;
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() { Reset(); }

  int get() const { return fd_; }
  void Reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Moves `fd` to a number >= 3 (the shim and the child rearrange 0..2), keeping
// it close-on-exec. Returns -1 (with errno) on failure.
int AboveStdio(int fd);

// The user and groups a task runs as.
struct Identity {
  // False: the task runs as the agent (the other fields are unset).
  bool change = false;
  uid_t uid = 0;
  gid_t gid = 0;
  // Supplementary groups, for setgroups.
  std::vector<gid_t> groups;
};

// The identity `spec` asks for: unchanged when it names the agent's own uid
// and gid (or none). Another one needs an agent running as root
// (`PermissionDenied`); a uid without a passwd entry needs a gid
// (`InvalidArgument`). The groups are the user's, from the group database.
absl::StatusOr<Identity> ResolveIdentity(const TaskSpec& spec);

// Opens a task's output file for appending, creating it if missing, into
// `fd` (close-on-exec, above stdio). An empty `path` is /dev/null. A file
// created for a task that runs as another user is given to that user (mode
// 0600: only the user and root read it); an existing one is left as it is.
absl::Status OpenOutput(const std::string& task_id, const std::string& path,
                        const Identity& identity, ScopedFd& fd);

// The candidates execvp would try for `program` with search path `path`:
// `program` itself when it contains a '/', else each entry of `path` in
// order (an empty entry is the current directory).
std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::string& path);

}  // namespace loom::agent_internal
