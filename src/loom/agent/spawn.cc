#include "loom/agent/spawn.h"

#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "loom/agent/task_files.h"

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

// Everything below the plan's `Seal` runs after fork(): only async-signal-safe
// calls (and reads of the prepared plan) are allowed.

namespace loom::agent_internal {

void SpawnPlan::Seal() {
  argv.clear();
  for (std::string& s : argv_storage) argv.push_back(s.data());
  argv.push_back(nullptr);
  envp.clear();
  for (std::string& s : env_storage) envp.push_back(s.data());
  envp.push_back(nullptr);
}

const char* SpawnStageName(SpawnStage stage) {
  switch (stage) {
    case SpawnStage::kNone:
      return "start";
    case SpawnStage::kSetsid:
      return "setsid";
    case SpawnStage::kSubreaper:
      return "prctl(PR_SET_CHILD_SUBREAPER)";
    case SpawnStage::kFork:
      return "fork";
    case SpawnStage::kSetpgid:
      return "setpgid";
    case SpawnStage::kCgroup:
      return "join cgroup";
    case SpawnStage::kStdio:
      return "set up stdin/stdout/stderr";
    case SpawnStage::kChdir:
      return "chdir";
    case SpawnStage::kSetgroups:
      return "setgroups";
    case SpawnStage::kSetgid:
      return "setgid";
    case SpawnStage::kSetuid:
      return "setuid";
    case SpawnStage::kExec:
      return "exec";
    case SpawnStage::kMount:
      return "mount";
    case SpawnStage::kMkdir:
      return "create working directory";
    case SpawnStage::kNoNewPrivs:
      return "prctl(PR_SET_NO_NEW_PRIVS)";
  }
  return "start";
}

namespace {

constexpr int kShimExitOk = 0;
constexpr int kShimExitNoRecord = 1;
constexpr int kShimExitFailed = 2;
constexpr int kChildExitFailed = 127;
// How long the shim waits for the rest of the task's process group to die
// after SIGKILL before it records the exit anyway (processes in
// uninterruptible sleep).
constexpr int kDrainSteps = 500;  // x 10 ms

bool WriteAll(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

void Report(int fd, SpawnReport::Kind kind, SpawnStage stage, int error,
            pid_t pid, uint64_t start_ticks) {
  SpawnReport r;
  r.kind = kind;
  r.stage = static_cast<int32_t>(stage);
  r.error = error;
  r.pid = pid;
  r.start_ticks = start_ticks;
  WriteAll(fd, &r, sizeof(r));
}

[[noreturn]] void ChildFail(const SpawnPlan& plan, SpawnStage stage, int err) {
  Report(plan.report_fd, SpawnReport::kChildFailed, stage, err, 0, 0);
  ::_exit(kChildExitFailed);
}

[[noreturn]] void ShimFail(const SpawnPlan& plan, SpawnStage stage, int err) {
  Report(plan.report_fd, SpawnReport::kShimFailed, stage, err, 0, 0);
  ::_exit(kShimExitFailed);
}

void SleepMillis(long ms) {
  struct timespec ts;
  ts.tv_sec = ms / 1000;
  ts.tv_nsec = (ms % 1000) * 1000000L;
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

void CloseRange(int first, int last, int max_fd) {
  if (first > last) return;
  if (::syscall(SYS_close_range, static_cast<unsigned>(first),
                static_cast<unsigned>(last), 0u) == 0) {
    return;
  }
  const int end = last < max_fd ? last : max_fd;
  for (int fd = first; fd <= end; ++fd) ::close(fd);
}

// Closes every descriptor >= 3 but those in `keep` (sorted, all >= 3).
void CloseAllExcept(const SpawnPlan& plan) {
  int next = 3;
  for (int fd : plan.keep_fds) {
    CloseRange(next, fd - 1, plan.max_fd);
    next = fd + 1;
  }
  CloseRange(next, ~0U >> 1, plan.max_fd);
}

// Writes `data` to `tmp`, fsyncs, renames it to `path` and fsyncs `dir`.
bool WriteFileAtomic(const char* tmp, const char* path, const char* dir,
                     const char* data, size_t size) {
  // The agent's files are private (data_dir.h).
  int fd = ::open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const bool ok = WriteAll(fd, data, size) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok || ::rename(tmp, path) != 0) {
    ::unlink(tmp);
    return false;
  }
  int dfd = ::open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return true;
}

// Milliseconds since the epoch, on the clock the agent's lease uses.
int64_t NowMillis() {
  struct timespec now;
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
}

// The whole number after `"key":` in the flat JSON object `text`; false when
// the key is missing or its value is not a whole number.
bool LeaseField(const char* text, const char* key, int64_t* out) {
  const size_t key_len = ::strlen(key);
  for (const char* p = text; *p != '\0'; ++p) {
    if (*p != '"' || ::strncmp(p + 1, key, key_len) != 0 ||
        p[1 + key_len] != '"') {
      continue;
    }
    const char* v = p + 2 + key_len;
    while (*v == ' ') ++v;
    if (*v++ != ':') return false;
    while (*v == ' ') ++v;
    const bool negative = *v == '-';
    if (negative) ++v;
    if (*v < '0' || *v > '9') return false;
    int64_t value = 0;
    for (int digits = 0; *v >= '0' && *v <= '9' && digits < 18; ++v, ++digits) {
      value = value * 10 + (*v - '0');
    }
    *out = negative ? -value : value;
    return true;
  }
  return false;
}

// What `LeaseMillisLeft` returns for a lease that never expires.
constexpr int64_t kNoLease = INT64_MAX;

// Milliseconds until the lease at `path` ({"last_ack_sent_ms": T,
// "fence_after_ms": L}) is older than its limit: T + L - now, negative once
// it is. A lease that is missing, unreadable or has a limit of 0 never
// expires (`kNoLease`; the agent then fences nothing either).
int64_t LeaseMillisLeft(const char* path) {
  const int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return kNoLease;
  char buf[256];
  size_t n = 0;
  while (n < sizeof(buf) - 1) {
    const ssize_t r = ::read(fd, buf + n, sizeof(buf) - 1 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  buf[n] = '\0';
  int64_t sent = 0;
  int64_t limit = 0;
  if (!LeaseField(buf, "last_ack_sent_ms", &sent) ||
      !LeaseField(buf, "fence_after_ms", &limit) || limit <= 0) {
    return kNoLease;
  }
  return sent + limit - NowMillis();
}

// `mkdir -p path` with the caller's credentials (mode 0777 less the umask).
// Returns 0, or the errno of the last component (ENOTDIR when it exists and
// is not a directory).
int MakeDirs(const char* path) {
  char buf[PATH_MAX];
  size_t len = 0;
  for (; path[len] != '\0'; ++len) {
    if (len + 1 >= sizeof(buf)) return ENAMETOOLONG;
    buf[len] = path[len];
  }
  buf[len] = '\0';
  for (size_t i = 1; i < len; ++i) {
    if (buf[i] != '/') continue;
    buf[i] = '\0';
    (void)::mkdir(buf, 0777);  // exists, or the last mkdir tells why not
    buf[i] = '/';
  }
  if (::mkdir(buf, 0777) == 0) return 0;
  const int err = errno;
  if (err != EEXIST) return err;
  struct stat st;
  if (::stat(buf, &st) != 0) return errno;
  return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

// Opens directory `path` (absolute) for a mount on it, one component at a
// time from "/" with O_NOFOLLOW, making missing components (0755) when
// `create`: the descriptor (O_PATH), or -errno. A symbolic link anywhere on
// the way is ELOOP or ENOTDIR, and "." or ".." is EINVAL. Only system
// calls: it runs in the forked child.
int OpenDirNoFollow(const char* path, bool create) {
  if (path[0] != '/') return -EINVAL;
  int fd = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return -errno;
  const char* p = path;
  while (*p != '\0') {
    while (*p == '/') ++p;
    if (*p == '\0') break;
    char name[NAME_MAX + 1];
    size_t n = 0;
    for (; p[n] != '\0' && p[n] != '/'; ++n) {
      if (n >= NAME_MAX) {
        ::close(fd);
        return -ENAMETOOLONG;
      }
      name[n] = p[n];
    }
    name[n] = '\0';
    p += n;
    if ((n == 1 && name[0] == '.') ||
        (n == 2 && name[0] == '.' && name[1] == '.')) {
      ::close(fd);
      return -EINVAL;
    }
    int next = ::openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(fd, name, 0755) != 0 && errno != EEXIST) {
        const int err = errno;
        ::close(fd);
        return -err;
      }
      next = ::openat(fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    }
    const int err = errno;
    ::close(fd);
    if (next < 0) return -err;
    // O_PATH|O_NOFOLLOW opens a link itself: never one to go through.
    struct stat st;
    if (::fstat(next, &st) != 0 || !S_ISDIR(st.st_mode)) {
      ::close(next);
      return -ELOOP;
    }
    fd = next;
  }
  return fd;
}

// "/proc/self/fd/N" into `out` (at least 32 bytes).
void ProcFdPath(int fd, char* out) {
  constexpr char kPrefix[] = "/proc/self/fd/";
  size_t n = 0;
  for (; kPrefix[n] != '\0'; ++n) out[n] = kPrefix[n];
  n += FormatDecimal(fd, out + n);
  out[n] = '\0';
}

void WriteText(int fd, const char* text) {
  size_t n = 0;
  while (text[n] != '\0') ++n;
  (void)WriteAll(fd, text, n);
}

uint64_t StartTicks(pid_t pid) {
  char buf[2048];
  ssize_t len = ReadProcStat(pid, buf, sizeof(buf));
  char state;
  uint64_t start = 0;
  if (len <= 0 ||
      !ParseProcStat(buf, static_cast<size_t>(len), &state, &start)) {
    return 0;
  }
  return start;
}

// Reads a `cgroup.procs` file, SIGKILLs every pid in it; returns how many it
// listed (0: empty or unreadable).
int KillGroupProcs(const char* procs_file) {
  const int fd = ::open(procs_file, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[4096];
  int count = 0;
  int64_t pid = 0;
  bool in_number = false;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
        in_number = true;
      } else if (in_number) {
        if (pid > 0) ::kill(static_cast<pid_t>(pid), SIGKILL);
        ++count;
        pid = 0;
        in_number = false;
      }
    }
  }
  if (in_number && pid > 0) {
    ::kill(static_cast<pid_t>(pid), SIGKILL);
    ++count;
  }
  ::close(fd);
  return count;
}

// Kills every process in the task's group: true when it held none.
bool KillGroup(const SpawnPlan& plan) {
  if (plan.group_procs_file.empty()) return true;
  if (!plan.group_kill_file.empty()) {
    const int fd = ::open(plan.group_kill_file.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
      (void)WriteAll(fd, "1", 1);
      ::close(fd);
    }
  }
  return KillGroupProcs(plan.group_procs_file.c_str()) == 0;
}

[[noreturn]] void RunChild(const SpawnPlan& plan, pid_t shim) {
  // Own process group, so that the whole task can be signalled at once.
  if (::setpgid(0, 0) != 0) ChildFail(plan, SpawnStage::kSetpgid, errno);

  // Join the cgroups while still privileged.
  if (!plan.cgroup_procs_files.empty()) {
    char pid_text[24];
    const size_t len = FormatDecimal(::getpid(), pid_text);
    for (const std::string& file : plan.cgroup_procs_files) {
      int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
      if (fd < 0) ChildFail(plan, SpawnStage::kCgroup, errno);
      if (!WriteAll(fd, pid_text, len)) {
        ChildFail(plan, SpawnStage::kCgroup, errno);
      }
      ::close(fd);
    }
  }

  // A mount namespace of its own, its mounts private (none propagates back
  // to the host), then the sandbox's mounts: they go when its last process
  // does.
  if (!plan.mounts.empty()) {
    if (::unshare(CLONE_NEWNS) != 0) ChildFail(plan, SpawnStage::kMount, errno);
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
      ChildFail(plan, SpawnStage::kMount, errno);
    }
    for (const SpawnPlan::Mount& m : plan.mounts) {
      if (m.tree_fd >= 0) {
        if (::syscall(SYS_move_mount, m.tree_fd, "", AT_FDCWD, m.target.c_str(),
                      MOVE_MOUNT_F_EMPTY_PATH) != 0) {
          ChildFail(plan, SpawnStage::kMount, errno);
        }
        ::close(m.tree_fd);
        continue;
      }
      const char* target = m.target.c_str();
      char held[32];
      int target_fd = -1;
      if (m.user_target) {
        // A remount finds the mount made before it; only a bind makes
        // what is missing.
        target_fd = OpenDirNoFollow(target, (m.flags & MS_REMOUNT) == 0);
        if (target_fd < 0) ChildFail(plan, SpawnStage::kMount, -target_fd);
        ProcFdPath(target_fd, held);
        target = held;
      }
      if (::mount(m.source.c_str(), target, m.fstype.c_str(), m.flags,
                  m.data.empty() ? nullptr : m.data.c_str()) != 0) {
        ChildFail(plan, SpawnStage::kMount, errno);
      }
      if (target_fd >= 0) ::close(target_fd);
    }
  }

  if (::dup2(plan.devnull_fd, STDIN_FILENO) < 0 ||
      ::dup2(plan.stdout_fd, STDOUT_FILENO) < 0 ||
      ::dup2(plan.stderr_fd, STDERR_FILENO) < 0) {
    ChildFail(plan, SpawnStage::kStdio, errno);
  }
  if (plan.change_ids) {
    // Raw system calls: glibc's wrappers synchronise credentials across
    // threads, which a forked child of a threaded process must not do.
    if (::syscall(SYS_setgroups, plan.groups.size(), plan.groups.data()) != 0) {
      ChildFail(plan, SpawnStage::kSetgroups, errno);
    }
    if (::syscall(SYS_setgid, plan.gid) != 0) {
      ChildFail(plan, SpawnStage::kSetgid, errno);
    }
    if (::syscall(SYS_setuid, plan.uid) != 0) {
      ChildFail(plan, SpawnStage::kSetuid, errno);
    }
  }
  // No set-user-ID program or file capability gives the task more than
  // its user has (a user's own PAM files behind `su`, say).
  if (plan.no_new_privs && ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    ChildFail(plan, SpawnStage::kNoNewPrivs, errno);
  }
  // Die with the shim (the one thread of the shim forked us). Set after the
  // switch of ids, which clears it; a set-user-ID program clears it again,
  // and then the agent's watch of the shim (and the cgroup) still kill the
  // task. A shim that died before this line: go now.
  (void)::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (::getppid() != shim) ::_exit(kChildExitFailed);
  // Directories are made and entered as the task's user: it runs only where
  // that user may go (and where root may not, e.g. NFS with root_squash).
  if (plan.create_working_dir) {
    if (const int err = MakeDirs(plan.working_dir.c_str()); err != 0) {
      ChildFail(plan, SpawnStage::kMkdir, err);
    }
  }
  if (::chdir(plan.working_dir.c_str()) != 0) {
    ChildFail(plan, SpawnStage::kChdir, errno);
  }
  for (const std::string& dir : plan.create_dirs) {
    if (const int err = MakeDirs(dir.c_str()); err != 0) {
      const char* name = ::strerrorname_np(err);
      WriteText(STDERR_FILENO, "loom: cannot create directory ");
      WriteText(STDERR_FILENO, dir.c_str());
      WriteText(STDERR_FILENO, ": ");
      WriteText(STDERR_FILENO, name != nullptr ? name : "error");
      WriteText(STDERR_FILENO, "\n");
    }
  }

  // Default dispositions (ignored signals survive exec) and an empty mask.
  struct sigaction sa;
  for (size_t i = 0; i < sizeof(sa); ++i) reinterpret_cast<char*>(&sa)[i] = 0;
  sa.sa_handler = SIG_DFL;
  sigemptyset(&sa.sa_mask);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    ::sigaction(sig, &sa, nullptr);  // EINVAL for libc-reserved ones: fine
  }
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);

  // execvp semantics over the prepared candidates.
  int err = ENOENT;
  bool saw_eacces = false;
  for (const std::string& path : plan.exec_paths) {
    ::execve(path.c_str(), plan.argv.data(), plan.envp.data());
    err = errno;
    if (err == EACCES) {
      saw_eacces = true;
      continue;
    }
    if (err == ENOENT || err == ENOTDIR || err == ESTALE || err == ENODEV ||
        err == ETIMEDOUT) {
      continue;
    }
    break;  // a real error with an existing file (ENOEXEC, E2BIG, ...)
  }
  if (saw_eacces && (err == ENOENT || err == ENOTDIR)) err = EACCES;
  ChildFail(plan, SpawnStage::kExec, err);
}

}  // namespace

[[noreturn]] void RunShim(const SpawnPlan& plan) {
  const pid_t agent = ::getppid();  // the shim is the agent's fork
  // Keep nothing of the agent: stdio to /dev/null (a pipe the agent's parent
  // waits on must not stay open), no other descriptors, no controlling
  // terminal, cwd "/" (no busy mount).
  ::dup2(plan.devnull_fd, STDIN_FILENO);
  ::dup2(plan.devnull_fd, STDOUT_FILENO);
  ::dup2(plan.devnull_fd, STDERR_FILENO);
  CloseAllExcept(plan);
  if (::setsid() < 0) ShimFail(plan, SpawnStage::kSetsid, errno);
  // Orphaned descendants of the task are reparented to the shim, which reaps
  // them, rather than to init (which may not reap at all in a container).
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    ShimFail(plan, SpawnStage::kSubreaper, errno);
  }
  (void)::chdir("/");

  const pid_t shim = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) ShimFail(plan, SpawnStage::kFork, errno);
  if (child == 0) RunChild(plan, shim);
  // Also set the group from this side, so that it exists whichever process
  // runs first (EACCES once the child has exec'd: then it did it itself).
  (void)::setpgid(child, child);
  ::close(plan.stdout_fd);
  ::close(plan.stderr_fd);
  ::close(plan.devnull_fd);
  for (const SpawnPlan::Mount& m : plan.mounts) {
    if (m.tree_fd >= 0) ::close(m.tree_fd);
  }

  // Record the pids before telling the agent: if the agent dies right now,
  // the next one still finds the task.
  const uint64_t start = StartTicks(child);
  const pid_t self = ::getpid();
  const uint64_t self_start = StartTicks(self);
  {
    char line[128];
    size_t n = 0;
    n += FormatDecimal(child, line + n);
    line[n++] = ' ';
    n += FormatDecimal(static_cast<int64_t>(start), line + n);
    line[n++] = ' ';
    n += FormatDecimal(self, line + n);
    line[n++] = ' ';
    n += FormatDecimal(static_cast<int64_t>(self_start), line + n);
    line[n++] = '\n';
    WriteFileAtomic(plan.pid_tmp_path.c_str(), plan.pid_path.c_str(),
                    plan.state_dir.c_str(), line, n);
  }
  Report(plan.report_fd, SpawnReport::kTaskStarted, SpawnStage::kNone, 0, child,
         start);
  ::close(plan.report_fd);

  // Wait for the task's main process, reaping adopted orphans meanwhile.
  // With a lease, wake at least every second (SIGCHLD is blocked, so it
  // stays pending for sigtimedwait), and just after the lease would expire,
  // to read it again. The shim fences only once the agent that launched it
  // is gone (the shim was reparented): a live agent fences its own tasks
  // (node_session.cc, `FenceSilentNodes`), and knows better, e.g. when it could
  // not write the lease file.
  const bool watch_lease = !plan.lease_path.empty();
  sigset_t child_exited;
  ::sigemptyset(&child_exited);
  ::sigaddset(&child_exited, SIGCHLD);
  bool fenced = false;
  int status = 0;
  bool have_status = false;
  for (;;) {
    int st = 0;
    const pid_t w = ::waitpid(-1, &st, watch_lease ? WNOHANG : 0);
    if (w == child) {
      status = st;
      have_status = true;
      break;
    }
    if (w > 0) continue;  // an adopted orphan
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) break;  // ECHILD: cannot happen
    // Nothing exited (WNOHANG): check the lease, then wait.
    int64_t wait_ms = 1000;
    if (!fenced) {
      const int64_t left = LeaseMillisLeft(plan.lease_path.c_str());
      if (left < 0 && ::getppid() != agent) {
        ::kill(-child, SIGKILL);
        fenced = true;
      } else if (left >= 0 && left < wait_ms) {
        wait_ms = left + 1;
      }
    }
    struct timespec wait = {static_cast<time_t>(wait_ms / 1000),
                            static_cast<long>(wait_ms % 1000) * 1000000L};
    (void)::sigtimedwait(&child_exited, nullptr, &wait);
  }

  // The task is over when its main process is: kill what is left of its
  // process group and of its cgroup (processes that left the group), and
  // reap them, so that no process of the task outlives the recorded exit.
  ::kill(-child, SIGKILL);
  for (int i = 0; i < kDrainSteps; ++i) {
    const bool group_empty = KillGroup(plan);
    int st;
    while (::waitpid(-1, &st, WNOHANG) > 0) {
    }
    if (::kill(-child, 0) != 0 && group_empty) break;
    SleepMillis(10);
  }

  bool recorded = false;
  if (have_status) {
    char line[96];
    size_t n = 0;
    const char* word = WIFSIGNALED(status) ? "signaled " : "exited ";
    for (const char* p = word; *p != '\0'; ++p) line[n++] = *p;
    const int value =
        WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status);
    n += FormatDecimal(value, line + n);
    line[n++] = ' ';
    struct timespec now;
    ::clock_gettime(CLOCK_REALTIME, &now);
    n += FormatDecimal(now.tv_sec, line + n);
    line[n++] = '\n';
    recorded =
        WriteFileAtomic(plan.exit_tmp_path.c_str(), plan.exit_path.c_str(),
                        plan.state_dir.c_str(), line, n);
  }

  // Processes that left the group (setsid) may still be descendants: stay
  // their reaper until none is left.
  for (;;) {
    int st;
    if (::waitpid(-1, &st, 0) > 0) continue;
    if (errno == EINTR) continue;
    break;
  }
  ::_exit(recorded ? kShimExitOk : kShimExitNoRecord);
}

}  // namespace loom::agent_internal
