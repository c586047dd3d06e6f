#include "loom/agent/shim_task_launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/spawn.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_internal::ExitRecord;
using agent_internal::ParseExitLine;
using agent_internal::ParsePidLine;
using agent_internal::ProbeProcess;
using agent_internal::ProcessStatus;
using agent_internal::ReadWholeFile;
using agent_internal::SpawnPlan;
using agent_internal::SpawnReport;
using agent_internal::SpawnStage;
using agent_internal::TaskFileRecord;

constexpr char kDefaultSearchPath[] = "/bin:/usr/bin";
constexpr size_t kMaxTaskIdLength = 200;

// Owns a file descriptor.
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

std::string TaskPrefix(const std::string& task_id) {
  return absl::StrCat("task ", task_id, ": ");
}

absl::Status TaskErrno(const std::string& task_id, int err,
                       const std::string& what) {
  return absl::ErrnoToStatus(err, absl::StrCat(TaskPrefix(task_id), what));
}

bool ValidTaskId(const std::string& id) {
  if (id.empty() || id.size() > kMaxTaskIdLength || id == "." || id == "..") {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

absl::Status ValidateSpec(const TaskSpec& spec) {
  if (!ValidTaskId(spec.task_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("task id \"", spec.task_id,
                     "\" is invalid: it must be 1 to 200 of [A-Za-z0-9._-]"));
  }
  const std::string prefix = TaskPrefix(spec.task_id);
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "argv is empty: nothing to run"));
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "an argument contains a NUL byte"));
    }
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos ||
        key.find('\0') != std::string::npos ||
        value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "invalid environment variable name \"", key, "\""));
    }
  }
  if (spec.limits.memory_bytes && *spec.limits.memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "memory limit must be positive"));
  }
  if (spec.limits.cpu_millis && *spec.limits.cpu_millis <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cpu limit must be positive"));
  }
  std::vector<const std::string*> paths = {&spec.working_dir, &spec.stdout_path,
                                           &spec.stderr_path};
  for (const std::string& dir : spec.create_dirs) paths.push_back(&dir);
  for (const std::string* path : paths) {
    if (path->find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "a path contains a NUL byte"));
    }
  }
  return absl::OkStatus();
}

// Moves `fd` to a number >= 3 (the shim and the child rearrange 0..2), keeping
// it close-on-exec. Returns -1 (with errno) on failure.
int AboveStdio(int fd) {
  if (fd < 0 || fd >= 3) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  errno = err;
  return moved;
}

struct Identity {
  bool change = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

// Opens a task's output file for appending, creating it if missing. A file
// created for a task that runs as another user is given to that user (mode
// 0600: only the user and root read it); an existing one is left as it is.
absl::Status OpenOutput(const std::string& task_id, const std::string& path,
                        const Identity& identity, ScopedFd& fd) {
  const std::string& target = path.empty() ? std::string("/dev/null") : path;
  constexpr int kFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
  int raw = -1;
  if (identity.change && !path.empty()) {
    raw = ::open(target.c_str(), kFlags | O_EXCL | O_NOFOLLOW, 0600);
    if (raw >= 0) {
      (void)::fchown(raw, identity.uid, identity.gid);
    } else if (errno == EEXIST) {
      raw = ::open(target.c_str(), kFlags, kPrivateFileMode);
    }
  } else {
    raw = ::open(target.c_str(), kFlags, kPrivateFileMode);
  }
  if (raw < 0) return TaskErrno(task_id, errno, absl::StrCat("open ", target));
  raw = AboveStdio(raw);
  if (raw < 0) return TaskErrno(task_id, errno, "fcntl");
  fd.Reset(raw);
  return absl::OkStatus();
}

// The candidates execvp would try for `program` with search path `path`.
std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::string& path) {
  if (program.find('/') != std::string::npos) return {program};
  std::vector<std::string> out;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    // An empty entry is the current directory, as for execvp.
    out.push_back(dir.empty() ? program
                              : absl::StrCat(std::string(dir), "/", program));
  }
  return out;
}

absl::StatusOr<Identity> ResolveIdentity(const TaskSpec& spec) {
  Identity id;
  const bool uid_change = spec.uid && *spec.uid != ::geteuid();
  const bool gid_change = spec.gid && *spec.gid != ::getegid();
  if (!uid_change && !gid_change) return id;
  const std::string prefix = TaskPrefix(spec.task_id);
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        prefix, "cannot run as uid ", spec.uid ? *spec.uid : ::geteuid(),
        " gid ", spec.gid ? *spec.gid : ::getegid(),
        ": the agent is not running as root"));
  }
  id.change = true;
  id.uid = spec.uid ? *spec.uid : ::geteuid();
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  int rc;
  while ((rc = ::getpwuid_r(id.uid, &pw, buf.data(), buf.size(), &found)) ==
         ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (spec.gid) {
    id.gid = *spec.gid;
  } else if (found != nullptr) {
    id.gid = found->pw_gid;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "uid ", id.uid, " has no passwd entry; set a gid"));
  }
  if (found != nullptr && spec.uid) {
    int n = 32;
    std::vector<gid_t> groups(n);
    while (::getgrouplist(found->pw_name, id.gid, groups.data(), &n) < 0) {
      groups.resize(static_cast<size_t>(n) + 32);
      n = static_cast<int>(groups.size());
    }
    groups.resize(static_cast<size_t>(n));
    id.groups = std::move(groups);
  } else {
    id.groups = {id.gid};
  }
  return id;
}

struct SpawnOutcome {
  std::optional<SpawnReport> started;  // the shim reported the task's pid
  std::optional<SpawnReport> failed;   // the first failure reported
  bool timed_out = false;
};

// Reads the reports on the pipe until every writer is gone (the shim closes
// its end after reporting the pid, the child's closes on exec) or `timeout`.
SpawnOutcome ReadSpawnReports(int fd, absl::Duration timeout) {
  SpawnOutcome outcome;
  const absl::Time deadline = absl::Now() + timeout;
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      outcome.timed_out = true;
      return outcome;
    }
    struct pollfd pfd = {fd, POLLIN, 0};
    const int ready =
        ::poll(&pfd, 1,
               static_cast<int>(std::min<int64_t>(
                   absl::ToInt64Milliseconds(left) + 1, 1000000)));
    if (ready <= 0) continue;  // EINTR, or re-check the deadline
    SpawnReport report;
    const ssize_t n = ::read(fd, &report, sizeof(report));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return outcome;  // EOF (or an error: treat alike)
    if (n != static_cast<ssize_t>(sizeof(report))) continue;
    if (report.kind == SpawnReport::kTaskStarted) {
      outcome.started = report;
    } else if (!outcome.failed) {
      outcome.failed = report;
    }
  }
}

// What failed, for the error message: "exec python3", "chdir /x", ...
std::string DescribeStage(SpawnStage stage, const TaskSpec& spec,
                          const std::string& working_dir,
                          const Identity& identity,
                          const CgroupPlacement& placement) {
  switch (stage) {
    case SpawnStage::kExec:
      return absl::StrCat("exec ", spec.argv[0]);
    case SpawnStage::kChdir:
      return absl::StrCat("chdir ", working_dir);
    case SpawnStage::kMkdir:
      return absl::StrCat("create working directory ", working_dir);
    case SpawnStage::kSetuid:
      return absl::StrCat("setuid ", identity.uid);
    case SpawnStage::kSetgid:
      return absl::StrCat("setgid ", identity.gid);
    case SpawnStage::kCgroup:
      return absl::StrCat("join cgroup (",
                          absl::StrJoin(placement.procs_files, ", "), ")");
    default:
      return agent_internal::SpawnStageName(stage);
  }
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status));
  }
  return absl::StrCat("ended with wait status ", status);
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> ShimTaskLauncher::Create(
    ShimTaskLauncherOptions options) {
  if (options.state_dir.empty()) {
    return absl::InvalidArgumentError("task launcher: state_dir is empty");
  }
  std::error_code ec;
  fs::path dir = fs::absolute(options.state_dir, ec).lexically_normal();
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("task launcher: bad state_dir ", options.state_dir, ": ",
                     ec.message()));
  }
  std::string state_dir = dir.string();
  while (state_dir.size() > 1 && state_dir.back() == '/') state_dir.pop_back();
  // Task records name programs and arguments: root and the agent only.
  if (absl::Status s = EnsureDirectory(state_dir, kPrivateDirMode); !s.ok()) {
    return absl::Status(
        s.code(), absl::StrCat("task launcher: state_dir: ", s.message()));
  }
  if (::access(state_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("task launcher: state_dir ", state_dir));
  }
  if (!options.now) options.now = [] { return absl::Now(); };
  // The shim runs in "/": it needs an absolute path.
  if (!options.lease_path.empty()) {
    options.lease_path =
        fs::absolute(options.lease_path, ec).lexically_normal().string();
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("task launcher: bad lease_path ", options.lease_path,
                       ": ", ec.message()));
    }
  }
  return std::unique_ptr<ShimTaskLauncher>(
      new ShimTaskLauncher(std::move(options), std::move(state_dir)));
}

ShimTaskLauncher::ShimTaskLauncher(ShimTaskLauncherOptions options,
                                   std::string state_dir)
    : state_dir_(std::move(state_dir)),
      cgroups_(options.cgroups),
      groups_(options.groups),
      now_(std::move(options.now)),
      launch_timeout_(options.launch_timeout),
      lease_path_(std::move(options.lease_path)) {}

std::string ShimTaskLauncher::PathFor(const std::string& task_id,
                                      const std::string& suffix) const {
  return absl::StrCat(state_dir_, "/", task_id, suffix);
}

bool ShimTaskLauncher::HasExitFile(const std::string& task_id) const {
  return IsRegularFile(PathFor(task_id, ".exit"));
}

absl::StatusOr<TaskHandle> ShimTaskLauncher::Launch(const TaskSpec& spec) {
  if (absl::Status s = ValidateSpec(spec); !s.ok()) return s;
  const std::string& id = spec.task_id;
  {
    absl::MutexLock lock(&mu_);
    if (tasks_.contains(id) || launching_.contains(id)) {
      return absl::AlreadyExistsError(
          absl::StrCat(TaskPrefix(id),
                       "already known (running, or ended and not yet "
                       "forgotten)"));
    }
    if (IsRegularFile(PathFor(id, ".json"))) {
      return absl::AlreadyExistsError(
          absl::StrCat(TaskPrefix(id), "a record of it exists in ", state_dir_,
                       " (call Recover first)"));
    }
    launching_.insert(id);
  }
  absl::StatusOr<Task> task = LaunchUnlocked(spec);
  absl::MutexLock lock(&mu_);
  launching_.erase(id);
  if (!task.ok()) return task.status();
  TaskHandle handle;
  handle.task_id = id;
  handle.pid = task->record.pid;
  handle.pgid = task->record.pgid;
  handle.shim_pid = task->record.shim_pid;
  handle.start_time_ticks = task->record.start_ticks;
  handle.limits_applied = task->record.cgroup.limits_applied;
  handle.cgroup_note = task->record.cgroup.note;
  tasks_.emplace(id, *std::move(task));
  return handle;
}

absl::StatusOr<ShimTaskLauncher::Task> ShimTaskLauncher::LaunchUnlocked(
    const TaskSpec& spec) {
  const std::string& id = spec.task_id;
  absl::StatusOr<Identity> identity = ResolveIdentity(spec);
  if (!identity.ok()) return identity.status();

  // Working directory (absolute, created if missing).
  std::error_code ec;
  fs::path wd = spec.working_dir.empty() ? fs::current_path(ec)
                                         : fs::absolute(spec.working_dir, ec);
  if (ec) {
    return absl::ErrnoToStatus(ec.value(),
                               TaskPrefix(id) + "resolve working directory");
  }
  const std::string working_dir = wd.lexically_normal().string();
  // Another user's task makes its directory itself, after the switch (see
  // spawn.cc): root never creates a directory for it at a path it chose.
  if (!identity->change) {
    fs::create_directories(working_dir, ec);
    if (ec) {
      return absl::ErrnoToStatus(
          ec.value(), absl::StrCat(TaskPrefix(id), "create working directory ",
                                   working_dir));
    }
  }

  // Descriptors the task inherits.
  ScopedFd devnull(AboveStdio(::open("/dev/null", O_RDWR | O_CLOEXEC)));
  if (devnull.get() < 0) return TaskErrno(id, errno, "open /dev/null");
  ScopedFd out;
  ScopedFd err;
  if (absl::Status s = OpenOutput(id, spec.stdout_path, *identity, out);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = OpenOutput(id, spec.stderr_path, *identity, err);
      !s.ok()) {
    return s;
  }

  // cgroups.
  CgroupPlacement placement;
  placement.limits_applied = true;
  CgroupManager* cgroups = cgroups_ != nullptr ? cgroups_ : &no_cgroups_;
  if (!spec.limits.empty()) {
    absl::StatusOr<CgroupPlacement> p = cgroups->Prepare(id, spec.limits);
    if (!p.ok()) return p.status();
    placement = *std::move(p);
  }
  // The task's own group, for all its processes: best effort (without it,
  // its process group).
  std::string group_dir;
  if (groups_ != nullptr) {
    absl::StatusOr<std::string> group = groups_->Make(id);
    if (group.ok()) group_dir = *std::move(group);
  }
  auto drop_cgroups = [&] {
    if (!placement.dirs.empty()) (void)cgroups->Remove(placement);
    if (!group_dir.empty()) {
      TaskGroups::Kill(group_dir);
      if (TaskGroups::Remove(group_dir).ok()) groups_->RemoveParentIfUnused();
    }
  };

  // Everything the children need, prepared now.
  SpawnPlan plan;
  plan.argv_storage = spec.argv;
  std::map<std::string, std::string> env = spec.env;
  for (const char* name : {"PATH", "HOME", "LANG"}) {
    if (env.contains(name)) continue;
    if (const char* value = std::getenv(name); value != nullptr) {
      env[name] = value;
    }
  }
  for (const auto& [key, value] : env) {
    plan.env_storage.push_back(absl::StrCat(key, "=", value));
  }
  plan.Seal();
  auto path_it = env.find("PATH");
  plan.exec_paths =
      ExecCandidates(spec.argv[0], path_it != env.end() ? path_it->second
                                                        : kDefaultSearchPath);
  plan.working_dir = working_dir;
  plan.create_working_dir = identity->change;
  for (const std::string& dir : spec.create_dirs) {
    if (absl::StartsWith(dir, "/")) plan.create_dirs.push_back(dir);
  }
  plan.cgroup_procs_files = placement.procs_files;
  if (!group_dir.empty()) {
    plan.group_procs_file = absl::StrCat(group_dir, "/cgroup.procs");
    plan.cgroup_procs_files.push_back(plan.group_procs_file);
    const std::string kill_file = absl::StrCat(group_dir, "/cgroup.kill");
    if (::access(kill_file.c_str(), W_OK) == 0)
      plan.group_kill_file = kill_file;
  }
  plan.devnull_fd = devnull.get();
  plan.stdout_fd = out.get();
  plan.stderr_fd = err.get();
  plan.change_ids = identity->change;
  plan.uid = identity->uid;
  plan.gid = identity->gid;
  plan.groups = identity->groups;
  plan.state_dir = state_dir_;
  plan.pid_path = PathFor(id, ".pid");
  plan.pid_tmp_path = PathFor(id, ".pid.tmp");
  plan.exit_path = PathFor(id, ".exit");
  plan.exit_tmp_path = PathFor(id, ".exit.tmp");
  plan.lease_path = lease_path_;
  if (struct rlimit rl; ::getrlimit(RLIMIT_NOFILE, &rl) == 0) {
    plan.max_fd = static_cast<int>(std::min<rlim_t>(
        rl.rlim_cur == RLIM_INFINITY ? 65536 : rl.rlim_cur, 65536));
  }

  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    drop_cgroups();
    return TaskErrno(id, errno, "pipe");
  }
  ScopedFd report_read(AboveStdio(pipe_fds[0]));
  ScopedFd report_write(AboveStdio(pipe_fds[1]));
  if (report_read.get() < 0 || report_write.get() < 0) {
    drop_cgroups();
    return TaskErrno(id, errno, "pipe");
  }
  plan.report_fd = report_write.get();
  plan.keep_fds = {plan.devnull_fd, plan.stdout_fd, plan.stderr_fd,
                   plan.report_fd};
  std::sort(plan.keep_fds.begin(), plan.keep_fds.end());

  // The record exists before the shim does.
  TaskFileRecord record;
  record.task_id = id;
  record.phase = "starting";
  record.argv = spec.argv;
  record.working_dir = working_dir;
  record.stdout_path = spec.stdout_path;
  record.stderr_path = spec.stderr_path;
  record.launched_at = now_();
  record.cgroup = placement;
  record.group_dir = group_dir;
  const std::string json_path = PathFor(id, ".json");
  for (const char* suffix : {".exit", ".pid", ".exit.tmp", ".pid.tmp"}) {
    ::unlink(PathFor(id, suffix).c_str());
  }
  if (absl::Status s = WriteFileAtomically(
          json_path, agent_internal::TaskRecordToJson(record),
          kPrivateFileMode);
      !s.ok()) {
    drop_cgroups();
    return absl::Status(s.code(), absl::StrCat(TaskPrefix(id), s.message()));
  }
  auto remove_files = [&] {
    for (const char* suffix : {".exit", ".pid", ".exit.tmp", ".pid.tmp"}) {
      ::unlink(PathFor(id, suffix).c_str());
    }
    ::unlink(json_path.c_str());
  };

  // Fork with every signal blocked: no handler of the agent may run in the
  // forked copy; the shim keeps them blocked, the child resets them.
  sigset_t all;
  sigset_t old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  const pid_t shim = ::fork();
  if (shim == 0) agent_internal::RunShim(plan);
  const int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  report_write.Reset();
  out.Reset();
  err.Reset();
  devnull.Reset();
  if (shim < 0) {
    remove_files();
    drop_cgroups();
    return TaskErrno(id, fork_errno, "fork shim");
  }

  const SpawnOutcome outcome =
      ReadSpawnReports(report_read.get(), launch_timeout_);
  const std::optional<SpawnReport>& started = outcome.started;
  const std::optional<SpawnReport>& failed = outcome.failed;
  const bool timed_out = outcome.timed_out;
  if (failed || !started || timed_out) {
    if (timed_out) {
      ::kill(shim, SIGKILL);
      if (started) ::kill(-started->pid, SIGKILL);
    }
    int status;
    while (::waitpid(shim, &status, 0) < 0 && errno == EINTR) {
    }
    remove_files();
    drop_cgroups();
    if (timed_out) {
      return absl::DeadlineExceededError(
          absl::StrCat(TaskPrefix(id), "the task did not start within ",
                       absl::FormatDuration(launch_timeout_)));
    }
    if (!failed) {
      return absl::InternalError(absl::StrCat(TaskPrefix(id), "the shim ",
                                              DescribeWaitStatus(status),
                                              " before starting the task"));
    }
    return TaskErrno(id, failed->error,
                     DescribeStage(static_cast<SpawnStage>(failed->stage), spec,
                                   working_dir, *identity, placement));
  }

  record.phase = "running";
  record.pid = started->pid;
  record.pgid = started->pid;
  record.start_ticks = started->start_ticks;
  record.shim_pid = shim;
  record.shim_start_ticks =
      agent_internal::ProcStartTicks(shim).value_or(0);  // our unreaped child
  if (absl::Status s = WriteFileAtomically(
          json_path, agent_internal::TaskRecordToJson(record),
          kPrivateFileMode);
      !s.ok()) {
    // Without a durable record the task could not be recovered: undo it.
    ::kill(-record.pgid, SIGKILL);
    int status;
    while (::waitpid(shim, &status, 0) < 0 && errno == EINTR) {
    }
    remove_files();
    drop_cgroups();
    return absl::Status(s.code(), absl::StrCat(TaskPrefix(id), s.message()));
  }
  Task task;
  task.record = std::move(record);
  return task;
}

bool ShimTaskLauncher::Refresh(Task& task) {
  if (task.state != TaskInfo::State::kRunning) return false;
  const TaskFileRecord& r = task.record;
  const std::string& id = r.task_id;

  // The shim first: it writes the exit file before it exits, so once it is
  // known to be gone, a missing exit file stays missing.
  if (!task.shim_done) {
    const ProcessStatus shim = ProbeProcess(r.shim_pid, r.shim_start_ticks);
    if (shim == ProcessStatus::kGone) {
      task.shim_done = true;
    } else {
      // Verified to be our shim (same start time): reap it if it is our
      // child; ECHILD means another agent's shim, reaped by init.
      int status = 0;
      if (::waitpid(r.shim_pid, &status, WNOHANG) == r.shim_pid) {
        task.shim_done = true;
        task.shim_reaped = true;
        task.shim_wait_status = status;
      } else if (shim == ProcessStatus::kZombie) {
        task.shim_done = true;
      }
    }
  }

  const std::string exit_path = PathFor(id, ".exit");
  absl::StatusOr<std::string> text = ReadWholeFile(exit_path);
  if (text.ok()) {
    absl::StatusOr<ExitRecord> exit = ParseExitLine(*text);
    if (exit.ok()) {
      task.state = TaskInfo::State::kExited;
      task.exit = *exit;
      task.reason.clear();
    } else {
      task.state = TaskInfo::State::kLost;
      task.reason = absl::StrCat("task ", id, ": exit file ", exit_path,
                                 " is unreadable: ", exit.status().message());
    }
    return true;
  }

  if (!task.shim_done) return false;
  LoseUnsupervised(task);
  return true;
}

void ShimTaskLauncher::LoseUnsupervised(Task& task) {
  const TaskFileRecord& r = task.record;
  const std::string& id = r.task_id;
  const ProcessStatus proc = ProbeProcess(r.pid, r.start_ticks);
  const std::string shim_fate =
      task.shim_reaped
          ? absl::StrCat("its shim (pid ", r.shim_pid, ") ",
                         DescribeWaitStatus(task.shim_wait_status))
          : absl::StrCat("its shim (pid ", r.shim_pid, ") is gone");
  std::string process;
  if (r.pid <= 0) {
    process = "its process was never recorded";
  } else if (proc == ProcessStatus::kAlive) {
    process = absl::StrCat("its process ", r.pid, " was still running");
  } else if (proc == ProcessStatus::kGone &&
             agent_internal::ProcStartTicks(r.pid).has_value()) {
    process = absl::StrCat("its process ", r.pid,
                           " is gone (the pid now belongs to another process)");
  } else {
    process = absl::StrCat("its process ", r.pid, " is gone");
  }
  task.state = TaskInfo::State::kLost;
  task.reason =
      absl::StrCat("task ", id, ": supervisor (shim) died: ", shim_fate,
                   " and no exit status was recorded; ", process);
  // Without its shim nobody else kills what is left of the task. Its group
  // is its own; its process group is still its own while the leader runs
  // (same start time) or is a zombie, or when no process has the leader's
  // pid (a group id is only taken by a process with that pid).
  std::vector<std::string> killed;
  if (!r.group_dir.empty() && TaskGroups::Kill(r.group_dir) > 0) {
    killed.push_back("its cgroup");
  }
  if (r.pgid > 0 && (proc != ProcessStatus::kGone ||
                     !agent_internal::ProcStartTicks(r.pid).has_value())) {
    if (::kill(-r.pgid, 0) == 0 && ::kill(-r.pgid, SIGKILL) == 0) {
      killed.push_back("its process group");
    }
  }
  if (!killed.empty()) {
    absl::StrAppend(&task.reason, "; killed what was left of ",
                    absl::StrJoin(killed, " and "));
  }
}

ShimTaskLauncher::Task ShimTaskLauncher::Load(const std::string& task_id) {
  Task task;
  task.adopted = true;
  task.record.task_id = task_id;
  const std::string json_path = PathFor(task_id, ".json");
  absl::StatusOr<std::string> text = ReadWholeFile(json_path);
  absl::StatusOr<TaskFileRecord> record =
      text.ok() ? agent_internal::TaskRecordFromJson(*text)
                : absl::StatusOr<TaskFileRecord>(text.status());
  if (record.ok() && record->task_id != task_id) {
    record = absl::InvalidArgumentError(
        absl::StrCat("it names task \"", record->task_id, "\""));
  }
  if (record.ok()) {
    task.record = *std::move(record);
  } else if (!HasExitFile(task_id)) {
    task.state = TaskInfo::State::kLost;
    task.shim_done = true;
    task.reason = absl::StrCat("task ", task_id, ": record ", json_path,
                               " is unreadable: ", record.status().message());
    return task;
  }
  // The shim's pid file fills a record the agent could not complete.
  if (task.record.pid <= 0 || task.record.phase != "running") {
    absl::StatusOr<std::string> pid_text =
        ReadWholeFile(PathFor(task_id, ".pid"));
    if (pid_text.ok()) {
      absl::StatusOr<agent_internal::PidRecord> pids = ParsePidLine(*pid_text);
      if (pids.ok()) {
        task.record.pid = pids->pid;
        task.record.pgid = pids->pid;
        task.record.start_ticks = pids->start_ticks;
        task.record.shim_pid = pids->shim_pid;
        task.record.shim_start_ticks = pids->shim_start_ticks;
      }
    }
  }
  if (task.record.pid <= 0 && !HasExitFile(task_id)) {
    task.state = TaskInfo::State::kLost;
    task.shim_done = true;
    task.reason = absl::StrCat(
        "task ", task_id,
        ": the agent stopped while launching it, before its process was "
        "recorded");
    return task;
  }
  return task;
}

bool ShimTaskLauncher::ReapShim(const std::pair<pid_t, uint64_t>& shim) {
  const ProcessStatus status = ProbeProcess(shim.first, shim.second);
  if (status == ProcessStatus::kGone) return true;
  int wait_status;
  if (::waitpid(shim.first, &wait_status, WNOHANG) == shim.first) return true;
  return status == ProcessStatus::kZombie;  // not our child: init reaps it
}

void ShimTaskLauncher::ReapDetachedShims() {
  std::erase_if(detached_shims_, ReapShim);
}

ShimTaskLauncher::~ShimTaskLauncher() {
  absl::MutexLock lock(&mu_);
  std::vector<std::pair<pid_t, uint64_t>> ending = detached_shims_;
  for (const auto& [id, task] : tasks_) {
    if (!task.shim_done && task.state != TaskInfo::State::kRunning) {
      ending.emplace_back(task.record.shim_pid, task.record.shim_start_ticks);
    }
  }
  const absl::Time deadline = absl::Now() + absl::Milliseconds(200);
  for (;;) {
    std::erase_if(ending, ReapShim);
    if (ending.empty() || absl::Now() >= deadline) break;
    absl::SleepFor(absl::Milliseconds(2));
  }
}

TaskInfo ShimTaskLauncher::InfoOf(const Task& task) const {
  TaskInfo info;
  const TaskFileRecord& r = task.record;
  info.task_id = r.task_id;
  info.state = task.state;
  info.pid = r.pid;
  info.pgid = r.pgid;
  info.shim_pid = r.shim_pid;
  info.start_time_ticks = r.start_ticks;
  info.working_dir = r.working_dir;
  info.stdout_path = r.stdout_path;
  info.stderr_path = r.stderr_path;
  info.adopted = task.adopted;
  info.stopping =
      task.stop_requested && task.state == TaskInfo::State::kRunning;
  if (task.state == TaskInfo::State::kExited) {
    info.exit_code = task.exit.signaled ? -1 : task.exit.value;
    info.term_signal = task.exit.signaled ? task.exit.value : 0;
    info.ended_at = task.exit.ended_at;
  }
  info.reason = task.reason;
  info.limits_applied = r.cgroup.limits_applied;
  info.cgroup_note = r.cgroup.note;
  return info;
}

absl::Status ShimTaskLauncher::Signal(const std::string& task_id, int signal) {
  if (signal < 0 || signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat(TaskPrefix(task_id), "invalid signal ", signal));
  }
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(TaskPrefix(task_id), "unknown"));
  }
  Task& task = it->second;
  Refresh(task);
  if (task.state != TaskInfo::State::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat(TaskPrefix(task_id), "has already ended"));
  }
  if (::kill(-task.record.pgid, signal) != 0) {
    if (errno == ESRCH) {
      return absl::FailedPreconditionError(
          absl::StrCat(TaskPrefix(task_id), "process group ", task.record.pgid,
                       " has no processes left"));
    }
    return TaskErrno(task_id, errno,
                     absl::StrCat("kill process group ", task.record.pgid));
  }
  return absl::OkStatus();
}

absl::Status ShimTaskLauncher::Stop(const std::string& task_id,
                                    int first_signal, absl::Duration grace) {
  if (first_signal <= 0 || first_signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat(TaskPrefix(task_id), "invalid signal ", first_signal));
  }
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(TaskPrefix(task_id), "unknown"));
  }
  Task& task = it->second;
  Refresh(task);
  if (task.state != TaskInfo::State::kRunning) return absl::OkStatus();
  if (::kill(-task.record.pgid, first_signal) != 0 && errno != ESRCH) {
    return TaskErrno(task_id, errno,
                     absl::StrCat("kill process group ", task.record.pgid));
  }
  task.stop_requested = true;
  const absl::Time deadline = now_() + std::max(grace, absl::ZeroDuration());
  if (!task.kill_deadline || deadline < *task.kill_deadline) {
    task.kill_deadline = deadline;
  }
  return absl::OkStatus();
}

std::vector<TaskEvent> ShimTaskLauncher::Poll() {
  absl::MutexLock lock(&mu_);
  ReapDetachedShims();
  std::erase_if(stale_groups_, [this](const std::string& dir) {
    TaskGroups::Kill(dir);
    const bool removed = TaskGroups::Remove(dir).ok();
    if (removed && groups_ != nullptr) groups_->RemoveParentIfUnused();
    return removed;
  });
  const absl::Time now = now_();
  std::vector<TaskEvent> events;
  for (auto& [id, task] : tasks_) {
    if (task.state == TaskInfo::State::kRunning && task.kill_deadline &&
        now >= *task.kill_deadline) {
      const TaskFileRecord& r = task.record;
      // Only while the group is ours: its leader still exists (a zombie
      // included), or members are left and no exit was recorded.
      if (ProbeProcess(r.pid, r.start_ticks) != ProcessStatus::kGone ||
          (!HasExitFile(id) && ::kill(-r.pgid, 0) == 0)) {
        ::kill(-r.pgid, SIGKILL);
      }
      if (!r.group_dir.empty()) TaskGroups::Kill(r.group_dir);
      task.kill_deadline.reset();
    }
    Refresh(task);
    if (task.state == TaskInfo::State::kRunning || task.reported) continue;
    task.reported = true;
    TaskEvent event;
    event.task_id = id;
    if (task.state == TaskInfo::State::kExited) {
      event.kind = TaskEvent::Kind::kExited;
      event.exit_code = task.exit.signaled ? -1 : task.exit.value;
      event.term_signal = task.exit.signaled ? task.exit.value : 0;
      event.ended_at = task.exit.ended_at;
    } else {
      event.kind = TaskEvent::Kind::kLost;
      event.reason = task.reason;
    }
    events.push_back(std::move(event));
  }
  return events;
}

absl::StatusOr<std::vector<TaskInfo>> ShimTaskLauncher::Recover() {
  std::error_code ec;
  fs::directory_iterator it(state_dir_, ec);
  if (ec) {
    return absl::ErrnoToStatus(
        ec.value(), absl::StrCat("task launcher: read state_dir ", state_dir_));
  }
  std::set<std::string> records;
  std::vector<std::string> strays;  // .exit/.pid without a record
  std::set<std::string> others;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (absl::EndsWith(name, ".tmp")) continue;
    for (const char* suffix : {".json", ".exit", ".pid"}) {
      if (!absl::EndsWith(name, suffix)) continue;
      const std::string id =
          name.substr(0, name.size() - std::char_traits<char>::length(suffix));
      if (!ValidTaskId(id)) break;
      if (std::string(suffix) == ".json") {
        records.insert(id);
      } else {
        others.insert(id);
      }
      break;
    }
  }
  if (ec) {
    return absl::ErrnoToStatus(
        ec.value(), absl::StrCat("task launcher: read state_dir ", state_dir_));
  }

  absl::MutexLock lock(&mu_);
  for (const std::string& id : records) {
    if (tasks_.contains(id) || launching_.contains(id)) continue;
    // Gone meanwhile: a concurrent `Launch` of that id failed and cleaned up.
    if (!IsRegularFile(PathFor(id, ".json"))) continue;
    Task task = Load(id);
    Refresh(task);
    if (task.state != TaskInfo::State::kRunning) {
      task.reported = true;
    } else if (task.record.phase != "running") {
      // Adopted from the shim's pid file: complete the record (best effort;
      // the pid file stays authoritative until then).
      task.record.phase = "running";
      (void)WriteFileAtomically(PathFor(id, ".json"),
                                agent_internal::TaskRecordToJson(task.record),
                                kPrivateFileMode);
    }
    tasks_.emplace(id, std::move(task));
  }
  // Files of tasks forgotten halfway (the record goes first).
  for (const std::string& id : others) {
    if (records.contains(id) || tasks_.contains(id) ||
        launching_.contains(id)) {
      continue;
    }
    ::unlink(PathFor(id, ".exit").c_str());
    ::unlink(PathFor(id, ".pid").c_str());
  }
  std::vector<TaskInfo> infos;
  infos.reserve(tasks_.size());
  for (const auto& [id, task] : tasks_) infos.push_back(InfoOf(task));
  return infos;
}

absl::Status ShimTaskLauncher::Forget(const std::string& task_id) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat(TaskPrefix(task_id), "unknown"));
  }
  Task& task = it->second;
  Refresh(task);
  if (task.state == TaskInfo::State::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        TaskPrefix(task_id), "still running; stop it before forgetting it"));
  }
  // The record goes first: without it the other files are strays that the
  // next `Recover` removes.
  const std::string json_path = PathFor(task_id, ".json");
  if (::unlink(json_path.c_str()) != 0 && errno != ENOENT) {
    return TaskErrno(task_id, errno, absl::StrCat("remove ", json_path));
  }
  for (const char* suffix : {".exit", ".pid", ".json.tmp"}) {
    ::unlink(PathFor(task_id, suffix).c_str());
  }
  if (task.shim_done) {
    // A shim that is gone writes nothing more.
    ::unlink(PathFor(task_id, ".exit.tmp").c_str());
    ::unlink(PathFor(task_id, ".pid.tmp").c_str());
  } else {
    detached_shims_.emplace_back(task.record.shim_pid,
                                 task.record.shim_start_ticks);
  }
  if (const std::string& group = task.record.group_dir; !group.empty()) {
    TaskGroups::Kill(group);  // an ended task keeps nothing running
    if (!TaskGroups::Remove(group).ok()) {
      stale_groups_.push_back(group);
    } else if (groups_ != nullptr) {
      groups_->RemoveParentIfUnused();
    }
  }
  // Best effort: a cgroup that still holds processes (ones that left the
  // task's process group) stays.
  if (!task.record.cgroup.dirs.empty()) {
    if (cgroups_ != nullptr) {
      (void)cgroups_->Remove(task.record.cgroup);
    } else {
      for (const std::string& dir : task.record.cgroup.dirs) {
        ::rmdir(dir.c_str());
      }
    }
  }
  tasks_.erase(it);
  return absl::OkStatus();
}

std::vector<TaskInfo> ShimTaskLauncher::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<TaskInfo> infos;
  infos.reserve(tasks_.size());
  for (const auto& [id, task] : tasks_) infos.push_back(InfoOf(task));
  return infos;
}

}  // namespace loom
