#include "loom/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "loom/sim/engine.h"

namespace loom {
namespace sim_internal {
namespace {

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

}  // namespace

void Engine::Record(double t) {
  const double x = t - window_start_;
  const double util = static_cast<double>(allocated_) / total_gpus_;
  const double queue = sched_.pending_count();
  auto& u = result_.utilization_series;
  auto& q = result_.queue_series;
  if (!u.empty() && x - u.back().first < resolution_) {
    u.back().second = util;
    q.back().second = std::max(q.back().second, queue);
    return;
  }
  u.emplace_back(x, util);
  q.emplace_back(x, queue);
}

GangResult Engine::GangStats(size_t i, double end) const {
  const SimJob& job = jobs_[i];
  const JobRun& r = runs_[i];
  const ExtraRun& x = extras_[r.extra];
  GangResult g;
  g.name = job.request.name;
  g.nodes = job.request.shape.tasks;
  g.spares = job.request.spares;
  g.finished = r.finish >= 0;
  const double stop = g.finished ? r.finish : end;
  g.jct_s = stop - job.submit_s;
  double useful = x.useful_s, restoring = x.restoring_s;
  double waiting = x.waiting_s;
  if (r.running) {
    // Still running when the run ended: count its current run so far.
    const double elapsed = end - r.run_start;
    useful += std::max(0.0, elapsed - r.overhead);
    restoring += std::min(elapsed, r.overhead);
  } else if (!g.finished && x.interrupted_at >= 0) {
    waiting += end - x.interrupted_at;
  }
  const int gpus = job.request.shape.TotalGpus();
  const double used = useful + x.redone_s + restoring;
  g.gpu_hours_allocated = gpus * used / 3600;
  g.gpu_hours_useful = gpus * useful / 3600;
  g.goodput = used > 0 ? useful / used : 1.0;
  g.interruptions = x.interruptions;
  g.recovered_on_spares = x.recovered;
  g.restart_wait_mean_s = x.waits > 0 ? x.waiting_s / x.waits : 0;
  g.restart_wait_max_s = x.wait_max_s;
  const double span = used + waiting;
  if (span > 0) {
    g.effective = useful / span;
    g.redone = x.redone_s / span;
    g.restoring = restoring / span;
    g.waiting = waiting / span;
  }
  return g;
}

SimResult Engine::Run() {
  const auto wall_start = std::chrono::steady_clock::now();
  result_.policy = std::string(sched_.policy().name());
  result_.slice_score =
      std::string(SliceScoreName(options_.scheduler_options.slice_score));
  // Initial fragmentation: every node.
  for (int n = 0; n < static_cast<int>(cluster_.nodes.size()); ++n) {
    MarkNode(n);
  }
  RefreshFragmentation();
  result_.jobs = static_cast<int64_t>(jobs_.size());
  if (!jobs_.empty()) {
    window_start_ = jobs_.front().submit_s;
    window_end_ = jobs_.back().submit_s;
  }
  last_t_ = window_start_;
  double slowest = 1.0, longest = 0;
  for (const GpuModel& m : cluster_.gpu_models) {
    slowest = std::min(slowest, std::max(m.speed, 1e-6));
  }
  for (const SimJob& j : jobs_) longest = std::max(longest, j.duration_s);
  give_up_after_ = std::max(365 * 86400.0, 10 * longest / slowest);
  resolution_ = std::max(1.0, (window_end_ - window_start_) / 4000.0);
  if (options_.fail_mtbf_s > 0) {
    for (size_t n = 0; n < cluster_.nodes.size(); ++n) {
      Push(window_start_ + Exp(NodeMtbf(static_cast<int>(n))), EventType::kFail,
           static_cast<int64_t>(n));
    }
  }
  size_t next_submit = 0;
  const double kNever = std::numeric_limits<double>::infinity();
  while (true) {
    // Node events alone do not keep the simulation going once the work is
    // done.
    const bool work_left = next_submit < jobs_.size() ||
                           sched_.running_count() > 0 ||
                           sched_.pending_count() > 0 || waiting_ > 0;
    if (!work_left) break;
    double t =
        next_submit < jobs_.size() ? jobs_[next_submit].submit_s : kNever;
    if (!events_.empty()) t = std::min(t, events_.top().t);
    if (t == kNever) break;  // pending jobs that nothing will ever free
    // Nothing arrives any more and no job has finished for far longer than
    // any job runs (say, a gang that needs every node while failures keep
    // some down): give up and report the rest as unfinished.
    if (next_submit == jobs_.size() && t - last_progress_ > give_up_after_) {
      break;
    }
    Advance(t);
    while (!events_.empty() && events_.top().t <= t) {
      const Event e = events_.top();
      events_.pop();
      switch (e.type) {
        case EventType::kFinish: {
          JobRun& r = runs_[e.a];
          if (r.running && r.run == e.b) Finish(e.a, t);
          break;
        }
        case EventType::kRepair:
          RepairNode(static_cast<int>(e.a), t);
          break;
        case EventType::kFail:
          FailNode(static_cast<int>(e.a), t);
          break;
        case EventType::kResubmit:
          Resubmit(static_cast<size_t>(e.a), t);
          break;
      }
    }
    const size_t first_new = next_submit;
    while (next_submit < jobs_.size() && jobs_[next_submit].submit_s <= t) {
      const size_t i = next_submit++;
      arrived_capacity_ +=
          jobs_[i].request.shape.slice.share_bytes > 0
              ? jobs_[i].request.shape.tasks *
                    static_cast<double>(
                        jobs_[i].request.shape.slice.share_bytes) /
                    share_unit_
              : jobs_[i].request.shape.TotalGpus();
      Submit(i, t);
    }
    // Preempted jobs stop at once here (their checkpoint is instant), so
    // the jobs they made room for start in a second pass at the same time.
    for (int round = 0; round < 4; ++round) {
      PassResult pass = sched_.Schedule(At(t));
      result_.passes += 1;
      for (JobId id : pass.started) Start(static_cast<size_t>(id - 1), t);
      PrefetchData(pass, t);
      SyncDatasets();
      for (const Preemption& p : pass.preempted) {
        // A reclaimed spare is killed at once and loses its work since
        // the last checkpoint; other victims checkpoint first.
        Interrupt(static_cast<size_t>(p.victim - 1), t,
                  p.immediate ? Stop::kKill : Stop::kPreempt);
        result_.preemptions += 1;
        result_.spare_reclaims += p.immediate ? 1 : 0;
      }
      if (pass.preempted.empty()) break;
    }
    if (options_.no_departures) {
      // The FGD experiment: a job that did not start on arrival is dropped.
      for (size_t i = first_new; i < next_submit; ++i) {
        if (!runs_[i].queued) continue;
        (void)sched_.Cancel(jobs_[i].request.id, At(t));
        runs_[i].queued = false;
        AddDemand(i, -1);
        result_.dropped += 1;
      }
    }
    RefreshFragmentation();
    if (!end_recorded_ && next_submit == jobs_.size()) {
      end_recorded_ = true;
      result_.gpu_allocation_end = capacity_allocated_ / total_gpus_;
      result_.frag_fgd_end_gpus = frag_total_;
      result_.arrived_demand = arrived_capacity_ / total_gpus_;
    }
    Record(t);
  }

  for (const JobRun& r : runs_) {
    if (r.running || r.queued || r.waiting) result_.unfinished += 1;
  }
  for (size_t i = 0; i < jobs_.size(); ++i) {
    if (jobs_[i].gang) result_.gangs.push_back(GangStats(i, last_t_));
  }
  std::sort(jct_.begin(), jct_.end());
  const double n = static_cast<double>(jct_.size());
  if (!jct_.empty()) {
    double sum = 0;
    for (double x : jct_) sum += x;
    result_.jct_mean_s = sum / n;
    result_.jct_p50_s = Percentile(jct_, 0.50);
    result_.jct_p95_s = Percentile(jct_, 0.95);
    result_.jct_p99_s = Percentile(jct_, 0.99);
    result_.wait_mean_s = wait_sum_ / n;
    result_.slowdown_mean = slowdown_sum_ / n;
  }
  result_.makespan_s = jct_.empty() ? 0 : last_finish_ - window_start_;
  const double window = window_end_ - window_start_;
  if (window > 0 && total_gpus_ > 0) {
    result_.gpu_utilization = alloc_area_window_ / (window * total_gpus_);
    result_.fragmentation_mean_gpus = frag_area_window_ / window;
    result_.fragmentation_mean = result_.fragmentation_mean_gpus / total_gpus_;
    result_.gpu_allocation_mean =
        capacity_area_window_ / (window * total_gpus_);
    result_.frag_fgd_mean_gpus = frag_fgd_area_window_ / window;
  } else if (total_gpus_ > 0) {
    // All arrivals at one instant: the state after them.
    result_.gpu_allocation_mean = result_.gpu_allocation_end;
    result_.frag_fgd_mean_gpus = result_.frag_fgd_end_gpus;
  }
  result_.gpu_hours_allocated = allocated_gpu_s_ / 3600;
  result_.gpu_hours_lost = lost_gpu_s_ / 3600;
  result_.goodput = allocated_gpu_s_ > 0 ? useful_gpu_s_ / allocated_gpu_s_ : 1;
  result_.jct_s = std::move(jct_);
  if (data_ != nullptr) result_.data = data_->Stats();
  result_.wall_seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - wall_start)
                             .count();
  return std::move(result_);
}

}  // namespace sim_internal

std::vector<std::string> FailureModelNames() { return {"llama3"}; }

absl::StatusOr<FailureModel> FindFailureModel(std::string_view name) {
  if (name == "llama3") {
    // "The Llama 3 Herd of Models" (Meta, 2024), section 3.3.4: in a 54-day
    // snapshot of pre-training on 16,384 H100 GPUs, 419 unexpected job
    // interruptions (one every 3.1 hours; 148 faulty GPUs, 72 HBM3, ~78%
    // hardware). Repairs and restarts are not given there: 4 hours to get
    // a node back and 5 minutes to restart a job are this model's
    // assumptions (docs/simulator.md).
    FailureModel m;
    m.name = "llama3";
    m.summary =
        "Llama 3 405B pre-training (Meta 2024): 419 unexpected interruptions "
        "in 54 days on 16,384 GPUs; repair 4h, restart 5min (assumed)";
    m.gpu_mtbf_s = 54.0 * 86400 * 16384 / 419;
    m.repair_s = 4 * 3600;
    m.restart_cost_s = 300;
    return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--failure-model: unknown model '", std::string(name),
                   "' (choose from none, llama3)"));
}

absl::StatusOr<SimResult> RunSimulation(const Cluster& cluster,
                                        const std::vector<SimJob>& jobs,
                                        const SimOptions& options) {
  absl::StatusOr<std::unique_ptr<QueuePolicy>> policy =
      MakeQueuePolicy(options.policy, options.policy_options);
  if (!policy.ok()) return policy.status();
  if (options.fail_mtbf_s < 0 || options.checkpoint_interval_s < 0 ||
      options.restart_cost_s < 0 || options.repair_s < 0) {
    return absl::InvalidArgumentError(
        "failure, checkpoint, repair and restart times must not be negative");
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    if ((i > 0 && jobs[i].submit_s < jobs[i - 1].submit_s) ||
        jobs[i].request.id != static_cast<JobId>(i + 1)) {
      return absl::InvalidArgumentError(
          "jobs must be sorted by submit time and numbered from 1");
    }
  }
  if (options.data.datasets > 0 &&
      (static_cast<int>(options.data.sizes.size()) != options.data.datasets ||
       !(options.data.cold_store_bps > 0) ||
       !(options.data.node_link_bps > 0) ||
       options.data.node_cache_bytes < 0)) {
    return absl::InvalidArgumentError(
        "datasets: sizes must be assigned (AssignDatasets), bandwidths "
        "positive and the cache size not negative");
  }
  sim_internal::Engine engine(cluster, jobs, options, *std::move(policy));
  return engine.Run();
}

}  // namespace loom
