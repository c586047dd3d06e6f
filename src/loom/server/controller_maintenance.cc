// Rolling maintenance (docs/maintenance.md): the runs in the store
// (`/maintenance/<id>`), the API's start, pause, resume and abort, the
// agents' reports of their commands, and each tick's step of the running
// one (`StepMaintenance`, maintenance.h), carried out on the nodes.

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loom/common/utf8.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

constexpr const char* kMaintenancePrefix = "/maintenance/";
constexpr size_t kMaxReportOutput = 4096;

std::string MaintenanceKey(int64_t id) {
  return absl::StrFormat("%s%020d", kMaintenancePrefix, id);
}

}  // namespace

absl::Status Controller::LoadMaintenances() {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(kMaintenancePrefix);
  if (!kvs.ok()) return kvs.status();
  for (const KeyValue& kv : *kvs) {
    absl::StatusOr<Maintenance> m = ReadMaintenanceRecord(kv.value);
    if (!m.ok()) {
      load_log_.push_back(nlohmann::json({{"event", "maintenance_unreadable"},
                                          {"key", kv.key},
                                          {"error", m.status().message()}})
                              .dump());
      continue;
    }
    next_maintenance_id_ = std::max(next_maintenance_id_, m->id + 1);
    maintenances_[m->id] = *std::move(m);
  }
  return absl::OkStatus();
}

absl::Status Controller::PersistMaintenance(const Maintenance& m) {
  absl::StatusOr<int64_t> rev = store_->Commit(
      {}, {Mutation::Put(MaintenanceKey(m.id), MaintenanceRecord(m))});
  if (!rev.ok()) {
    maintenance_unsaved_.insert(m.id);
    return rev.status();
  }
  maintenance_unsaved_.erase(m.id);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Controller::StartMaintenance(
    const nlohmann::json& body, const std::string& author, absl::Time now) {
  absl::MutexLock lock(&mu_);
  for (const auto& [id, m] : maintenances_) {
    if (m.Active()) {
      return absl::AbortedError(
          absl::StrCat("maintenance ", id, " is ", StateName(m.state),
                       m.InFlight() ? " with nodes under way" : "",
                       "; one runs at a time (`loom maintain abort` ends it)"));
    }
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> pools;
  for (const PoolSpec& p : target_->pools) pools.push_back({p.name, {}});
  std::vector<std::string> all;
  for (const NodeSpec& n : target_->nodes) {
    pools[n.pool].second.push_back(n.name);
    all.push_back(n.name);
  }
  absl::StatusOr<MaintenanceSettings> settings =
      ParseMaintenanceRequest(body, pools, all);
  if (!settings.ok()) return settings.status();
  Maintenance m;
  m.id = next_maintenance_id_;
  m.author = author;
  m.created = m.updated = now;
  m.settings = *std::move(settings);
  for (const std::string& name : m.settings.nodes) {
    MaintenanceNode n;
    n.name = name;
    n.since = now;
    m.nodes.push_back(std::move(n));
  }
  m.reason = absl::StrCat("starting: ", m.nodes.size(), " nodes in ",
                          m.batches_total(), " batches of ", m.settings.batch);
  if (absl::Status st = PersistMaintenance(m); !st.ok()) {
    maintenance_unsaved_.erase(m.id);
    return st;
  }
  ++next_maintenance_id_;
  auto [it, inserted] = maintenances_.emplace(m.id, std::move(m));
  return MaintenanceJson(it->second);
}

nlohmann::json Controller::ListMaintenances() const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (auto it = maintenances_.rbegin(); it != maintenances_.rend(); ++it) {
    out.push_back(MaintenanceJson(it->second, /*with_nodes=*/false));
  }
  return {{"maintenances", std::move(out)}};
}

absl::StatusOr<nlohmann::json> Controller::GetMaintenance(int64_t id) const {
  absl::MutexLock lock(&mu_);
  auto it = maintenances_.find(id);
  if (it == maintenances_.end()) {
    return absl::NotFoundError(absl::StrCat("no maintenance ", id));
  }
  return MaintenanceJson(it->second);
}

absl::StatusOr<nlohmann::json> Controller::ChangeMaintenance(
    int64_t id, const std::string& op, const std::string& who, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = maintenances_.find(id);
  if (it == maintenances_.end()) {
    return absl::NotFoundError(absl::StrCat("no maintenance ", id));
  }
  Maintenance next = it->second;
  std::vector<std::string> restore;
  absl::Status st;
  if (op == "pause") {
    st = PauseMaintenance(next, who, now);
  } else if (op == "resume") {
    st = ResumeMaintenance(next, who, now);
  } else if (op == "abort") {
    st = AbortMaintenance(next, who, now, &restore);
  } else {
    st = absl::InvalidArgumentError(
        absl::StrCat("unknown maintenance operation '", op, "'"));
  }
  if (!st.ok()) {
    return absl::IsFailedPrecondition(st) ? absl::AbortedError(st.message())
                                          : st;
  }
  if (absl::Status w = PersistMaintenance(next); !w.ok()) {
    maintenance_unsaved_.erase(id);
    return w;
  }
  it->second = std::move(next);
  for (const std::string& name : restore) RestoreNodeMode(it->second, name);
  return MaintenanceJson(it->second);
}

void Controller::RestoreNodeMode(const Maintenance& m,
                                 const std::string& name) {
  const int n = NodeIndex(name);
  if (n < 0) return;
  for (const MaintenanceNode& mn : m.nodes) {
    if (mn.name != name) continue;
    Node& node = nodes_[n];
    node.cordoned = mn.was_cordoned;
    node.draining = mn.was_draining;
    node.reason = mn.was_reason;
    (void)PersistNode(n);
    UpdateSchedulable(n);
  }
}

void Controller::ApplyMaintenanceReport(int n, const nlohmann::json& body) {
  auto it = body.find("maintenance");
  if (it == body.end() || !it->is_object()) return;
  const nlohmann::json& r = *it;
  auto str = [&](const char* key, size_t max) -> std::string {
    auto f = r.find(key);
    if (f == r.end() || !f->is_string()) return "";
    return std::string(TruncateUtf8(f->get_ref<const std::string&>(), max));
  };
  Node::CommandReport report;
  report.id = str("id", 128);
  report.state = str("state", 16);
  if (auto code = r.find("exit_code");
      code != r.end() && code->is_number_integer()) {
    const int64_t c = code->get<int64_t>();
    if (c >= -255 && c <= 255) report.exit_code = static_cast<int>(c);
  }
  report.output = str("output", kMaxReportOutput);
  if (report.id.empty()) return;
  nodes_[n].command = std::move(report);
}

MaintenanceFacts Controller::MaintenanceFactsOf(const std::string& name) const {
  MaintenanceFacts f;
  const int n = NodeIndex(name);
  if (n < 0 ||
      std::find(retiring_.begin(), retiring_.end(), name) != retiring_.end()) {
    return f;
  }
  const Node& node = nodes_[n];
  f.known = true;
  f.up = node.state == Node::State::kUp && !node.suspect;
  if (!node.health.empty()) {
    f.not_ready = absl::StrCat("unhealthy: ", absl::StrJoin(node.health, "; "));
  } else if (!node.drift.empty()) {
    f.not_ready = DriftReason(n);
  } else if (!node.outdated.empty()) {
    f.not_ready =
        absl::StrCat("outdated: ", absl::StrJoin(node.outdated, "; "));
  }
  f.jobs = static_cast<int>(scheduler_->JobsOnNode(n).size());
  f.gpus_allocated = static_cast<int>(cluster_->nodes[n].gpus) -
                     scheduler_->state().FreeGpus(n);
  f.unavailable = !f.up || node.cordoned || node.draining || node.unhealthy ||
                  !node.drift.empty();
  f.cordoned = node.cordoned;
  f.draining = node.draining;
  f.mode_reason = node.reason;
  f.report_id = node.command.id;
  f.report_state = node.command.state;
  f.report_exit_code = node.command.exit_code;
  f.report_output = node.command.output;
  return f;
}

void Controller::StepMaintenances(absl::Time now,
                                  std::vector<const JobRecord*>* dirty) {
  for (auto& [id, m] : maintenances_) {
    if (m.ended.has_value() && !m.Active()) {
      if (maintenance_unsaved_.count(id)) (void)PersistMaintenance(m);
      continue;
    }
    std::vector<MaintenanceFacts> facts;
    facts.reserve(m.nodes.size());
    for (const MaintenanceNode& n : m.nodes) {
      facts.push_back(MaintenanceFactsOf(n.name));
    }
    const MaintenanceOps ops = StepMaintenance(m, facts, now);
    const std::string why = absl::StrCat("maintenance ", id);
    for (const std::string& name : ops.cordon) {
      const int n = NodeIndex(name);
      if (n < 0) continue;
      nodes_[n].draining = true;
      nodes_[n].reason = MaintenanceDrainReason(m);
      (void)PersistNode(n);
      UpdateSchedulable(n);
    }
    for (const std::string& name : ops.evict) {
      const int n = NodeIndex(name);
      if (n >= 0) {
        EvictJobsOn(n, absl::StrCat("moved off ", name, " for ", why), now,
                    dirty);
      }
    }
    for (const std::string& name : ops.send) {
      const int n = NodeIndex(name);
      if (n < 0 || nodes_[n].address.empty()) continue;
      AgentAction a;
      a.kind = AgentAction::Kind::kMaintain;
      a.node = name;
      a.address = nodes_[n].address;
      a.task_id = m.CommandId(name);
      a.body = {
          {"node", name}, {"id", a.task_id}, {"command", m.settings.command}};
      actions_.push_back(std::move(a));
    }
    for (const std::string& name : ops.restore) RestoreNodeMode(m, name);
    if (ops.changed || maintenance_unsaved_.count(id)) {
      (void)PersistMaintenance(m);
    }
  }
}

void Controller::MaintenanceDelivered(const AgentAction& action,
                                      const absl::Status& status,
                                      absl::Time now) {
  if (status.ok() || absl::IsUnavailable(status) || absl::IsAborted(status)) {
    // Delivered, or to be sent again by the next steps (unreachable, or
    // not ready yet).
    return;
  }
  for (auto& [id, m] : maintenances_) {
    for (MaintenanceNode& n : m.nodes) {
      if (n.name != action.node ||
          n.phase != MaintenanceNode::Phase::kRunning ||
          m.CommandId(n.name) != action.task_id) {
        continue;
      }
      // Refused as asked (another command runs there, or the agent does not
      // know the node): the node fails, as a command that failed.
      n.phase = MaintenanceNode::Phase::kFailed;
      n.since = now;
      m.updated = now;
      n.message =
          absl::StrCat("the agent refused the command: ", status.message());
      if (m.settings.stop_on_failure &&
          m.state == Maintenance::State::kRunning) {
        m.state = Maintenance::State::kFailed;
        m.reason =
            absl::StrCat("stopped: ", n.name, " failed (", n.message, ")");
      }
      (void)PersistMaintenance(m);
    }
  }
}

void Controller::EvictJobsOn(int n, const std::string& why, absl::Time now,
                             std::vector<const JobRecord*>* dirty) {
  const std::string& name = cluster_->nodes[n].name;
  for (auto& [id, job] : jobs_) {
    if (job.state != JobState::kRunning) continue;
    if (std::none_of(job.tasks.begin(), job.tasks.end(),
                     [&](const TaskRecord& t) {
                       return t.node == name && TaskLive(t);
                     })) {
      continue;
    }
    job.preempted_by = 0;
    Evict(job, why, now);
    dirty->push_back(&job);
  }
}

}  // namespace loom
