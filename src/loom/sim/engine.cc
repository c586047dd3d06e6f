// The simulator's job and node events (engine.h): submissions, starts
// (with their data), finishes, interruptions and restarts, node failures
// and repairs, and the utilisation and fragmentation they change.

#include "loom/sim/engine.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "loom/core/retry.h"
#include "loom/sched/frag_score.h"
#include "loom/sched/placement.h"

namespace loom::sim_internal {

SchedulerOptions SchedulerOptionsOf(const SimOptions& options) {
  SchedulerOptions s = options.scheduler_options;
  if (options.data.datasets > 0) s.data_locality = options.data.locality;
  return s;
}

void Engine::AddDemand(size_t i, int sign) {
  const JobShape& s = jobs_[i].request.shape;
  const size_t cls =
      s.gpu_model == kAnyGpuModel ? pending_demand_.size() - 1 : s.gpu_model;
  auto& m = pending_demand_[cls];
  if (sign > 0) {
    m[s.TotalGpus()] += 1;
  } else if (auto it = m.find(s.TotalGpus()); it != m.end()) {
    if (--it->second == 0) m.erase(it);
  }
}

void Engine::Advance(double t) {
  const double a = std::clamp(last_t_, window_start_, window_end_);
  const double b = std::clamp(t, window_start_, window_end_);
  if (b > a) {
    alloc_area_window_ += allocated_ * (b - a);
    capacity_area_window_ += capacity_allocated_ * (b - a);
    frag_fgd_area_window_ += frag_total_ * (b - a);
    // GPUs idle while a pending job that could use that many waits.
    double frag = 0;
    const auto& any = pending_demand_.back();
    for (size_t m = 0; m + 1 < pending_demand_.size(); ++m) {
      const int free = sched_.state().ModelFreeGpus(static_cast<int>(m));
      if (free == 0) continue;
      int min_demand = INT32_MAX;
      if (!pending_demand_[m].empty()) {
        min_demand = pending_demand_[m].begin()->first;
      }
      if (!any.empty()) min_demand = std::min(min_demand, any.begin()->first);
      if (min_demand <= free) frag += free;
    }
    frag_area_window_ += frag * (b - a);
  }
  last_t_ = t;
}

void Engine::Submit(size_t i, double t) {
  absl::StatusOr<SubmitOutcome> out = sched_.Submit(jobs_[i].request, At(t));
  if (!out.ok()) {
    result_.infeasible += 1;
    if (result_.infeasible_examples.size() < 5) {
      result_.infeasible_examples.push_back(absl::StrCat(
          "job ", jobs_[i].trace_id, ": ", out.status().message()));
    }
    return;
  }
  if (out->kind == SubmitOutcome::Kind::kInfeasible) {
    result_.infeasible += 1;
    if (result_.infeasible_examples.size() < 5) {
      result_.infeasible_examples.push_back(absl::StrCat(
          "job ", jobs_[i].trace_id, " (", jobs_[i].request.shape.TotalGpus(),
          " GPUs): ", out->reason));
    }
    return;
  }
  last_progress_ = t;
  runs_[i].remaining_work = jobs_[i].duration_s;

  runs_[i].queued = true;
  AddDemand(i, +1);
}

void Engine::Start(size_t i, double t) {
  JobRun& r = runs_[i];
  const SchedJob* sj = sched_.Find(jobs_[i].request.id);
  r.run += 1;
  r.running = true;
  r.queued = false;
  r.run_start = t;
  r.overhead = r.run > 1 ? options_.restart_cost_s : 0.0;
  for (const TaskPlacement& task : sj->placement.tasks) {
    if (task.repartition) {
      r.overhead += options_.mig_repartition_s;
      result_.mig_repartitions += 1;
      break;
    }
  }
  r.overhead += AcquireData(i, sj->placement, t);
  if (r.run > 1) result_.restarts += 1;
  if (ExtraRun* x = Extra(i); x != nullptr) {
    if (x->interrupted_at >= 0) {
      const double wait = t - x->interrupted_at;
      x->waiting_s += wait;
      x->wait_max_s = std::max(x->wait_max_s, wait);
      x->waits += 1;
      x->interrupted_at = -1;
    }
    if (r.recovering && sj->recovery_fallback.empty()) x->recovered += 1;
  }
  r.recovering = false;
  r.speed = cluster_.gpu_models[sj->placement.gpu_model].speed;
  if (r.first_start < 0) r.first_start = t;
  const double runtime = r.overhead + r.remaining_work / r.speed;
  allocated_ += jobs_[i].request.shape.TotalGpus();
  r.capacity = CapacityOf(sj->placement);
  capacity_allocated_ += r.capacity;
  MarkNodes(i);
  AddDemand(i, -1);
  if (options_.no_departures) return;
  Push(t + runtime, EventType::kFinish, static_cast<int64_t>(i), r.run);
}

double Engine::AcquireData(size_t i, const Placement& p, double t) {
  if (data_ == nullptr || jobs_[i].dataset < 0) return 0;
  std::vector<int> nodes;
  nodes.reserve(p.tasks.size());
  for (const TaskPlacement& task : p.tasks) nodes.push_back(task.node);
  std::sort(nodes.begin(), nodes.end());
  nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
  const double ready =
      data_->Acquire(static_cast<int64_t>(i), jobs_[i].dataset, nodes, t);
  return ready - t;
}

void Engine::PrefetchData(const PassResult& pass, double t) {
  if (data_ == nullptr || !options_.data.prefetch) return;
  for (const PassResult::Prefetch& p : pass.prefetch) {
    const int dataset = jobs_[static_cast<size_t>(p.job - 1)].dataset;
    if (dataset >= 0) data_->Prefetch(dataset, p.nodes, t);
  }
}

void Engine::SyncDatasets() {
  if (data_ == nullptr) return;
  for (int node : data_->TakeChanged()) {
    sched_.SetNodeDatasets(node, data_->Held(node));
  }
}

double Engine::CapacityOf(const Placement& p) const {
  const ClusterState& st = sched_.state();
  double c = 0;
  for (const TaskPlacement& t : p.tasks) {
    if (!t.partial()) {
      c += std::popcount(t.gpu_mask);
    } else if (t.share_bytes > 0) {
      c += static_cast<double>(t.share_bytes) /
           std::max<int64_t>(1, st.GpuMemory(t.node));
    } else if (t.mig_profile >= 0) {
      c += st.MigProfilesOn(t.node)[t.mig_profile].memory_slices / 8.0;
    }
  }
  return c;
}

void Engine::MarkNodes(size_t i) {
  if (const SchedJob* sj = sched_.Find(jobs_[i].request.id)) {
    for (const TaskPlacement& t : sj->placement.tasks) MarkNode(t.node);
  }
}

void Engine::RefreshFragmentation() {
  for (int node : dirty_list_) {
    dirty_[node] = false;
    const double f =
        ExpectedFragmentation(NodeFreeOf(sched_.state(), node), target_);
    frag_total_ += f - node_frag_[node];
    node_frag_[node] = f;
  }
  dirty_list_.clear();
}

void Engine::Finish(size_t i, double t) {
  JobRun& r = runs_[i];
  const SimJob& job = jobs_[i];
  const int gpus = job.request.shape.TotalGpus();
  const double elapsed = t - r.run_start;
  allocated_gpu_s_ += gpus * elapsed;
  useful_gpu_s_ += gpus * std::max(0.0, elapsed - r.overhead);
  result_.gpu_hours_by_project[job.request.project] += gpus * elapsed / 3600;
  allocated_ -= gpus;
  capacity_allocated_ -= r.capacity;
  MarkNodes(i);
  ReleaseData(i);
  r.running = false;
  r.finish = t;
  if (ExtraRun* x = Extra(i); x != nullptr) {
    x->useful_s += std::max(0.0, elapsed - r.overhead);
    x->restoring_s += std::min(elapsed, r.overhead);
  }
  (void)sched_.Finish(job.request.id, At(t));
  const double jct = t - job.submit_s;
  jct_.push_back(jct);
  wait_sum_ += r.first_start - job.submit_s;
  slowdown_sum_ += std::max(1.0, jct / std::max(job.duration_s, 10.0));
  last_finish_ = std::max(last_finish_, t);
  last_progress_ = t;
  result_.finished += 1;
  if (options_.progress != nullptr) {
    options_.progress->store(result_.finished, std::memory_order_relaxed);
  }
}

void Engine::Interrupt(size_t i, double t, Stop how) {
  JobRun& r = runs_[i];
  const SimJob& job = jobs_[i];
  const int gpus = job.request.shape.TotalGpus();
  const double elapsed = t - r.run_start;
  const double productive = std::max(0.0, elapsed - r.overhead);
  double kept = productive;
  if (how != Stop::kPreempt) {
    const double c = options_.checkpoint_interval_s;
    kept = c > 0 ? std::floor(productive / c) * c : 0.0;
    lost_gpu_s_ += gpus * (elapsed - kept);
  }
  r.remaining_work = std::max(0.0, r.remaining_work - kept * r.speed);
  allocated_gpu_s_ += gpus * elapsed;
  useful_gpu_s_ += gpus * kept;
  result_.gpu_hours_by_project[job.request.project] += gpus * elapsed / 3600;
  allocated_ -= gpus;
  capacity_allocated_ -= r.capacity;
  MarkNodes(i);
  ReleaseData(i);
  r.running = false;
  if (ExtraRun* x = Extra(i); x != nullptr) {
    x->useful_s += kept;
    x->restoring_s += std::min(elapsed, r.overhead);
    x->redone_s += elapsed - kept - std::min(elapsed, r.overhead);
    if (how == Stop::kNodeLost) {
      x->interruptions += 1;
      x->interrupted_at = t;
    }
  }
  // Losing a node is not the job's fault: it is requeued, as the server
  // does (`Controller::LostWithNode`), up to `max_node_loss_requeues`
  // times; later losses count as its own failures.
  bool failure = false;
  if (how == Stop::kNodeLost) {
    failure = r.node_losses >= options_.max_node_loss_requeues;
    if (!failure) r.node_losses += 1;
  }
  // The restart policy, as the server applies it.
  const RetryDecision retry =
      DecideRetry(options_.restart, options_.requeue,
                  failure ? RunEnd::kFailed : RunEnd::kRequeued,
                  r.restarts_used, r.requeues);
  const JobId id = job.request.id;
  if (!retry.again) {
    (void)sched_.Finish(id, At(t));
    result_.failed += 1;
    last_progress_ = t;
    return;
  }
  ++(failure ? r.restarts_used : r.requeues);
  if (retry.wait <= absl::ZeroDuration()) {
    r.queued = true;
    (void)sched_.Requeue(id, At(t));
    // With spares, a job that lost a node may wait for its recovery
    // placement (`Scheduler::Requeue`).
    const SchedJob* sj = sched_.Find(id);
    r.recovering = sj != nullptr && sj->recovering();
    AddDemand(i, +1);
    return;
  }
  // Out of the queue until the backoff is over (the server does the same),
  // then submitted again with the nodes it held, as the server does.
  if (const SchedJob* sj = sched_.Find(id);
      sj != nullptr && job.request.spares > 0) {
    ExtraRun* x = Extra(i);
    x->last_nodes.clear();
    for (const TaskPlacement& task : sj->placement.tasks) {
      x->last_nodes.push_back(node_up_[task.node] ? task.node : -1);
    }
    x->spare_nodes = sj->spare_nodes;
  }
  (void)sched_.Finish(id, At(t));
  r.waiting = true;
  waiting_ += 1;
  Push(t + absl::ToDoubleSeconds(retry.wait), EventType::kResubmit,
       static_cast<int64_t>(i));
}

void Engine::Resubmit(size_t i, double t) {
  JobRun& r = runs_[i];
  r.waiting = false;
  waiting_ -= 1;
  JobRequest request = jobs_[i].request;
  if (ExtraRun* x = Extra(i); x != nullptr) {
    request.last_nodes = std::move(x->last_nodes);
    request.spare_nodes = std::move(x->spare_nodes);
    x->last_nodes.clear();
    x->spare_nodes.clear();
  }
  if (!sched_.Submit(request, At(t)).ok()) {
    result_.failed += 1;
    return;
  }
  const SchedJob* sj = sched_.Find(request.id);
  r.recovering = sj != nullptr && sj->recovering();
  r.queued = true;
  AddDemand(i, +1);
}

void Engine::FailNode(int node, double t) {
  if (!node_up_[node]) return;
  node_up_[node] = false;
  MarkNode(node);
  result_.node_failures += 1;
  sched_.SetNodeSchedulable(node, false);
  for (JobId id : sched_.JobsOnNode(node)) {
    Interrupt(static_cast<size_t>(id - 1), t, Stop::kNodeLost);
  }
  Push(t + options_.repair_s, EventType::kRepair, node);
}

void Engine::RepairNode(int node, double t) {
  node_up_[node] = true;
  MarkNode(node);
  sched_.SetNodeSchedulable(node, true);
  Push(t + Exp(NodeMtbf(node)), EventType::kFail, node);
}

}  // namespace loom::sim_internal
