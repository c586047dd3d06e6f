#include "loom/agent/shim_start.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/spawn.h"
#include "loom/agent/task_sandbox.h"
#include "loom/agent/task_setup.h"
#include "loom/common/atomic_file.h"

namespace loom::agent_internal {
namespace {

namespace fs = std::filesystem;

constexpr char kDefaultSearchPath[] = "/bin:/usr/bin";

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
    case SpawnStage::kMount: {
      std::vector<std::string> targets;
      for (const TaskMount& m : spec.sandbox->mounts) {
        targets.push_back(absl::StrCat(m.fstype, " on ", m.target));
      }
      return absl::StrCat("mount ", absl::StrJoin(targets, ", "));
    }
    case SpawnStage::kCgroup:
      return absl::StrCat("join cgroup (",
                          absl::StrJoin(placement.procs_files, ", "), ")");
    default:
      return SpawnStageName(stage);
  }
}

}  // namespace

absl::StatusOr<TaskFileRecord> StartShim(const TaskSpec& spec,
                                         const ShimStartOptions& options) {
  const std::string& id = spec.task_id;
  auto path_for = [&](const char* suffix) {
    return TaskFilePath(options.state_dir, id, suffix);
  };
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

  if (spec.sandbox) {
    if (absl::Status s = PrepareSandbox(id, *spec.sandbox); !s.ok()) return s;
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
  NoCgroupManager no_cgroups;
  CgroupManager* cgroups =
      options.cgroups != nullptr ? options.cgroups : &no_cgroups;
  if (!spec.limits.empty()) {
    absl::StatusOr<CgroupPlacement> p = cgroups->Prepare(id, spec.limits);
    if (!p.ok()) return p.status();
    placement = *std::move(p);
  }
  // The task's own group, for all its processes: best effort (without it,
  // its process group).
  std::string group_dir;
  if (options.groups != nullptr) {
    absl::StatusOr<std::string> group = options.groups->Make(id);
    if (group.ok()) group_dir = *std::move(group);
  }
  auto drop_cgroups = [&] {
    if (!placement.dirs.empty()) (void)cgroups->Remove(placement);
    if (!group_dir.empty()) {
      TaskGroups::Kill(group_dir);
      if (TaskGroups::Remove(group_dir).ok()) {
        options.groups->RemoveParentIfUnused();
      }
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
  if (spec.sandbox) {
    for (const TaskMount& m : spec.sandbox->mounts) {
      plan.mounts.push_back(
          {m.source, m.target, m.fstype, m.flags, m.data, m.user_target,
           m.tree_fd});
    }
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
  plan.no_new_privs = !spec.allow_privilege_escalation;
  plan.change_ids = identity->change;
  plan.uid = identity->uid;
  plan.gid = identity->gid;
  plan.groups = identity->groups;
  plan.state_dir = options.state_dir;
  plan.pid_path = path_for(".pid");
  plan.pid_tmp_path = path_for(".pid.tmp");
  plan.exit_path = path_for(".exit");
  plan.exit_tmp_path = path_for(".exit.tmp");
  plan.lease_path = options.lease_path;
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
  for (const SpawnPlan::Mount& m : plan.mounts) {
    if (m.tree_fd >= 0) plan.keep_fds.push_back(m.tree_fd);
  }
  std::sort(plan.keep_fds.begin(), plan.keep_fds.end());
  plan.keep_fds.erase(std::unique(plan.keep_fds.begin(), plan.keep_fds.end()),
                      plan.keep_fds.end());

  // The record exists before the shim does.
  TaskFileRecord record;
  record.task_id = id;
  record.phase = "starting";
  record.argv = spec.argv;
  record.working_dir = working_dir;
  record.stdout_path = spec.stdout_path;
  record.stderr_path = spec.stderr_path;
  record.launched_at = options.now();
  record.cgroup = placement;
  record.group_dir = group_dir;
  const std::string json_path = path_for(".json");
  for (const char* suffix : {".exit", ".pid", ".exit.tmp", ".pid.tmp"}) {
    ::unlink(path_for(suffix).c_str());
  }
  if (absl::Status s = WriteFileAtomically(json_path, TaskRecordToJson(record),
                                           kPrivateFileMode);
      !s.ok()) {
    drop_cgroups();
    return absl::Status(s.code(), absl::StrCat(TaskPrefix(id), s.message()));
  }
  auto remove_files = [&] {
    for (const char* suffix : {".exit", ".pid", ".exit.tmp", ".pid.tmp"}) {
      ::unlink(path_for(suffix).c_str());
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
  if (shim == 0) RunShim(plan);
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
      ReadSpawnReports(report_read.get(), options.launch_timeout);
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
                       absl::FormatDuration(options.launch_timeout)));
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
      ProcStartTicks(shim).value_or(0);  // our unreaped child
  if (absl::Status s = WriteFileAtomically(json_path, TaskRecordToJson(record),
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
  return record;
}

}  // namespace loom::agent_internal
