#include "loom/agent/task_runner.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <system_error>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/image_step.h"
#include "loom/agent/json_values.h"
#include "loom/agent/unit_file.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kRollbackWait = absl::Seconds(10);

// A container task's bundles and what runc kept of them (a runc killed
// before it cleaned up): the overlay is gone with the task's mount
// namespace, its upper layer is not.
void RemoveContainerFiles(const AgentNode& node, const TaskUnit& unit) {
  if (unit.container == nullptr) return;
  for (const TaskProcess& p : unit.procs) {
    std::error_code ec;
    std::filesystem::remove_all(BundleDir(node, p.launcher_id), ec);
    std::filesystem::remove_all(
        absl::StrCat(node.root, "/runc/", p.launcher_id), ec);
  }
}

}  // namespace

// A launch between its request and the start of its processes: the
// request and what the steps decided, kept by the thread that pulls the
// task's image when the launch waits for one.
struct TaskRunner::PendingLaunch {
  PendingLaunch(AgentNode& node, const LaunchRequest& r, const AgentLog& log)
      : request(r), ctx{node, request, log, std::nullopt, ""} {}
  const LaunchRequest request;
  LaunchContext ctx;
};

TaskRunner::~TaskRunner() { Shutdown(); }

void TaskRunner::Shutdown() {
  probes_.Shutdown();
  std::vector<Fetcher> all;
  {
    absl::MutexLock lock(&fetch_mu_);
    all = std::move(fetchers_);
    fetchers_.clear();
  }
  for (Fetcher& f : all) f.thread.join();
}

absl::StatusOr<json> TaskRunner::Launch(AgentNode& node, const LaunchRequest& r,
                                        std::string* field) {
  auto launch = std::make_shared<PendingLaunch>(node, r, log_);
  LaunchContext& ctx = launch->ctx;
  bool fetch = false;
  for (const auto& step : options_.steps) {
    if (absl::Status s = step->Prepare(ctx, field); !s.ok()) {
      // Aborted: the node cannot run it now (a GPU's MIG mode change
      // waits), which its heartbeats say: the server hears it soon.
      if (absl::IsAborted(s)) Report(node);
      return s;
    }
  }
  for (const auto& step : options_.steps)
    fetch = fetch || step->NeedsFetch(ctx);
  const int count = r.processes;
  TaskUnit unit;
  unit.task_id = r.task_id;
  unit.job_id = r.job_id;
  unit.task_index = r.task_index;
  unit.gpus = r.gpus;
  unit.mig_uuid = ctx.mig_uuid;
  unit.launching = true;
  // A replica's port and probes are kept in a unit file too.
  unit.persisted = (count > 1 || r.port) && !node.units_dir.empty();
  unit.container = ctx.container;
  unit.readiness = r.readiness;
  unit.liveness = r.liveness;
  std::shared_ptr<ImagePullMeter> meter;
  if (fetch) {
    meter = std::make_shared<ImagePullMeter>();
    meter->image = r.container ? r.container->image_ref : "";
    meter->started = absl::Now();
    unit.pull = meter;
  }
  for (int k = 0; k < count; ++k) {
    TaskProcess p;
    p.launcher_id = count == 1 ? r.task_id : absl::StrCat(r.task_id, ".p", k);
    p.stdout_path = TaskLogPath(node, r.task_id, k, false);
    p.stderr_path = TaskLogPath(node, r.task_id, k, true);
    unit.procs.push_back(std::move(p));
  }
  json accepted;
  {
    absl::MutexLock lock(&node.mu);
    if (auto it = node.units.find(r.task_id); it != node.units.end()) {
      return absl::AlreadyExistsError(absl::StrCat(
          "task ", r.task_id, " is already known on node ", node.name, " (",
          it->second.pull != nullptr ? "waiting for its image"
          : it->second.launching     ? "being launched"
                                     : SummarizeTask(it->second).state,
          "); a task id is launched once"));
    }
    for (const TaskProcess& p : unit.procs) {
      if (auto it = node.by_launcher_id.find(p.launcher_id);
          it != node.by_launcher_id.end()) {
        return absl::AlreadyExistsError(
            absl::StrCat("task ", r.task_id, ": process id ", p.launcher_id,
                         " is taken by task ", it->second.first));
      }
    }
    if (r.port) {
      if (absl::Status s = AllocatePortLocked(node, unit, ctx); !s.ok()) {
        return s;
      }
    }
    for (int k = 0; k < count; ++k) {
      node.by_launcher_id[unit.procs[k].launcher_id] = {r.task_id, k};
    }
    if (fetch) accepted = TaskStatusJson(node.name, unit, /*detailed=*/true);
    node.units.emplace(r.task_id, std::move(unit));
  }
  if (!fetch) return StartProcesses(node, *launch, /*accepted=*/false);
  log_("info", node.name,
       absl::StrCat("task ", r.task_id, " (job ", r.job_id, ") waits for ",
                    r.container
                        ? absl::StrCat("image ", meter->image, ": pulling it")
                        : std::string("its datasets: filling the cache")));
  absl::MutexLock lock(&fetch_mu_);
  // Threads whose pull is over are joined here, so that they do not pile up.
  for (auto it = fetchers_.begin(); it != fetchers_.end();) {
    if (it->done->load()) {
      it->thread.join();
      it = fetchers_.erase(it);
    } else {
      ++it;
    }
  }
  auto done = std::make_shared<std::atomic<bool>>(false);
  fetchers_.push_back({std::thread([this, &node, launch, meter, done] {
                         FetchThenStart(node, *launch, meter);
                         done->store(true);
                       }),
                       done});
  return accepted;
}

void TaskRunner::FetchThenStart(AgentNode& node, PendingLaunch& launch,
                                const std::shared_ptr<ImagePullMeter>& meter) {
  absl::Status status;
  for (const auto& step : options_.steps) {
    if (!step->NeedsFetch(launch.ctx)) continue;
    status = step->Fetch(launch.ctx, *meter);
    if (!status.ok()) break;
  }
  const LaunchRequest& r = launch.request;
  bool report = false;
  {
    absl::MutexLock lock(&node.mu);
    auto it = node.units.find(r.task_id);
    // Stopped while it waited (and perhaps forgotten since): nothing to
    // start; the image goes back with `launch`.
    if (it == node.units.end() || it->second.pull != meter) return;
    TaskUnit& unit = it->second;
    unit.pull = nullptr;
    if (!status.ok()) {
      // What another run would meet too (a bad image, a dataset the
      // job's user may not read): refused, not lost.
      unit.refused =
          absl::IsInvalidArgument(status) || absl::IsPermissionDenied(status);
      EndUnstartedLocked(node, unit, Str(status.message()), &report);
    } else {
      unit.container = launch.ctx.container;
      unit.data_holds = launch.ctx.data_holds;
      unit.data_report = launch.ctx.data_report;
    }
  }
  if (!status.ok()) {
    if (report) Report(node);
    return;
  }
  log_("info", node.name,
       absl::StrCat("task ", r.task_id, ": ",
                    r.container ? absl::StrCat("image ", meter->image)
                                : std::string("datasets"),
                    " ready in ",
                    absl::FormatDuration(absl::Trunc(
                        absl::Now() - meter->started, absl::Milliseconds(1))),
                    "; starting it"));
  (void)StartProcesses(node, launch, /*accepted=*/true);
}

void TaskRunner::EndUnstartedLocked(AgentNode& node, TaskUnit& unit,
                                    const std::string& reason, bool* report) {
  unit.launching = false;
  unit.pull = nullptr;
  for (TaskProcess& p : unit.procs) {
    if (p.state != TaskProcess::State::kStarting) continue;
    p.state = TaskProcess::State::kLost;
    p.reason = reason;
    p.ended_at = absl::Now();
  }
  AfterChange(node, unit, report);
}

void TaskRunner::EndPullingLocked(AgentNode& node, TaskUnit& unit, int signal,
                                  bool* report) {
  log_("info", node.name,
       absl::StrCat("task ", unit.task_id, " stopped (", SignalText(signal),
                    ") while its image was pulled"));
  unit.launching = false;
  unit.pull = nullptr;
  unit.stopping = true;
  for (TaskProcess& p : unit.procs) {
    p.state = TaskProcess::State::kExited;
    p.exit_code = -1;
    p.term_signal = signal;
    p.ended_at = absl::Now();
    p.reason = "stopped while its image was pulled";
  }
  AfterChange(node, unit, report);
}

absl::StatusOr<json> TaskRunner::StartProcesses(AgentNode& node,
                                                PendingLaunch& launch,
                                                bool accepted) {
  const LaunchRequest& r = launch.request;
  const LaunchContext& ctx = launch.ctx;
  const int count = r.processes;
  std::vector<TaskProcess> procs;
  std::string unit_text;
  {
    absl::MutexLock lock(&node.mu);
    TaskUnit& unit = node.units[r.task_id];
    unit.started_at = absl::Now();
    procs = unit.procs;
    if (unit.persisted) unit_text = UnitFileText(unit);
  }
  // A launch answered before its processes started (it waited for its
  // image): its failure is the task's end, reported like any other.
  auto fail_accepted = [&](const absl::Status& failure) {
    bool report = false;
    {
      absl::MutexLock lock(&node.mu);
      if (auto it = node.units.find(r.task_id); it != node.units.end()) {
        // Rolled back but not confirmed gone: lost already.
        return;
      }
      TaskUnit ended;
      ended.task_id = r.task_id;
      ended.job_id = r.job_id;
      ended.task_index = r.task_index;
      ended.gpus = r.gpus;
      ended.procs = procs;
      ended.refused = absl::IsInvalidArgument(failure) ||
                      absl::IsFailedPrecondition(failure) ||
                      absl::IsPermissionDenied(failure);
      TaskUnit& u =
          node.units.emplace(r.task_id, std::move(ended)).first->second;
      EndUnstartedLocked(node, u, Str(failure.message()), &report);
    }
    if (report) Report(node);
  };
  if (!unit_text.empty()) {
    absl::Status s = WriteFileAtomically(UnitPath(node, r.task_id), unit_text,
                                         kPrivateFileMode);
    if (!s.ok()) {
      {
        absl::MutexLock lock(&node.mu);
        for (const TaskProcess& p : procs) {
          node.by_launcher_id.erase(p.launcher_id);
        }
        EndReplicaLocked(node, node.units[r.task_id]);
        node.units.erase(r.task_id);
      }
      absl::Status failure = absl::InternalError(absl::StrCat(
          "task ", r.task_id, ": cannot record it: ", Str(s.message())));
      if (accepted) fail_accepted(failure);
      return failure;
    }
  }
  absl::Status failure;
  int failed_k = 0;
  std::vector<pid_t> pids;
  for (int k = 0; k < count; ++k) {
    TaskSpec spec;
    spec.task_id = procs[k].launcher_id;
    spec.argv = r.argv;
    spec.env = r.env;
    spec.working_dir = r.working_dir;
    spec.allow_privilege_escalation = r.allow_privilege_escalation;
    for (const auto& step : options_.steps) {
      step->Apply(ctx, procs[k], k, spec);
    }
    absl::StatusOr<TaskHandle> handle = node.launcher->Launch(spec);
    if (!handle.ok()) {
      failure = handle.status();
      failed_k = k;
      break;
    }
    pids.push_back(handle->pid);
    absl::MutexLock lock(&node.mu);
    TaskProcess& p = node.units[r.task_id].procs[k];
    p.pid = handle->pid;
    if (p.state == TaskProcess::State::kStarting) {
      p.state = TaskProcess::State::kRunning;
    }
  }
  if (!failure.ok()) {
    const bool clean = RollBack(node, r.task_id);
    std::string message = Str(failure.message());
    if (count > 1) {
      message = absl::StrCat("process ", failed_k, " of ", count, ": ", message,
                             failed_k > 0 ? "; the processes already started "
                                            "were killed"
                                          : "");
    }
    if (!clean) {
      absl::StrAppend(&message,
                      "; some processes could not be confirmed gone: the "
                      "task stays reported until they are");
    }
    log_("warn", node.name,
         absl::StrCat("launch of task ", r.task_id, " failed: ", message));
    absl::Status result(failure.code(), message);
    if (accepted) fail_accepted(result);
    return result;
  }
  json result;
  bool report = false;
  {
    absl::MutexLock lock(&node.mu);
    TaskUnit& u = node.units[r.task_id];
    u.launching = false;
    if (u.stop_after_launch) {
      StopLocked(node, u, u.stop_after_launch->first,
                 u.stop_after_launch->second);
    }
    AfterChange(node, u, &report);
    if (!u.stopping && SummarizeTask(u).state == "running") {
      StartReplicaLocked(node, u);
    }
    result = TaskStatusJson(node.name, u, /*detailed=*/true);
  }
  log_("info", node.name,
       absl::StrCat(
           "launched task ", r.task_id, " (job ", r.job_id, ", task index ",
           r.task_index, ", ", count, count == 1 ? " process" : " processes",
           ", pid", count == 1 ? " " : "s ", absl::StrJoin(pids, ","),
           r.gpus.empty() ? ""
                          : absl::StrCat(", GPUs ", absl::StrJoin(r.gpus, ",")),
           ")"));
  // After a pull, the server hears of the start with the next heartbeat:
  // sent soon.
  if (report || accepted) Report(node);
  return result;
}

bool TaskRunner::RollBack(AgentNode& node, const std::string& task_id) {
  std::vector<std::string> started;
  std::vector<std::string> all;
  {
    absl::MutexLock lock(&node.mu);
    for (const TaskProcess& p : node.units[task_id].procs) {
      all.push_back(p.launcher_id);
      if (p.state != TaskProcess::State::kStarting) {
        started.push_back(p.launcher_id);
      }
    }
  }
  for (const std::string& id : started) {
    (void)node.launcher->Signal(id, SIGKILL);
  }
  const absl::Time deadline = absl::Now() + kRollbackWait;
  bool gone = false;
  while (true) {
    Poll(node);
    {
      absl::MutexLock lock(&node.mu);
      gone = true;
      for (const TaskProcess& p : node.units[task_id].procs) {
        if (p.state == TaskProcess::State::kRunning) gone = false;
      }
    }
    if (gone || absl::Now() > deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  absl::MutexLock lock(&node.mu);
  TaskUnit& unit = node.units[task_id];
  if (!gone) {
    unit.launching = false;
    for (TaskProcess& p : unit.procs) {
      if (p.state == TaskProcess::State::kStarting) {
        p.state = TaskProcess::State::kLost;
        p.reason = "never started: the launch failed";
      }
    }
    StopLocked(node, unit, SIGKILL, absl::ZeroDuration());
    return false;
  }
  for (const std::string& id : started) {
    absl::Status s = node.launcher->Forget(id);
    if (!s.ok() && !absl::IsNotFound(s)) {
      log_("warn", node.name,
           absl::StrCat("task ", task_id, ": forget ", id, ": ",
                        Str(s.message())));
    }
  }
  for (const TaskProcess& p : unit.procs) {
    ::unlink(p.stdout_path.c_str());
    ::unlink(p.stderr_path.c_str());
  }
  RemoveContainerFiles(node, unit);
  if (unit.persisted) ::unlink(UnitPath(node, task_id).c_str());
  EndReplicaLocked(node, unit);
  for (const std::string& id : all) node.by_launcher_id.erase(id);
  node.units.erase(task_id);
  return true;
}

void TaskRunner::Poll(AgentNode& node) {
  std::vector<TaskEvent> events = node.launcher->Poll();
  if (events.empty()) return;
  bool report = false;
  {
    absl::MutexLock lock(&node.mu);
    std::set<std::string> touched;
    for (const TaskEvent& event : events) {
      std::string id = ApplyEvent(node, event);
      if (!id.empty()) touched.insert(std::move(id));
    }
    for (const std::string& id : touched) {
      auto it = node.units.find(id);
      if (it != node.units.end()) AfterChange(node, it->second, &report);
    }
  }
  if (report) Report(node);
}

std::string TaskRunner::ApplyEvent(AgentNode& node, const TaskEvent& event) {
  auto it = node.by_launcher_id.find(event.task_id);
  if (it == node.by_launcher_id.end()) {
    log_("warn", node.name,
         absl::StrCat("process ", event.task_id,
                      " ended but belongs to no known task"));
    return "";
  }
  auto unit = node.units.find(it->second.first);
  if (unit == node.units.end() ||
      it->second.second >= static_cast<int>(unit->second.procs.size())) {
    return "";
  }
  TaskProcess& p = unit->second.procs[it->second.second];
  p.state = event.kind == TaskEvent::Kind::kExited ? TaskProcess::State::kExited
                                                   : TaskProcess::State::kLost;
  p.exit_code = event.exit_code;
  p.term_signal = event.term_signal;
  p.ended_at = event.ended_at;
  p.reason = event.reason;
  if (p.failed() && !unit->second.first_failure) {
    unit->second.first_failure = it->second.second;
  }
  return it->second.first;
}

// A distributed job whose rank died does not finish: a failed process stops
// its siblings.
void TaskRunner::AfterChange(AgentNode& node, TaskUnit& unit, bool* report) {
  if (unit.launching) return;
  const TaskSummary s = SummarizeTask(unit);
  if (s.state != "running") {
    EndReplicaLocked(node, unit);
    if (!unit.end_announced) {
      unit.end_announced = true;
      *report = true;
      std::string how =
          s.state == "lost"
              ? absl::StrCat("lost: ", s.reason)
              : (s.signal != 0
                     ? absl::StrCat("killed by ", SignalText(s.signal))
                     : absl::StrCat("exited with code ", s.exit_code));
      if (s.state != "lost" && !s.reason.empty()) {
        absl::StrAppend(&how, " (", s.reason, ")");
      }
      log_("info", node.name, absl::StrCat("task ", unit.task_id, " ", how));
    }
    return;
  }
  if (unit.stopping) return;
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const TaskProcess& p = unit.procs[k];
    if (!p.failed()) continue;
    log_("info", node.name,
         absl::StrCat(
             "task ", unit.task_id, ": process ", k,
             p.state == TaskProcess::State::kLost
                 ? absl::StrCat(" was lost (", p.reason, ")")
                 : (p.term_signal != 0
                        ? absl::StrCat(" was killed by ",
                                       SignalText(p.term_signal))
                        : absl::StrCat(" exited with code ", p.exit_code)),
             "; stopping the other processes"));
    StopLocked(node, unit, options_.stop_signal, options_.stop_grace);
    return;
  }
}

void TaskRunner::StopLocked(AgentNode& node, TaskUnit& unit, int signal,
                            absl::Duration grace) {
  for (const TaskProcess& p : unit.procs) {
    if (p.state != TaskProcess::State::kRunning) continue;
    absl::Status s = node.launcher->Stop(p.launcher_id, signal, grace);
    if (!s.ok()) {
      log_("warn", node.name,
           absl::StrCat("task ", unit.task_id, ": stop ", p.launcher_id, ": ",
                        Str(s.message())));
    }
  }
  unit.stopping = true;
}

void TaskRunner::ForgetLocked(AgentNode& node, const std::string& task_id) {
  auto it = node.units.find(task_id);
  if (it == node.units.end()) return;
  TaskUnit& unit = it->second;
  for (const TaskProcess& p : unit.procs) {
    absl::Status s = node.launcher->Forget(p.launcher_id);
    if (!s.ok() && !absl::IsNotFound(s)) {
      log_("warn", node.name,
           absl::StrCat("task ", task_id, ": forget ", p.launcher_id, ": ",
                        Str(s.message())));
    }
    node.by_launcher_id.erase(p.launcher_id);
  }
  RemoveContainerFiles(node, unit);
  if (unit.persisted) ::unlink(UnitPath(node, task_id).c_str());
  EndReplicaLocked(node, unit);
  node.units.erase(it);
}

absl::StatusOr<json> TaskRunner::Stop(AgentNode& node, const std::string& id,
                                      int signal, absl::Duration grace) {
  absl::ReleasableMutexLock lock(&node.mu);
  auto it = node.units.find(id);
  if (it == node.units.end()) {
    return absl::NotFoundError(
        absl::StrCat("task ", id, " is not known on node ", node.name));
  }
  TaskUnit& unit = it->second;
  bool report = false;
  if (unit.pull != nullptr) {
    EndPullingLocked(node, unit, signal, &report);
  } else if (unit.launching) {
    unit.stop_after_launch = std::make_pair(signal, grace);
  } else if (SummarizeTask(unit).state == "running") {
    log_("info", node.name,
         absl::StrCat("stopping task ", id, " (", SignalText(signal),
                      ", then SIGKILL after ", absl::FormatDuration(grace),
                      ")"));
    StopLocked(node, unit, signal, grace);
  }
  json status = TaskStatusJson(node.name, unit, /*detailed=*/true);
  if (report) {
    lock.Release();
    Report(node);
  }
  return status;
}

int TaskRunner::KillAll(AgentNode& node) {
  int killed = 0;
  bool report = false;
  absl::ReleasableMutexLock lock(&node.mu);
  for (auto& [id, unit] : node.units) {
    if (unit.pull != nullptr) {
      EndPullingLocked(node, unit, SIGKILL, &report);
      ++killed;
      continue;
    }
    if (unit.launching) {
      unit.stop_after_launch = std::make_pair(SIGKILL, absl::ZeroDuration());
      ++killed;
      continue;
    }
    if (SummarizeTask(unit).state != "running") continue;
    StopLocked(node, unit, SIGKILL, absl::ZeroDuration());
    ++killed;
  }
  lock.Release();
  if (report) Report(node);
  return killed;
}

void TaskRunner::ApplyServerOrders(AgentNode& node,
                                   const std::vector<std::string>& acks,
                                   const std::vector<std::string>& stops,
                                   const std::set<std::string>& reported) {
  bool report = false;
  absl::ReleasableMutexLock lock(&node.mu);
  for (const std::string& id : acks) {
    auto it = node.units.find(id);
    if (it == node.units.end() || it->second.launching) continue;
    if (SummarizeTask(it->second).state == "running") {
      log_("warn", node.name,
           absl::StrCat("the server acknowledged task ", id,
                        ", which still runs; ignored"));
      continue;
    }
    ForgetLocked(node, id);
  }
  for (const std::string& id : stops) {
    auto it = node.units.find(id);
    if (it == node.units.end()) continue;
    TaskUnit& unit = it->second;
    if (unit.pull != nullptr) {
      EndPullingLocked(node, unit, options_.stop_signal, &report);
      continue;
    }
    if (unit.launching) {
      unit.stop_after_launch =
          std::make_pair(options_.stop_signal, options_.stop_grace);
      continue;
    }
    if (SummarizeTask(unit).state != "running") {
      // Ended, and the server saw that (it was in the request this reply
      // answers) but does not want it: nothing is left to report.
      if (reported.contains(id)) {
        log_("info", node.name,
             absl::StrCat("forgetting ended task ", id,
                          ": the server does not expect it"));
        ForgetLocked(node, id);
      }
      continue;
    }
    if (unit.stopping) continue;
    log_("info", node.name,
         absl::StrCat("stopping task ", id, " (",
                      SignalText(options_.stop_signal), ", then SIGKILL after ",
                      absl::FormatDuration(options_.stop_grace),
                      "): the server asks"));
    StopLocked(node, unit, options_.stop_signal, options_.stop_grace);
  }
  lock.Release();
  if (report) Report(node);
}

namespace {

// Heartbeats in which a running task's output is looked for (a stat of
// its log files each) before the agent stops looking.
constexpr int kOutputChecks = 600;

bool HasOutput(const TaskUnit& unit) {
  for (const TaskProcess& p : unit.procs) {
    for (const std::string* path : {&p.stdout_path, &p.stderr_path}) {
      struct stat st;
      if (!path->empty() && ::stat(path->c_str(), &st) == 0 && st.st_size > 0) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

json TaskRunner::Statuses(AgentNode& node,
                          std::vector<std::string>* ended_ids) {
  json tasks = json::array();
  absl::MutexLock lock(&node.mu);
  for (auto& [id, unit] : node.units) {
    if (unit.launching && unit.pull == nullptr) continue;
    json status = TaskStatusJson(node.name, unit, /*detailed=*/false);
    if (status["state"] != "running" && status["state"] != "pulling") {
      ended_ids->push_back(id);
    } else if (status["state"] == "running") {
      if (!unit.output_seen && unit.output_checks < kOutputChecks) {
        ++unit.output_checks;
        unit.output_seen = HasOutput(unit);
      }
      if (unit.output_seen) status["output"] = true;
    }
    tasks.push_back(std::move(status));
  }
  return tasks;
}

void TaskRunner::ListDetailed(AgentNode& node, json* out) {
  absl::MutexLock lock(&node.mu);
  for (const auto& [id, unit] : node.units) {
    if (unit.launching && unit.pull == nullptr) continue;
    out->push_back(TaskStatusJson(node.name, unit, /*detailed=*/true));
  }
}

absl::StatusOr<json> TaskRunner::Get(AgentNode& node, const std::string& id) {
  absl::MutexLock lock(&node.mu);
  auto it = node.units.find(id);
  if (it == node.units.end() ||
      (it->second.launching && it->second.pull == nullptr)) {
    return absl::NotFoundError(
        absl::StrCat("task ", id, " is not known on node ", node.name));
  }
  return TaskStatusJson(node.name, it->second, /*detailed=*/true);
}

bool TaskRunner::ProcessEnded(AgentNode& node, const std::string& id, int k) {
  absl::MutexLock lock(&node.mu);
  auto it = node.units.find(id);
  if (it == node.units.end()) return true;
  if (k >= static_cast<int>(it->second.procs.size())) return true;
  return it->second.procs[k].ended();
}

absl::StatusOr<std::string> TaskRunner::LogPath(AgentNode& node,
                                                const std::string& id, int k,
                                                bool stderr_stream) {
  absl::MutexLock lock(&node.mu);
  auto it = node.units.find(id);
  if (it == node.units.end()) return std::string();
  if (k >= static_cast<int>(it->second.procs.size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "process: task ", id, " has ", it->second.procs.size(), " processes"));
  }
  const TaskProcess& p = it->second.procs[k];
  return stderr_stream ? p.stderr_path : p.stdout_path;
}

}  // namespace loom
