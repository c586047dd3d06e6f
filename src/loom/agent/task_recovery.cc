// `TaskRunner::Recover`: the task table of an agent that restarts, from what
// its launcher recovered (the shims that outlived the last agent) and the
// unit files of tasks of several processes.

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/agent_metrics.h"
#include "loom/agent/image_step.h"
#include "loom/agent/json_values.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_runner.h"
#include "loom/agent/unit_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

TaskProcess FromInfo(const TaskInfo& info) {
  TaskProcess p;
  p.launcher_id = info.task_id;
  p.stdout_path = info.stdout_path;
  p.stderr_path = info.stderr_path;
  p.pid = info.pid;
  switch (info.state) {
    case TaskInfo::State::kRunning:
      p.state = TaskProcess::State::kRunning;
      break;
    case TaskInfo::State::kExited:
      p.state = TaskProcess::State::kExited;
      break;
    case TaskInfo::State::kLost:
      p.state = TaskProcess::State::kLost;
      break;
  }
  p.exit_code = info.exit_code;
  p.term_signal = info.term_signal;
  p.ended_at = info.ended_at;
  p.reason = info.reason;
  return p;
}

// The unit files of `dir`, in name order.
std::vector<std::string> UnitFiles(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> files;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string file = it->path().filename().string();
    if (absl::EndsWith(file, ".json")) files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

absl::Status TaskRunner::Recover(AgentNode& node) {
  absl::StatusOr<std::vector<TaskInfo>> infos = node.launcher->Recover();
  if (!infos.ok()) {
    return absl::Status(infos.status().code(),
                        absl::StrCat("node ", node.name, ": recover tasks: ",
                                     Str(infos.status().message())));
  }
  std::map<std::string, const TaskInfo*> by_id;
  for (const TaskInfo& info : *infos) by_id[info.task_id] = &info;

  std::vector<TaskUnit> units;
  std::set<std::string> claimed;
  if (!node.units_dir.empty()) {
    for (const std::string& path : UnitFiles(node.units_dir)) {
      absl::StatusOr<std::string> text = agent_internal::ReadWholeFile(path);
      absl::StatusOr<TaskUnit> unit =
          text.ok() ? ParseUnitFile(*text)
                    : absl::StatusOr<TaskUnit>(text.status());
      if (!unit.ok()) {
        log_("warn", node.name,
             absl::StrCat("ignoring unreadable task file ", path,
                          " (renamed to .bad); its processes are reported "
                          "one by one"));
        std::error_code rename_ec;
        fs::rename(path, path + ".bad", rename_ec);
        continue;
      }
      for (TaskProcess& proc : unit->procs) {
        TaskProcess recorded = std::move(proc);
        if (auto found = by_id.find(recorded.launcher_id);
            found != by_id.end()) {
          proc = FromInfo(*found->second);
          claimed.insert(recorded.launcher_id);
        } else {
          proc.launcher_id = recorded.launcher_id;
          proc.state = TaskProcess::State::kLost;
          proc.reason = "the agent stopped before this process was started";
        }
        if (!recorded.stdout_path.empty()) {
          proc.stdout_path = recorded.stdout_path;
        }
        if (!recorded.stderr_path.empty()) {
          proc.stderr_path = recorded.stderr_path;
        }
      }
      units.push_back(*std::move(unit));
    }
  }
  for (const TaskInfo& info : *infos) {
    if (claimed.contains(info.task_id)) continue;
    TaskUnit unit;
    unit.task_id = info.task_id;
    // A one-process task has no unit file: its job is the first part of
    // the task id, its GPUs are in its environment.
    int64_t job = 0;
    if (absl::SimpleAtoi(info.task_id.substr(0, info.task_id.find('.')),
                         &job)) {
      unit.job_id = job;
    }
    if (info.state == TaskInfo::State::kRunning && info.pid > 0) {
      unit.gpus = VisibleGpusOf(info.pid);
    }
    unit.procs.push_back(FromInfo(info));
    units.push_back(std::move(unit));
  }

  for (TaskUnit& unit : units) unit.container = ReadoptContainer(node, unit);
  if (node.datasets != nullptr) {
    // The dataset versions the tasks read, held again (eviction skips
    // them); the records of tasks that are gone are dropped.
    std::set<std::string> ids;
    for (const TaskUnit& unit : units) ids.insert(unit.task_id);
    auto holds = node.datasets->Readopt(ids);
    for (TaskUnit& unit : units) {
      auto it = holds.find(unit.task_id);
      if (it == holds.end()) continue;
      unit.data_holds =
          std::make_shared<std::vector<std::shared_ptr<DatasetHold>>>(
              std::move(it->second));
    }
  }

  int running = 0;
  bool report = false;
  absl::MutexLock lock(&node.mu);
  for (TaskUnit& unit : units) {
    const std::string id = unit.task_id;
    if (node.units.contains(id)) {
      log_("warn", node.name,
           absl::StrCat("task ", id, " is recorded twice; keeping the first"));
      continue;
    }
    for (size_t k = 0; k < unit.procs.size(); ++k) {
      node.by_launcher_id[unit.procs[k].launcher_id] = {id,
                                                        static_cast<int>(k)};
    }
    TaskUnit& stored = node.units.emplace(id, std::move(unit)).first->second;
    AfterChange(node, stored, &report);
    RecoverReplicaLocked(node, stored);
    if (SummarizeTask(stored).state == "running") ++running;
  }
  if (!node.units.empty()) {
    log_("info", node.name,
         absl::StrCat("recovered ", node.units.size(), " tasks (", running,
                      " running, ", node.units.size() - running,
                      " ended and not yet acknowledged)"));
  }
  return absl::OkStatus();
}

}  // namespace loom
