// The controller's side of the agent protocol (docs/api.md): registrations
// and heartbeats (with the tasks and health they report), and the outcome
// of the actions the server carried to agents.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/common/utf8.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

std::optional<JobId> JobOfTask(const std::string& task_id) {
  JobId id = 0;
  const size_t dot = task_id.find('.');
  if (dot == std::string::npos ||
      !absl::SimpleAtoi(task_id.substr(0, dot), &id)) {
    return std::nullopt;
  }
  return id;
}

// Checks the types of an agent's registration or heartbeat body before any
// of it is used, so that a malformed body changes nothing (found by
// fuzz/server_api_fuzzer: a wrong type used to throw half-way through).
absl::Status CheckAgentBody(const nlohmann::json& body, bool registering) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  auto string_field = [&](const nlohmann::json& o, const char* key,
                          const std::string& where) -> absl::Status {
    auto it = o.find(key);
    if (it != o.end() && !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": must be a string"));
    }
    return absl::OkStatus();
  };
  for (const char* key : {"name", "address", "hostname"}) {
    if (absl::Status st = string_field(body, key, ""); !st.ok()) return st;
  }
  if (auto it = body.find("emulated"); it != body.end() && !it->is_boolean()) {
    return absl::InvalidArgumentError("emulated: must be true or false");
  }
  if (registering) {
    if (auto it = body.find("gpus"); it != body.end()) {
      if (!it->is_array()) {
        return absl::InvalidArgumentError("gpus: must be a list");
      }
      for (const nlohmann::json& g : *it) {
        if (!g.is_object()) {
          return absl::InvalidArgumentError("gpus: each must be an object");
        }
        if (absl::Status st = string_field(g, "model", "gpus[]."); !st.ok()) {
          return st;
        }
      }
    }
  }
  if (auto it = body.find("tasks"); it != body.end()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError("tasks: must be a list");
    }
    for (const nlohmann::json& t : *it) {
      if (!t.is_object()) {
        return absl::InvalidArgumentError("tasks: each must be an object");
      }
      for (const char* key : {"task_id", "state"}) {
        if (absl::Status st = string_field(t, key, "tasks[]."); !st.ok()) {
          return st;
        }
      }
    }
  }
  if (auto it = body.find("health");
      it != body.end() && !it->is_object() && !it->is_null()) {
    return absl::InvalidArgumentError("health: must be an object");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {
// The most of an agent's reason for a task's end that events keep.
constexpr size_t kMaxAgentReason = 500;
}  // namespace

nlohmann::json Controller::TaskReports(const std::string& node_name,
                                       const nlohmann::json& tasks,
                                       bool registering, absl::Time now,
                                       std::vector<const JobRecord*>* dirty) {
  nlohmann::json stop = nlohmann::json::array();
  nlohmann::json ack = nlohmann::json::array();
  absl::flat_hash_set<std::string> reported;
  for (const nlohmann::json& t : tasks) {
    const std::string task_id = t.value("task_id", "");
    const std::string state = t.value("state", "");
    reported.insert(task_id);
    std::optional<JobId> jid = JobOfTask(task_id);
    JobRecord* job = nullptr;
    TaskRecord* task = nullptr;
    if (jid) {
      auto it = jobs_.find(*jid);
      if (it != jobs_.end()) {
        job = &it->second;
        for (TaskRecord& r : job->tasks) {
          if (r.task_id == task_id && r.node == node_name) task = &r;
        }
      }
    }
    const bool pulling = state == "pulling";
    if (state != "running" && !pulling) ack.push_back(task_id);
    if (task == nullptr || !TaskLive(*task)) {
      // Not a task this node should run (any more): stop it.
      if (state == "running" || pulling) stop.push_back(task_id);
      continue;
    }
    if (pulling) {
      if (task->state == TaskRecord::State::kLaunching &&
          NotePull(*job, *task, t.value("pull", nlohmann::json()), now)) {
        dirty->push_back(job);
      }
      continue;
    }
    if (state == "running") {
      if (auto d = t.find("data"); d != t.end() && !task->data_counted) {
        NoteDataUse(*job, *task, *d, now);
      }
      if (task->state == TaskRecord::State::kLaunching) {
        task->state = TaskRecord::State::kRunning;
        PullDone(*job, *task, "", now);
        NoteRunning(*job, now);
        dirty->push_back(job);
      }
      // A service replica: its port (kept), its readiness (as of now).
      if (!job->service.empty()) NoteReplicaStatus(*job, *task, t, now, dirty);
      // Its first output: the first progress of a recovered run.
      if (auto o = t.find("output");
          o != t.end() && o->is_boolean() && o->get<bool>() && job->recovery &&
          job->recovery->running && !job->recovery->progress) {
        NoteProgress(*job, now);
        dirty->push_back(job);
      }
      continue;
    }
    task->state = state == "exited" ? TaskRecord::State::kExited
                                    : TaskRecord::State::kLost;
    if (t.contains("exit_code") && t["exit_code"].is_number_integer()) {
      task->exit_code = t["exit_code"].get<int>();
    }
    if (t.contains("signal") && t["signal"].is_number_integer() &&
        t["signal"].get<int>() != 0) {
      task->signal = t["signal"].get<int>();
    }
    std::string why;
    if (auto r = t.find("refused");
        r != t.end() && r->is_boolean() && r->get<bool>()) {
      auto reason = t.find("reason");
      // Accepted, then refused for a reason another run would meet too
      // (its image cannot be pulled): as a launch answered 400.
      job->launch_refused = true;
      why = absl::StrCat(
          "launch of task ", task->index, " on ", node_name, " refused: ",
          reason != t.end() && reason->is_string()
              ? std::string(TruncateUtf8(reason->get_ref<const std::string&>(),
                                         kMaxAgentReason))
              : std::string("(no reason given)"));
      if (job->state != JobState::kRunning) job->AddEvent(now, why);
    }
    PullDone(*job, *task, why.empty() ? "ended before it ran" : why, now);
    TaskEnded(*job, *task, now, why);
    dirty->push_back(job);
  }
  if (registering) {
    // Tasks this node should run that its agent does not know: lost. A task
    // still `launching` may never have reached the agent (a server killed
    // between writing the start and sending the launch): send the launch
    // again; the agent answers 409 for a task id it already has.
    for (auto& [id, job] : jobs_) {
      // By index: the end of the run may clear `tasks` (a requeue).
      for (size_t k = 0; k < job.tasks.size(); ++k) {
        TaskRecord& task = job.tasks[k];
        if (task.node != node_name || !TaskLive(task) ||
            reported.contains(task.task_id)) {
          continue;
        }
        if (task.state == TaskRecord::State::kLaunching) {
          actions_.push_back(LaunchAction(job, task));
          continue;
        }
        LostWithNode(
            job, task,
            absl::StrCat("task ", task.index, " was lost: the agent of ",
                         node_name, " registered again without it"),
            now);
        dirty->push_back(&job);
      }
    }
  }
  return {{"stop", std::move(stop)}, {"ack", std::move(ack)}};
}

absl::StatusOr<nlohmann::json> Controller::Register(const nlohmann::json& body,
                                                    absl::Time now) {
  if (absl::Status st = CheckAgentBody(body, true); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const std::string name = body.value("name", "");
  const int n = NodeIndex(name);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: node '", name, "' is not in the cluster spec of this server"));
  }
  const NodeSpec& spec = cluster_->nodes[n];
  const nlohmann::json gpus = body.value("gpus", nlohmann::json::array());
  if (!gpus.is_array() || static_cast<int>(gpus.size()) != spec.gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpus: node ", name, " reports ", gpus.is_array() ? gpus.size() : 0,
        " GPUs; the cluster spec says ", spec.gpus));
  }
  for (const nlohmann::json& g : gpus) {
    if (g.value("model", "") != cluster_->gpu_models[spec.gpu_model].name) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpus: node ", name, " has a ", g.value("model", "?"),
                       " GPU; the cluster spec says ",
                       cluster_->gpu_models[spec.gpu_model].name));
    }
  }
  const std::string address = body.value("address", "");
  if (address.empty()) {
    return absl::InvalidArgumentError("address: required (host:port)");
  }
  Node& node = nodes_[n];
  node.address = address;
  node.hostname = body.value("hostname", "");
  node.emulated = body.value("emulated", false);
  node.last_heartbeat = now;
  node.state = Node::State::kUp;
  node.suspect = false;
  if (node.reason.rfind("no heartbeat", 0) == 0 ||
      node.reason.rfind("no agent registered", 0) == 0) {
    node.reason.clear();
  }
  std::vector<const JobRecord*> dirty;
  nlohmann::json reply = TaskReports(
      name, body.value("tasks", nlohmann::json::array()), true, now, &dirty);
  UpdateSchedulable(n);
  ApplyLabels(n, body, /*registering=*/true);
  ApplyHealth(n, body, now, &dirty);
  ApplyMaintenanceReport(n, body);
  ApplyImages(n, body);
  ApplyDatasets(n, body);
  ApplyMigWaits(n, body);
  // Usable RDMA NICs (docs/agent.md "NICs"): those up; an agent that
  // reports no list leaves the cluster spec's count.
  if (auto nics = body.find("nics"); nics != body.end() && nics->is_array()) {
    int usable = 0;
    for (const nlohmann::json& nic : *nics) {
      if (nic.is_object() && nic.value("state", "") == "ACTIVE") ++usable;
    }
    scheduler_->SetNodeNics(n, usable);
  }
  (void)Persist(dirty);
  reply["heartbeat_interval_ms"] =
      absl::ToInt64Milliseconds(options_.heartbeat_interval);
  reply["fence_after_ms"] = absl::ToInt64Milliseconds(options_.fence_after);
  return reply;
}

absl::StatusOr<nlohmann::json> Controller::Heartbeat(const nlohmann::json& body,
                                                     absl::Time now) {
  if (absl::Status st = CheckAgentBody(body, false); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const std::string name = body.value("name", "");
  const int n = NodeIndex(name);
  if (n < 0) {
    return absl::NotFoundError(absl::StrCat("unknown node '", name, "'"));
  }
  Node& node = nodes_[n];
  if (node.state != Node::State::kUp) {
    // Down (or never registered): the agent must register again, so that
    // its tasks are reconciled before it gets new work.
    return absl::FailedPreconditionError(
        absl::StrCat("node ", name, " is not registered; register again"));
  }
  node.last_heartbeat = now;
  if (node.suspect) {
    node.suspect = false;
    UpdateSchedulable(n);
  }
  std::vector<const JobRecord*> dirty;
  nlohmann::json reply = TaskReports(
      name, body.value("tasks", nlohmann::json::array()), false, now, &dirty);
  ApplyLabels(n, body, /*registering=*/false);
  ApplyHealth(n, body, now, &dirty);
  ApplyMaintenanceReport(n, body);
  ApplyImages(n, body);
  ApplyDatasets(n, body);
  ApplyMigWaits(n, body);
  if (absl::Status st = Persist(dirty); !st.ok()) {
    // Do not acknowledge exits that are not on disk: the agent reports
    // them again.
    reply["ack"] = nlohmann::json::array();
  }
  return reply;
}

bool Controller::NotePull(JobRecord& job, TaskRecord& task,
                          const nlohmann::json& progress, absl::Time now) {
  const bool first = !task.pull.has_value();
  if (first) {
    task.pull.emplace();
    task.pull->since = now;
    task.pull->image = job.spec.container ? job.spec.container->image : "";
  }
  if (progress.is_object()) {
    auto bytes = [&](const char* key) -> int64_t {
      auto it = progress.find(key);
      return it != progress.end() && it->is_number_integer() &&
                     it->get<int64_t>() >= 0
                 ? it->get<int64_t>()
                 : 0;
    };
    task.pull->bytes_done = bytes("bytes_done");
    task.pull->bytes_total = bytes("bytes_total");
    if (auto it = progress.find("phase");
        it != progress.end() && it->is_string()) {
      task.pull->phase = std::string(TruncateUtf8(it->get<std::string>(), 16));
    }
  }
  if (first) {
    // Before its processes start a task pulls its image, fills its
    // dataset cache (docs/datasets.md), or both.
    std::string what;
    if (job.spec.container)
      what = absl::StrCat(" pulls image ", task.pull->image);
    if (!job.spec.data.empty()) {
      absl::StrAppend(&what, what.empty() ? "" : " and",
                      " fills its dataset cache");
    }
    job.AddEvent(now,
                 absl::StrCat("task ", task.index, ": node ", task.node, what));
  }
  return first;
}

void Controller::PullDone(JobRecord& job, TaskRecord& task,
                          const std::string& failure, absl::Time now) {
  if (!task.pull.has_value()) return;
  const double seconds = absl::ToDoubleSeconds(now - task.pull->since);
  if (failure.empty()) {
    ++counters_.image_pulls_ok;
    counters_.image_pull.Observe(seconds);
    job.AddEvent(
        now,
        absl::StrCat(
            "task ", task.index, ": node ", task.node, " pulled its image in ",
            absl::StrFormat("%.1f", seconds), " s",
            task.pull->bytes_total > 0
                ? absl::StrCat(" (", FormatBytesDecimal(task.pull->bytes_total),
                               ")")
                : ""));
  } else {
    ++counters_.image_pulls_failed;
  }
  task.pull.reset();
}

void Controller::ActionDone(const AgentAction& action,
                            const absl::Status& status, absl::Time now,
                            bool started) {
  if (action.kind == AgentAction::Kind::kPullImage) {
    absl::MutexLock lock(&mu_);
    ImagePullDelivered(action, status, started);
    return;
  }
  if (action.kind == AgentAction::Kind::kMaintain) {
    absl::MutexLock lock(&mu_);
    MaintenanceDelivered(action, status, now);
    return;
  }
  if (action.kind == AgentAction::Kind::kProbe) {
    absl::MutexLock lock(&mu_);
    ProbeDelivered(action, status, now);
    return;
  }
  if (action.kind != AgentAction::Kind::kLaunch) return;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(action.job);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  for (TaskRecord& t : job.tasks) {
    if (t.task_id != action.task_id || !TaskLive(t)) continue;
    if (status.ok() && job.state != JobState::kRunning) {
      // The job began stopping while this launch was on its way, and the
      // stop may have reached the agent first (actions go out on several
      // threads), finding no task: ask again now that the task is there.
      if (job.preempted) {
        StopTask(job, t, job.spec.checkpoint.signal, job.spec.checkpoint.grace);
      } else {
        StopTask(job, t, job.spec.cancel_signal, job.spec.cancel_grace);
      }
    }
    if (status.ok() && !started) {
      // Accepted (202): the node pulls the task's image first; heartbeats
      // say how far it is, and when it runs.
      if (t.state == TaskRecord::State::kLaunching &&
          NotePull(job, t, nlohmann::json(), now)) {
        (void)Persist({&job});
      }
      return;
    }
    if (status.ok()) {
      // The agent answered once every process was exec'd. Not persisted
      // here (one write per task would cost a sync each): the next tick
      // writes it, and a restarted server learns it from heartbeats anyway.
      if (t.state == TaskRecord::State::kLaunching) {
        t.state = TaskRecord::State::kRunning;
        NoteRunning(job, now);
        unsaved_.insert(job.id);
      }
      return;
    }
    t.state = TaskRecord::State::kLost;
    // Aborted: the agent was not ready for it (HTTP 503, as just after it
    // registered, or while a GPU's change of MIG mode waits): not the job's
    // fault, so it is queued again as a moved job is, without using up a
    // restart.
    if (absl::IsAborted(status) && job.state == JobState::kRunning) {
      job.preempted = true;
      job.launch_not_ready = true;
    }
    // InvalidArgument: the agent refused the task as specified (HTTP 400),
    // so another run would be refused too; anything else (no answer, an
    // agent error) may pass.
    const bool refused = absl::IsInvalidArgument(status);
    if (refused) job.launch_refused = true;
    const std::string why =
        absl::StrCat("launch of task ", t.index, " on ", t.node,
                     refused ? " refused: " : " failed: ", status.message());
    // The agent's reason (an unknown user, a bad working directory) says
    // more than "lost". TaskEnded records it when it stops the gang.
    if (job.state != JobState::kRunning) job.AddEvent(now, why);
    TaskEnded(job, t, now, why);
    (void)Persist({&job});
    return;
  }
}

void Controller::ApplyMigWaits(int n, const nlohmann::json& body) {
  std::vector<int> waits;
  if (auto it = body.find("mig_waits"); it != body.end() && it->is_array()) {
    for (const nlohmann::json& g : *it) {
      if (!g.is_number_integer()) continue;
      const int64_t gpu = g.get<int64_t>();
      if (gpu >= 0 && gpu < cluster_->nodes[n].gpus) {
        waits.push_back(static_cast<int>(gpu));
      }
    }
    std::sort(waits.begin(), waits.end());
    waits.erase(std::unique(waits.begin(), waits.end()), waits.end());
  }
  Node& node = nodes_[n];
  if (waits == node.mig_waits) return;
  node.mig_waits = std::move(waits);
  UpdateSchedulable(n);
}

void Controller::ApplyHealth(int n, const nlohmann::json& body, absl::Time now,
                             std::vector<const JobRecord*>* dirty) {
  constexpr size_t kMaxProblems = 16;
  constexpr size_t kMaxProblemLength = 300;
  auto health = body.find("health");
  if (health == body.end() || !health->is_object()) return;
  auto list = health->find("problems");
  if (list == health->end() || !list->is_array()) return;
  std::vector<std::string> problems;
  for (const nlohmann::json& p : *list) {
    if (!p.is_string() || problems.size() >= kMaxProblems) continue;
    const std::string problem = p.get<std::string>();
    problems.emplace_back(TruncateUtf8(problem, kMaxProblemLength));
  }
  Node& node = nodes_[n];
  node.health = problems;
  if (problems.empty() || node.unhealthy) return;
  // Drained until an operator uncordons it (as Slurm's DRAIN by a health
  // check program): a GPU that failed once is not trusted to be back.
  ++counters_.failures["unhealthy"];
  node.unhealthy = true;
  node.draining = true;
  node.reason = absl::StrCat("unhealthy: ", absl::StrJoin(problems, "; "));
  (void)PersistNode(n);
  UpdateSchedulable(n);
  EvictJobsOn(
      n, absl::StrCat("moved off ", cluster_->nodes[n].name, ": ", node.reason),
      now, dirty);
}

}  // namespace loom
