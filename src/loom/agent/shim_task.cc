#include "loom/agent/shim_task.h"

#include <signal.h>
#include <sys/wait.h>

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/task_group.h"

namespace loom::agent_internal {
namespace {

// The shim of `task` is gone and recorded no exit: kills what is left of the
// task and marks it lost.
void LoseUnsupervised(ShimTask& task) {
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
             ProcStartTicks(r.pid).has_value()) {
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
  if (r.pgid > 0 &&
      (proc != ProcessStatus::kGone || !ProcStartTicks(r.pid).has_value())) {
    if (::kill(-r.pgid, 0) == 0 && ::kill(-r.pgid, SIGKILL) == 0) {
      killed.push_back("its process group");
    }
  }
  if (!killed.empty()) {
    absl::StrAppend(&task.reason, "; killed what was left of ",
                    absl::StrJoin(killed, " and "));
  }
}

}  // namespace

bool Refresh(ShimTask& task, const std::string& state_dir) {
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

  const std::string exit_path = TaskFilePath(state_dir, id, ".exit");
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

ShimTask LoadShimTask(const std::string& state_dir,
                      const std::string& task_id) {
  ShimTask task;
  task.adopted = true;
  task.record.task_id = task_id;
  const std::string json_path = TaskFilePath(state_dir, task_id, ".json");
  absl::StatusOr<std::string> text = ReadWholeFile(json_path);
  absl::StatusOr<TaskFileRecord> record =
      text.ok() ? TaskRecordFromJson(*text)
                : absl::StatusOr<TaskFileRecord>(text.status());
  if (record.ok() && record->task_id != task_id) {
    record = absl::InvalidArgumentError(
        absl::StrCat("it names task \"", record->task_id, "\""));
  }
  if (record.ok()) {
    task.record = *std::move(record);
  } else if (!IsRegularFile(TaskFilePath(state_dir, task_id, ".exit"))) {
    task.state = TaskInfo::State::kLost;
    task.shim_done = true;
    task.reason = absl::StrCat("task ", task_id, ": record ", json_path,
                               " is unreadable: ", record.status().message());
    return task;
  }
  // The shim's pid file fills a record the agent could not complete.
  if (task.record.pid <= 0 || task.record.phase != "running") {
    absl::StatusOr<std::string> pid_text =
        ReadWholeFile(TaskFilePath(state_dir, task_id, ".pid"));
    if (pid_text.ok()) {
      absl::StatusOr<PidRecord> pids = ParsePidLine(*pid_text);
      if (pids.ok()) {
        task.record.pid = pids->pid;
        task.record.pgid = pids->pid;
        task.record.start_ticks = pids->start_ticks;
        task.record.shim_pid = pids->shim_pid;
        task.record.shim_start_ticks = pids->shim_start_ticks;
      }
    }
  }
  if (task.record.pid <= 0 &&
      !IsRegularFile(TaskFilePath(state_dir, task_id, ".exit"))) {
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

TaskInfo InfoOf(const ShimTask& task) {
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

bool ReapShim(const std::pair<pid_t, uint64_t>& shim) {
  const ProcessStatus status = ProbeProcess(shim.first, shim.second);
  if (status == ProcessStatus::kGone) return true;
  int wait_status;
  if (::waitpid(shim.first, &wait_status, WNOHANG) == shim.first) return true;
  return status == ProcessStatus::kZombie;  // not our child: init reaps it
}

}  // namespace loom::agent_internal
