// What the cluster is used for: the dashboard's utilisation, projects'
// usage and quotas, and the controller's Prometheus metrics
// (docs/metrics.md).

#include <map>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "loom/server/controller.h"
#include "loom/server/task_slice.h"

namespace loom {

Controller::Utilization Controller::CurrentUtilization() const {
  absl::MutexLock lock(&mu_);
  Utilization u;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    u.total_gpus += cluster_->nodes[n].gpus;
    u.allocated_gpus += cluster_->nodes[n].gpus -
                        scheduler_->state().FreeGpus(static_cast<int>(n));
  }
  u.pending_jobs =
      scheduler_->pending_count() + static_cast<int>(backoff_.size());
  u.running_jobs = scheduler_->running_count();
  return u;
}

void Controller::WriteMetrics(MetricsWriter& out, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  // Jobs by state and project; pending jobs by reason; GPU-seconds.
  std::map<std::pair<std::string, std::string>, int> by_state;
  std::map<std::string, int> pending;
  std::map<std::pair<std::string, std::string>, UsageTotals> gpu_seconds;
  int pulling = 0;  // tasks waiting for their image
  for (const auto& [id, job] : jobs_) {
    ++by_state[{std::string(JobStateName(job.state)), job.spec.project}];
    if (job.state == JobState::kRunning && !job.running_time) {
      for (const TaskRecord& t : job.tasks) {
        if (t.pull && t.state == TaskRecord::State::kLaunching) ++pulling;
      }
    }
    // The ledger's totals (below) plus what it has not taken yet.
    for (const GpuSpan& span : UnledgeredSpans(job, now)) {
      UsageTotals& t = gpu_seconds[{job.spec.project, job.spec.user}];
      t.gpu_seconds += span.gpus * absl::ToDoubleSeconds(span.end - span.start);
      const GpuSpan lost = LostPart(span);
      t.lost_gpu_seconds +=
          lost.gpus * absl::ToDoubleSeconds(lost.end - lost.start);
    }
    if (job.state == JobState::kHeld) {
      ++pending["held"];
    } else if (job.state == JobState::kPending && job.not_before) {
      ++pending["restart_backoff"];
    } else if (job.state == JobState::kPending &&
               dep_waiting_.contains(job.id)) {
      ++pending["dependency"];
    } else if (job.state == JobState::kPending) {
      const SchedJob* sj = scheduler_->Find(job.id);
      ++pending[sj != nullptr
                    ? PendingReasonCodeName(scheduler_->ReasonFor(*sj).code)
                    : "unknown"];
    }
  }
  out.Family("loom_jobs", "Jobs by state and project.", MetricType::kGauge);
  for (const auto& [key, n] : by_state) {
    out.Sample("loom_jobs", {{"state", key.first}, {"project", key.second}}, n);
  }
  out.Family("loom_pending_jobs",
             "Jobs that wait (pending or held), by the reason's code.",
             MetricType::kGauge);
  for (const auto& [reason, n] : pending) {
    out.Sample("loom_pending_jobs", {{"reason", reason}}, n);
  }
  for (const auto& [key, s] : ledger_.totals()) {
    gpu_seconds[key].gpu_seconds += s.gpu_seconds;
    gpu_seconds[key].lost_gpu_seconds += s.lost_gpu_seconds;
  }
  out.Family("loom_gpu_seconds_total",
             "GPU-seconds allocated to jobs, by project and user: the usage "
             "ledger's (it outlives the jobs and restarts) plus the runs not "
             "in it yet.",
             MetricType::kCounter);
  for (const auto& [key, s] : gpu_seconds) {
    out.Sample("loom_gpu_seconds_total",
               {{"project", key.first}, {"user", key.second}}, s.gpu_seconds);
  }
  // Goodput (docs/accounting.md "Goodput"): of those, the work lost.
  out.Family("loom_lost_gpu_seconds_total",
             "Of loom_gpu_seconds_total, the GPU-seconds of work lost: after "
             "the last checkpoint of runs that failed, lost their node or "
             "were preempted.",
             MetricType::kCounter);
  std::map<std::string, UsageTotals> by_project;
  UsageTotals cluster;
  for (const auto& [key, s] : gpu_seconds) {
    out.Sample("loom_lost_gpu_seconds_total",
               {{"project", key.first}, {"user", key.second}},
               s.lost_gpu_seconds);
    by_project[key.first].gpu_seconds += s.gpu_seconds;
    by_project[key.first].lost_gpu_seconds += s.lost_gpu_seconds;
    cluster.gpu_seconds += s.gpu_seconds;
    cluster.lost_gpu_seconds += s.lost_gpu_seconds;
  }
  out.Family("loom_goodput_ratio",
             "GPU-seconds of work kept over GPU-seconds allocated, by project, "
             "since the usage ledger began.",
             MetricType::kGauge);
  for (const auto& [project, s] : by_project) {
    if (s.gpu_seconds <= 0) continue;
    out.Sample("loom_goodput_ratio", {{"project", project}},
               1.0 - s.lost_gpu_seconds / s.gpu_seconds);
  }
  out.Family("loom_cluster_goodput_ratio",
             "GPU-seconds of work kept over GPU-seconds allocated, all "
             "projects, since the usage ledger began (1 before any).",
             MetricType::kGauge);
  out.Sample("loom_cluster_goodput_ratio", {},
             cluster.gpu_seconds > 0
                 ? 1.0 - cluster.lost_gpu_seconds / cluster.gpu_seconds
                 : 1.0);
  // GPUs by pool, model and state; nodes by state.
  struct Gpus {
    int total = 0, allocated = 0, free = 0, unavailable = 0;
  };
  std::map<std::pair<std::string, std::string>, Gpus> gpus;
  std::map<std::string, int> nodes;
  for (const char* s : {"up", "suspect", "cordoned", "draining", "drained",
                        "drifted", "down", "unknown"}) {
    nodes[s] = 0;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const int n = static_cast<int>(i);
    const NodeSpec& spec = cluster_->nodes[n];
    const std::string state = NodeStateName(n);
    ++nodes[state];
    Gpus& g = gpus[{cluster_->pools[spec.pool].name,
                    cluster_->gpu_models[spec.gpu_model].name}];
    const int free = scheduler_->state().FreeGpus(n);
    g.total += spec.gpus;
    g.allocated += spec.gpus - free;
    (state == "up" ? g.free : g.unavailable) += free;
  }
  out.Family("loom_gpus",
             "GPUs by pool, model and state: allocated to jobs, free (on "
             "nodes that take work) or unavailable (free, on nodes that are "
             "down, suspect, cordoned, drained or drifted).",
             MetricType::kGauge);
  for (const auto& [key, g] : gpus) {
    for (const auto& [state, v] :
         {std::pair<const char*, int>{"total", g.total},
          {"allocated", g.allocated},
          {"free", g.free},
          {"unavailable", g.unavailable}}) {
      out.Sample(
          "loom_gpus",
          {{"pool", key.first}, {"gpu_model", key.second}, {"state", state}},
          v);
    }
  }
  WriteGpuPartMetrics(scheduler_->state(), *cluster_, out);
  out.Family("loom_nodes", "Nodes by state.", MetricType::kGauge);
  for (const auto& [state, n] : nodes) {
    out.Sample("loom_nodes", {{"state", state}}, n);
  }
  int drifted = 0;
  for (const Node& node : nodes_) drifted += node.drift.empty() ? 0 : 1;
  out.Family("loom_nodes_drifted",
             "Nodes whose reported software stack (driver, CUDA, loom) "
             "differs from their pool's declared stack, whatever their "
             "state.",
             MetricType::kGauge);
  out.Sample("loom_nodes_drifted", {}, drifted);
  int outdated = 0;
  for (const Node& node : nodes_) outdated += node.outdated.empty() ? 0 : 1;
  out.Family("loom_nodes_outdated",
             "Nodes still on the stack their pool declared before its last "
             "change: an upgrade is due; they keep working.",
             MetricType::kGauge);
  out.Sample("loom_nodes_outdated", {}, outdated);
  // Rolling maintenance: the nodes of runs not ended, by phase.
  std::map<std::string, int> phases;
  for (const auto& [id, m] : maintenances_) {
    if (!m.Active()) continue;
    for (const MaintenanceNode& n : m.nodes) ++phases[PhaseName(n.phase)];
  }
  out.Family("loom_maintenance_nodes",
             "Nodes of the active rolling maintenance, by phase (pending, "
             "draining, running, checking, done, failed, skipped).",
             MetricType::kGauge);
  for (const auto& [phase, n] : phases) {
    out.Sample("loom_maintenance_nodes", {{"phase", phase}}, n);
  }
  // Decisions, failures, recovery.
  out.Family("loom_scheduling_decisions_total",
             "Scheduling decisions since the server started: job starts and "
             "preemptions.",
             MetricType::kCounter);
  out.Sample("loom_scheduling_decisions_total", {}, counters_.decisions);
  out.Family("loom_jobs_purged_total",
             "Finished jobs moved from the live state to the accounting "
             "store (their retention over) since the server started.",
             MetricType::kCounter);
  out.Sample("loom_jobs_purged_total", {}, counters_.purged);
  out.Family("loom_preemptions_total",
             "Jobs preempted since the server started.", MetricType::kCounter);
  out.Sample("loom_preemptions_total", {}, counters_.preemptions);
  out.Family("loom_failures_detected_total",
             "Failures detected since the server started: node_down (no "
             "heartbeat), task_failed (a task exited non-zero or was killed), "
             "unhealthy (a node failed its health checks).",
             MetricType::kCounter);
  for (const char* kind : {"node_down", "task_failed", "unhealthy"}) {
    auto it = counters_.failures.find(kind);
    out.Sample("loom_failures_detected_total", {{"kind", kind}},
               it == counters_.failures.end() ? 0 : it->second);
  }
  out.Family("loom_recovery_seconds",
             "From a job's failure to every task of its next run running.",
             MetricType::kHistogram);
  out.HistogramSample("loom_recovery_seconds", {}, counters_.recovery);
  out.Family("loom_recovery_phase_seconds",
             "The phases of jobs' recoveries, from a run lost to the next "
             "run's first progress: detection, gang_stop, placement, launch, "
             "first_progress (docs/fault-tolerance.md).",
             MetricType::kHistogram);
  for (size_t i = 0; i < counters_.recovery_phases.size(); ++i) {
    out.HistogramSample("loom_recovery_phase_seconds",
                        {{"phase", std::string(kRecoveryPhases[i])}},
                        counters_.recovery_phases[i]);
  }
  out.Family("loom_queue_wait_seconds",
             "From submission to the first start of a job.",
             MetricType::kHistogram);
  out.HistogramSample("loom_queue_wait_seconds", {}, counters_.queue_wait);
  // Image pulls, a phase of container jobs' starts (docs/images.md).
  out.Family("loom_tasks_pulling_image",
             "Container tasks whose node pulls their image before they start.",
             MetricType::kGauge);
  out.Sample("loom_tasks_pulling_image", {}, pulling);
  out.Family("loom_image_pulls_total",
             "Image pulls that container tasks waited for, by result: ok (the "
             "task started) or failed (it ended before it ran).",
             MetricType::kCounter);
  out.Sample("loom_image_pulls_total", {{"result", "ok"}},
             counters_.image_pulls_ok);
  out.Sample("loom_image_pulls_total", {{"result", "failed"}},
             counters_.image_pulls_failed);
  out.Family("loom_image_pull_seconds",
             "From a container task's launch accepted (its node lacking the "
             "image) to the task running: the pull phase of its start.",
             MetricType::kHistogram);
  out.HistogramSample("loom_image_pull_seconds", {}, counters_.image_pull);
  WriteServiceMetrics(out, now);
  datasets_.WriteMetrics(out);
}

nlohmann::json Controller::ListProjects(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, std::pair<int, int>> counts;
  for (const auto& [id, job] : jobs_) {
    auto& c = counts[job.spec.project];
    if (job.state == JobState::kPending || job.state == JobState::kHeld) {
      ++c.first;
    }
    if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
      ++c.second;
    }
  }
  std::map<std::string, nlohmann::json> out;
  for (const ProjectSpec& p : cluster_->projects) {
    out[p.name] = {{"name", p.name},
                   {"quota_gpus", p.quota_gpus},
                   {"weight", p.weight},
                   {"running_gpus", 0},
                   {"gpu_seconds", 0.0}};
  }
  for (const ProjectUsage& u : scheduler_->Usage(now)) {
    nlohmann::json& j = out[u.name];
    j["name"] = u.name;
    if (!j.contains("quota_gpus")) {
      j["quota_gpus"] = 0;
      j["weight"] = u.weight;
    }
    j["running_gpus"] = u.running_gpus;
    j["gpu_seconds"] = u.gpu_seconds;
  }
  nlohmann::json list = nlohmann::json::array();
  for (auto& [name, j] : out) {
    auto it = counts.find(name);
    j["pending_jobs"] = it == counts.end() ? 0 : it->second.first;
    j["running_jobs"] = it == counts.end() ? 0 : it->second.second;
    list.push_back(std::move(j));
  }
  return {{"projects", std::move(list)}};
}

}  // namespace loom
