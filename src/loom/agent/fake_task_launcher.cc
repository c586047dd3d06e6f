#include "loom/agent/fake_task_launcher.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom {
namespace {

// Appends `text` to `path` (created 0600), like the real launcher's output
// files. Best effort.
void AppendToFile(const std::string& path, const std::string& text) {
  if (path.empty()) return;
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return;
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

}  // namespace

FakeTaskLauncher::FakeTaskLauncher(FakeTaskLauncherOptions options)
    : default_duration_(options.default_duration),
      now_(std::move(options.now)) {}

absl::StatusOr<TaskHandle> FakeTaskLauncher::Launch(const TaskSpec& spec) {
  if (spec.task_id.empty()) {
    return absl::InvalidArgumentError("task id is empty");
  }
  const std::string prefix = absl::StrCat("task ", spec.task_id, ": ");
  if (spec.argv.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(prefix, "argv is empty"));
  }
  absl::Duration duration = default_duration_;
  if (auto it = spec.env.find("LOOM_FAKE_SECONDS"); it != spec.env.end()) {
    double seconds = 0;
    if (!absl::SimpleAtod(it->second, &seconds) || !std::isfinite(seconds) ||
        seconds < 0 || seconds > 1e9) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix,
                       "LOOM_FAKE_SECONDS must be a non-negative "
                       "number of seconds, got '",
                       it->second, "'"));
    }
    duration = absl::Seconds(seconds);
  }
  const absl::Time now = now_();
  TaskHandle handle;
  {
    absl::MutexLock lock(&mu_);
    if (tasks_.contains(spec.task_id)) {
      return absl::AlreadyExistsError(
          absl::StrCat(prefix, "already known (fake)"));
    }
    Task task;
    task.info.task_id = spec.task_id;
    task.info.pid = next_pid_++;
    task.info.pgid = task.info.pid;
    task.info.working_dir = spec.working_dir;
    task.info.stdout_path = spec.stdout_path;
    task.info.stderr_path = spec.stderr_path;
    task.end_at = now + duration;
    handle.task_id = spec.task_id;
    handle.pid = task.info.pid;
    handle.pgid = task.info.pgid;
    tasks_.emplace(spec.task_id, std::move(task));
  }
  AppendToFile(spec.stdout_path,
               absl::StrCat("loom fake task ", spec.task_id, ": would run [",
                            absl::StrJoin(spec.argv, " "), "]; exits 0 after ",
                            absl::FormatDuration(duration), "\n"));
  AppendToFile(spec.stderr_path, "");
  return handle;
}

void FakeTaskLauncher::Refresh(Task& task, absl::Time now) const {
  if (task.info.state == TaskInfo::State::kRunning && now >= task.end_at) {
    task.info.state = TaskInfo::State::kExited;
    task.info.exit_code = 0;
    task.info.term_signal = 0;
    task.info.ended_at = task.end_at;
    task.info.stopping = false;
  }
}

absl::Status FakeTaskLauncher::Signal(const std::string& task_id, int signal) {
  if (signal < 0 || signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task_id, ": invalid signal ", signal));
  }
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("task ", task_id, ": unknown"));
  }
  Task& task = it->second;
  const absl::Time now = now_();
  Refresh(task, now);
  if (task.info.state != TaskInfo::State::kRunning) {
    return absl::FailedPreconditionError(
        absl::StrCat("task ", task_id, ": has ended"));
  }
  if (signal == 0) return absl::OkStatus();
  task.info.state = TaskInfo::State::kExited;
  task.info.exit_code = -1;
  task.info.term_signal = signal;
  task.info.ended_at = now;
  task.info.stopping = false;
  return absl::OkStatus();
}

absl::Status FakeTaskLauncher::Stop(const std::string& task_id,
                                    int first_signal, absl::Duration grace) {
  if (first_signal <= 0 || first_signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task_id, ": invalid signal ", first_signal));
  }
  absl::Status status = Signal(task_id, first_signal);
  // Stopping an ended task is a no-op.
  if (absl::IsFailedPrecondition(status)) return absl::OkStatus();
  return status;
}

std::vector<TaskEvent> FakeTaskLauncher::Poll() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<TaskEvent> events;
  for (auto& [id, task] : tasks_) {
    Refresh(task, now);
    if (task.info.state == TaskInfo::State::kRunning || task.reported) {
      continue;
    }
    task.reported = true;
    TaskEvent event;
    event.task_id = id;
    event.kind = TaskEvent::Kind::kExited;
    event.exit_code = task.info.exit_code;
    event.term_signal = task.info.term_signal;
    event.ended_at = task.info.ended_at;
    events.push_back(std::move(event));
  }
  return events;
}

absl::StatusOr<std::vector<TaskInfo>> FakeTaskLauncher::Recover() {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<TaskInfo> infos;
  for (auto& [id, task] : tasks_) {
    Refresh(task, now);
    if (task.info.state != TaskInfo::State::kRunning) task.reported = true;
    infos.push_back(task.info);
  }
  return infos;
}

absl::Status FakeTaskLauncher::Forget(const std::string& task_id) {
  absl::MutexLock lock(&mu_);
  auto it = tasks_.find(task_id);
  if (it == tasks_.end()) {
    return absl::NotFoundError(absl::StrCat("task ", task_id, ": unknown"));
  }
  Refresh(it->second, now_());
  if (it->second.info.state == TaskInfo::State::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        "task ", task_id, ": still running; stop it before forgetting it"));
  }
  tasks_.erase(it);
  return absl::OkStatus();
}

std::vector<TaskInfo> FakeTaskLauncher::List() const {
  absl::MutexLock lock(&mu_);
  const absl::Time now = now_();
  std::vector<TaskInfo> infos;
  infos.reserve(tasks_.size());
  for (const auto& [id, task] : tasks_) {
    TaskInfo info = task.info;
    if (info.state == TaskInfo::State::kRunning && now >= task.end_at) {
      info.state = TaskInfo::State::kExited;
      info.exit_code = 0;
      info.ended_at = task.end_at;
    }
    infos.push_back(std::move(info));
  }
  return infos;
}

}  // namespace loom
