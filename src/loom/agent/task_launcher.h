#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/cgroup.h"

namespace loom {

// A file system the task's process mounts before exec (mount(2)'s
// arguments), in a mount namespace of its own: see `TaskSandbox`.
struct TaskMount {
  std::string source;
  std::string target;  // absolute; made by the launcher when missing
  std::string fstype;
  unsigned long flags = 0;  // MS_* flags
  std::string data;         // fstype-specific options, e.g. overlay's dirs
  // A target a user named (a dataset's mount): the launcher does not make
  // it; the task's process makes and reaches it without following a
  // symbolic link (spawn.h, `SpawnPlan::Mount::user_target`).
  bool user_target = false;
  // Set (>= 0): a detached mount tree (open_tree(2) OPEN_TREE_CLONE, e.g.
  // a job's checked mount source, mount_source.h), attached at `target`
  // with move_mount(2) instead of a mount of `source`, which is then unused.
  // The target is made a directory or an empty file as the tree's root is.
  // The caller owns the descriptor and keeps it open until `Launch`
  // returns; each tree is attached once.
  int tree_fd = -1;
};

// A directory the launcher makes (with parents) before the task starts,
// given to `uid`:`gid` when it made it.
struct TaskDir {
  std::string path;  // absolute
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  // Emptied first when it exists (a container's upper layer left by an
  // earlier run of the task id: the launcher refuses a task id it knows, so
  // nothing running uses it).
  bool empty = false;
};

// What a task that runs a container runtime as its program (image_step.h)
// needs around it. Before it forks, the launcher (as root) writes `files`
// (mode 0600, their directories made) and makes `dirs`; the task's process
// then enters a mount namespace of its own, makes its mounts private and
// mounts `mounts` in order before exec. Nothing of it outlives the task's
// processes: the mounts go with the namespace. Needs an agent running as
// root (`PermissionDenied` otherwise).
struct TaskSandbox {
  std::vector<std::pair<std::string, std::string>> files;  // path, content
  std::vector<TaskDir> dirs;
  std::vector<TaskMount> mounts;
};

// What to run for one task on this node. The caller (the agent, from the
// controller's launch request) fills in everything; the launcher adds nothing
// to the environment but `PATH`, `HOME` and `LANG` when `env` lacks them and
// the agent has them.
struct TaskSpec {
  // Unique on this node, e.g. "42.1" (job 42, task 1). Must match
  // `[A-Za-z0-9._-]+` (and not be "." or ".."): it names files in the
  // launcher's state directory and cgroup directories.
  std::string task_id;
  // Program and arguments; must not be empty. A program without a '/' is
  // looked up in the `PATH` of the task's environment (execvp semantics; the
  // default search path is "/bin:/usr/bin").
  std::vector<std::string> argv;
  // The task's entire environment: `CUDA_VISIBLE_DEVICES`, `MASTER_ADDR`,
  // `RANK`, ... Keys must be non-empty and contain no '='.
  std::map<std::string, std::string> env;
  // Created (with parents) if missing. Empty: the agent's current directory.
  // Relative paths are taken from the agent's current directory. A task that
  // runs as another user creates it (and enters it) as that user, after the
  // switch: a directory that user cannot create or enter fails the launch.
  std::string working_dir;
  // Opened with O_APPEND|O_CREAT (mode 0600) by the agent before the task
  // starts; empty means /dev/null. Both may name the same file. A file
  // created for a task that runs as another user belongs to that user (mode
  // 0600); an existing file is left as it is.
  std::string stdout_path;
  std::string stderr_path;
  // When `uid` is set and differs from the agent's, the task runs as that
  // user: supplementary groups, gid and uid are switched before exec. This
  // needs root; otherwise `Launch` fails with `PermissionDenied`. `gid`
  // defaults to the user's primary group from the passwd database.
  std::optional<uid_t> uid;
  std::optional<gid_t> gid;
  // Absolute paths of directories the task's process creates (with parents,
  // as the task's user) before exec, e.g. its checkpoint directory. Best
  // effort: a failure is written to the task's stderr ("loom: cannot create
  // directory /ckpt/42: EACCES") and the task starts anyway. Relative paths
  // are ignored.
  std::vector<std::string> create_dirs;
  // Optional memory and CPU limits, applied through the launcher's
  // `CgroupManager` when the host allows it (see `TaskInfo::cgroup_note`).
  TaskLimits limits;
  // Set for a container task: see `TaskSandbox`.
  std::optional<TaskSandbox> sandbox;
  // False (the default): the task runs with PR_SET_NO_NEW_PRIVS, so no
  // set-user-ID program or file capability raises its privileges. True
  // only on pools whose operator allows it (docs/security.md).
  bool allow_privilege_escalation = false;
};

// What `Launch` returns about a task that was started.
struct TaskHandle {
  std::string task_id;
  pid_t pid = 0;                  // the task's main process
  pid_t pgid = 0;                 // its process group (equal to `pid`)
  pid_t shim_pid = 0;             // the shim that waits for it
  uint64_t start_time_ticks = 0;  // /proc/<pid>/stat field 22
  // True when every requested limit is enforced by a cgroup; false when
  // limits were requested but (some) could not be applied. True when no
  // limits were requested.
  bool limits_applied = true;
  std::string cgroup_note;  // human-readable; empty when no limits asked
};

// A task's state as the launcher knows it.
struct TaskInfo {
  enum class State {
    kRunning,  // the task's process runs (or its exit is not yet recorded)
    kExited,   // it ended and its exit status is known
    kLost,     // it is gone and its exit status is not known
  };

  std::string task_id;
  State state = State::kRunning;
  pid_t pid = 0;
  pid_t pgid = 0;
  pid_t shim_pid = 0;
  uint64_t start_time_ticks = 0;
  std::string working_dir;
  std::string stdout_path;
  std::string stderr_path;
  // True when `Recover` found the task (launched by an earlier agent).
  bool adopted = false;
  // True once `Stop` was called and the task has not ended yet.
  bool stopping = false;
  // kExited: the exit code (0..255) when the task exited, -1 when a signal
  // killed it; `term_signal` is that signal (0 when it exited).
  int exit_code = -1;
  int term_signal = 0;
  // kExited: when the shim saw the task end (InfinitePast when unknown).
  absl::Time ended_at = absl::InfinitePast();
  // kLost: why; kRunning: a warning (e.g. the shim died) or empty.
  std::string reason;
  bool limits_applied = true;
  std::string cgroup_note;
};

// A change in a task's state, reported once by `TaskLauncher::Poll`.
struct TaskEvent {
  enum class Kind { kExited, kLost };

  std::string task_id;
  Kind kind = Kind::kExited;
  // kExited: exit code (0..255), or -1 when killed by `term_signal`.
  int exit_code = -1;
  int term_signal = 0;
  absl::Time ended_at = absl::InfinitePast();
  // kLost: why the exit status is unknown.
  std::string reason;
};

// Launches and supervises the processes of tasks on one node.
//
// Lifecycle of a task: `Launch` -> running -> (`Signal`/`Stop`) -> ended
// (exited or lost), reported once, by `Poll` or by `Recover` -> `Forget`.
// A task's record outlives the launcher: a new launcher on the same state
// finds running tasks again with `Recover` and still learns their exit codes.
// An ended task stays known (and its task id taken) until `Forget`, so a
// crash between learning an exit and reporting it loses nothing: the next
// `Recover` reports it again.
//
// Errors are `absl::Status` values whose messages name the task id; no method
// throws.
class TaskLauncher {
 public:
  virtual ~TaskLauncher() = default;

  // Starts `spec` and returns once the task's program has been exec'd.
  // Errors: `InvalidArgument` for a bad spec; `AlreadyExists` when the task id
  // is known (running, or ended and not yet forgotten); the failing step's
  // errno mapped to a code (`NotFound` for a missing program, with a message
  // like "task 42.1: exec python3: No such file or directory") when the task
  // could not be started, in which case nothing of it is left running.
  [[nodiscard]] virtual absl::StatusOr<TaskHandle> Launch(
      const TaskSpec& spec) = 0;

  // Sends `signal` to the task's whole process group. `NotFound` for an
  // unknown task, `FailedPrecondition` when it has already ended.
  [[nodiscard]] virtual absl::Status Signal(const std::string& task_id,
                                            int signal) = 0;

  // Sends `first_signal` to the task's process group now and SIGKILL to the
  // group once `grace` has passed, if it has not ended by then. Does not
  // block: the SIGKILL is sent by a later `Poll`. Stopping an ended task is a
  // no-op. `NotFound` for an unknown task.
  [[nodiscard]] virtual absl::Status Stop(const std::string& task_id,
                                          int first_signal,
                                          absl::Duration grace) = 0;

  // Does the supervision work: reaps shims, learns exits, enforces `Stop`
  // deadlines. Returns the tasks that ended since the last call, each once.
  // Call it periodically (e.g. every 100 ms to 1 s).
  virtual std::vector<TaskEvent> Poll() = 0;

  // On agent start: finds the tasks recorded in the state directory by an
  // earlier launcher and takes them over. Returns every known task: running
  // ones (adopted and supervised again), ended ones with their exit status,
  // lost ones with a reason. Tasks reported ended here are not reported again
  // by `Poll`. Safe to call more than once.
  [[nodiscard]] virtual absl::StatusOr<std::vector<TaskInfo>> Recover() = 0;

  // Drops an ended task after its end was reported upstream: removes its
  // state files and cgroup. `NotFound` for an unknown task,
  // `FailedPrecondition` for a running one.
  [[nodiscard]] virtual absl::Status Forget(const std::string& task_id) = 0;

  // Every known task, sorted by task id.
  virtual std::vector<TaskInfo> List() const = 0;
};

}  // namespace loom
