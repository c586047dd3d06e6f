#pragma once

// The code that runs in the shim and in the task's child process, after
// fork(). Everything it needs is prepared in a `SpawnPlan` before the fork;
// from then on only async-signal-safe calls are made (no malloc, no locks, no
// iostreams), because the agent is multi-threaded and the forked copy may
// hold other threads' locks.

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace loom::agent_internal {

// The step at which the shim or the child failed.
enum class SpawnStage : int32_t {
  kNone = 0,
  kSetsid,
  kSubreaper,
  kFork,
  kSetpgid,
  kCgroup,
  kStdio,
  kChdir,
  kSetgroups,
  kSetgid,
  kSetuid,
  kExec,
  kMkdir,  // creating the working directory as the task's user
  kMount,  // entering its own mount namespace, or a mount in it
  kNoNewPrivs,  // prctl(PR_SET_NO_NEW_PRIVS)
};

const char* SpawnStageName(SpawnStage stage);

// One message on the report pipe from the shim and the child to the agent.
// Small enough (< PIPE_BUF) that writes of the two never interleave.
struct SpawnReport {
  enum Kind : int32_t {
    kTaskStarted = 1,  // from the shim: `pid`, `start_ticks` of the task
    kChildFailed = 2,  // from the child: `stage`, `error` (errno)
    kShimFailed = 3,   // from the shim: `stage`, `error`
  };
  int32_t kind = 0;
  int32_t stage = 0;
  int32_t error = 0;
  int32_t pid = 0;
  uint64_t start_ticks = 0;
};

struct SpawnPlan {
  // NUL-terminated arrays pointing into `argv_storage` / `env_storage`.
  std::vector<std::string> argv_storage;
  std::vector<std::string> env_storage;
  std::vector<char*> argv;
  std::vector<char*> envp;
  // Paths to try with execve, in order (the PATH search done up front).
  std::vector<std::string> exec_paths;
  std::string working_dir;  // absolute
  // The child creates `working_dir` (with parents) after switching users,
  // so that a task never gets a directory made by root at a path it chose.
  bool create_working_dir = false;
  // Directories (absolute) the child creates, with parents, as the task's
  // user once it is in its working directory; failures are written to the
  // task's stderr and do not stop the launch.
  std::vector<std::string> create_dirs;
  // cgroup.procs files the child writes its pid into.
  std::vector<std::string> cgroup_procs_files;
  // The task's cgroup v2 group (task_group.h), or empty: its `cgroup.kill`
  // and `cgroup.procs`, with which the shim kills every process of the task
  // (those that left its process group too) once its main process ended.
  std::string group_kill_file;
  std::string group_procs_file;

  // Descriptors (all >= 3, close-on-exec) owned by the agent.
  int devnull_fd = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
  int report_fd = -1;  // write end of the report pipe
  // Descriptors the shim keeps (the four above and the mounts' trees),
  // sorted.
  std::vector<int> keep_fds;
  // Highest descriptor to close one by one where close_range is missing.
  int max_fd = 1024;

  // Mounted by the child, in a mount namespace of its own, before exec
  // (`TaskSandbox`); empty: the agent's namespace.
  struct Mount {
    std::string source;
    std::string target;
    std::string fstype;
    unsigned long flags = 0;
    std::string data;
    // A target a user named (a dataset's mount): the child makes its
    // missing directories and reaches it one component at a time without
    // following a symbolic link (openat O_NOFOLLOW, mkdirat), and mounts
    // on the directory it opened (/proc/self/fd/N), so that no link a user
    // plants redirects the mount or the directories root makes.
    bool user_target = false;
    // >= 0: a detached mount tree attached at `target` (move_mount)
    // instead; the shim keeps it for the child, then closes it.
    int tree_fd = -1;
  };
  std::vector<Mount> mounts;

  // PR_SET_NO_NEW_PRIVS before exec (every task, unless its pool lets its
  // tasks gain privileges through set-user-ID programs: docs/security.md).
  bool no_new_privs = true;

  bool change_ids = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;

  // Files the shim writes (absolute).
  std::string state_dir;
  std::string pid_path;
  std::string pid_tmp_path;
  std::string exit_path;
  std::string exit_tmp_path;
  // The node's lease, which the agent renews after each answered heartbeat
  // (node_session.cc, `KeepLease`; docs/agent.md, "Fencing"). Empty: none. Once
  // the agent that launched it is gone, the shim SIGKILLs the task's process
  // group when the lease is older than its fence limit (it reads the lease
  // every second, and when it would expire), so that a task whose agent
  // died does not run on while the server runs its job elsewhere.
  std::string lease_path;

  // Fills `argv` and `envp` from the storage vectors.
  void Seal();
};

// The shim: runs in the child of the agent's fork(). Starts a new session,
// becomes a child subreaper, forks the task, reports its pid, waits for it,
// kills and reaps what is left of its process group and cgroup v2 group,
// writes the exit file and exits. The task's main process gets
// PR_SET_PDEATHSIG(SIGKILL): it dies with its shim (the agent, which
// watches shims, then kills the rest of the task). Signals stay blocked (as the
// agent blocked them around fork()). With a `lease_path`, it also fences the
// task when the lease expires.
[[noreturn]] void RunShim(const SpawnPlan& plan);

}  // namespace loom::agent_internal
