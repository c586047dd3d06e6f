#include "loom/agent/shim_task_launcher.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/task_setup.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_internal::InfoOf;
using agent_internal::IsRegularFile;
using agent_internal::LoadShimTask;
using agent_internal::ProbeProcess;
using agent_internal::ProcessStatus;
using agent_internal::ReapShim;
using agent_internal::Refresh;
using agent_internal::TaskErrno;
using agent_internal::TaskFileRecord;
using agent_internal::TaskPrefix;

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
      start_options_{.state_dir = state_dir_,
                     .cgroups = cgroups_,
                     .groups = groups_,
                     .now = now_,
                     .launch_timeout = options.launch_timeout,
                     .lease_path = std::move(options.lease_path)} {}

std::string ShimTaskLauncher::PathFor(const std::string& task_id,
                                      const std::string& suffix) const {
  return agent_internal::TaskFilePath(state_dir_, task_id, suffix);
}

bool ShimTaskLauncher::HasExitFile(const std::string& task_id) const {
  return IsRegularFile(PathFor(task_id, ".exit"));
}

absl::StatusOr<TaskHandle> ShimTaskLauncher::Launch(const TaskSpec& spec) {
  if (absl::Status s = agent_internal::ValidateSpec(spec); !s.ok()) return s;
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
  absl::StatusOr<TaskFileRecord> record =
      agent_internal::StartShim(spec, start_options_);
  absl::MutexLock lock(&mu_);
  launching_.erase(id);
  if (!record.ok()) return record.status();
  TaskHandle handle;
  handle.task_id = id;
  handle.pid = record->pid;
  handle.pgid = record->pgid;
  handle.shim_pid = record->shim_pid;
  handle.start_time_ticks = record->start_ticks;
  handle.limits_applied = record->cgroup.limits_applied;
  handle.cgroup_note = record->cgroup.note;
  Task task;
  task.record = *std::move(record);
  tasks_.emplace(id, std::move(task));
  return handle;
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
  Refresh(task, state_dir_);
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
  Refresh(task, state_dir_);
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
    Refresh(task, state_dir_);
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
      if (!agent_internal::ValidTaskId(id)) break;
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
    Task task = LoadShimTask(state_dir_, id);
    Refresh(task, state_dir_);
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
  Refresh(task, state_dir_);
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
