#include "loom/sim/simulator.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <map>
#include <queue>
#include <random>

#include "absl/strings/str_cat.h"
#include "loom/core/retry.h"
#include "loom/sched/frag_score.h"
#include "loom/sched/placement.h"

namespace loom {
namespace {

// Same-time events run in this order: work ends before nodes change, and
// submissions come last so that a pass sees everything that happened.
enum class EventType : uint8_t {
  kFinish = 0,
  kRepair = 1,
  kFail = 2,
  kResubmit = 3,  // a job's restart backoff is over
};

struct Event {
  double t;
  EventType type;
  int64_t a;  // job index or node
  int64_t b;  // run number for kFinish
  uint64_t seq;
  friend bool operator>(const Event& x, const Event& y) {
    if (x.t != y.t) return x.t > y.t;
    if (x.type != y.type) return x.type > y.type;
    return x.seq > y.seq;
  }
};

struct JobRun {
  double remaining_work = 0;  // seconds of work at GPU speed 1.0
  double run_start = 0;
  double overhead = 0;  // restart cost paid at the start of this run
  double speed = 1.0;
  int64_t run = 0;
  double first_start = -1;
  double finish = -1;
  bool running = false;
  bool queued = false;
  bool waiting = false;  // out of the queue for its restart backoff
  int restarts_used = 0;
  int requeues = 0;
  int node_losses = 0;
  bool recovering = false;  // pending with a recovery placement
  int extra = -1;           // index into `Engine::extras_`, or -1
  double capacity = 0;      // GPUs of capacity held by the current run
};

// What only jobs with spares and `--gang` jobs need (kept apart so that
// the other jobs' records stay small).
struct ExtraRun {
  // The nodes of the run that ended and its spares, for a resubmission
  // after a backoff (the server's recovery path).
  std::vector<int> last_nodes, spare_nodes;
  // Time accounting (seconds of wall time).
  double interrupted_at = -1;
  double useful_s = 0, redone_s = 0, restoring_s = 0, waiting_s = 0;
  double wait_max_s = 0;
  int64_t interruptions = 0, waits = 0, recovered = 0;
};

// How a running job stops.
enum class Stop {
  kPreempt,   // checkpoints on the spot: loses nothing
  kKill,      // a reclaimed hot spare: killed, loses the work since its
              // last checkpoint
  kNodeLost,  // its node failed: the same loss
};

absl::Time At(double t) { return absl::UnixEpoch() + absl::Seconds(t); }

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

// The scheduler's options for a run: with datasets, locality on or off.
SchedulerOptions SchedulerOptionsOf(const SimOptions& options) {
  SchedulerOptions s = options.scheduler_options;
  if (options.data.datasets > 0) s.data_locality = options.data.locality;
  return s;
}

class Engine {
 public:
  Engine(const Cluster& cluster, const std::vector<SimJob>& jobs,
         const SimOptions& options, std::unique_ptr<QueuePolicy> policy)
      : cluster_(cluster),
        jobs_(jobs),
        options_(options),
        sched_(cluster, std::move(policy), SchedulerOptionsOf(options)),
        runs_(jobs.size()),
        rng_(options.seed),
        total_gpus_(cluster.TotalGpus()),
        pending_demand_(cluster.gpu_models.size() + 1),
        node_up_(cluster.nodes.size(), true),
        target_(options.scheduler_options.target_workload),
        node_frag_(cluster.nodes.size(), 0.0),
        dirty_(cluster.nodes.size(), false) {
    if (options.data.datasets > 0 && !options.data.sizes.empty()) {
      data_ = std::make_unique<DataCache>(cluster, options.data);
    }
    double smallest = 0;
    for (const GpuModel& m : cluster.gpu_models) {
      if (m.memory_bytes > 0 && (smallest == 0 || m.memory_bytes < smallest)) {
        smallest = static_cast<double>(m.memory_bytes);
      }
    }
    share_unit_ =
        smallest > 0 ? smallest : static_cast<double>(int64_t{80} << 30);
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (jobs[i].gang || jobs[i].request.spares > 0) {
        runs_[i].extra = static_cast<int>(extras_.size());
        extras_.emplace_back();
      }
    }
  }

  SimResult Run();

 private:
  void Push(double t, EventType type, int64_t a, int64_t b = 0) {
    events_.push({t, type, a, b, seq_++});
  }
  // Integrates utilisation and fragmentation over [last_t_, t).
  void Advance(double t);
  void Submit(size_t i, double t);
  void Start(size_t i, double t);
  void Finish(size_t i, double t);
  // Stops a running job: a preemption checkpoints first and loses nothing,
  // a kill or a node failure loses the work since the last checkpoint.
  void Interrupt(size_t i, double t, Stop how);
  void Resubmit(size_t i, double t);
  void FailNode(int node, double t);
  void RepairNode(int node, double t);
  void AddDemand(size_t i, int sign);
  void Record(double t);
  // The fragmentation measure: nodes whose free resources changed are
  // marked, and their expected fragmentation recomputed at the end of the
  // step.
  void MarkNodes(size_t i);
  void MarkNode(int node) {
    if (!dirty_[node]) {
      dirty_[node] = true;
      dirty_list_.push_back(node);
    }
  }
  void RefreshFragmentation();
  double CapacityOf(const Placement& p) const;
  double NodeMtbf(int node) const {
    return options_.fail_mtbf_per_gpu
               ? options_.fail_mtbf_s / std::max(1, cluster_.nodes[node].gpus)
               : options_.fail_mtbf_s;
  }
  GangResult GangStats(size_t i, double end) const;
  ExtraRun* Extra(size_t i) {
    return runs_[i].extra < 0 ? nullptr : &extras_[runs_[i].extra];
  }
  double Exp(double mean) {
    return std::exponential_distribution<double>(1.0 / mean)(rng_);
  }

  // Datasets: the job's data is on its nodes; returns the delay before it
  // is (`Start`), and tells the scheduler which nodes hold what.
  double AcquireData(size_t i, const Placement& p, double t);
  void ReleaseData(size_t i) {
    if (data_ != nullptr) data_->Release(static_cast<int64_t>(i));
  }
  void PrefetchData(const PassResult& pass, double t);
  void SyncDatasets();

  const Cluster& cluster_;
  const std::vector<SimJob>& jobs_;
  std::unique_ptr<DataCache> data_;  // null: no data model
  const SimOptions& options_;
  Scheduler sched_;
  std::vector<JobRun> runs_;
  std::vector<ExtraRun> extras_;
  std::mt19937_64 rng_;
  const int total_gpus_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  // Pending jobs' GPU demand per model class (last entry: any model).
  std::vector<std::map<int, int>> pending_demand_;
  std::vector<bool> node_up_;
  const TargetWorkload& target_;
  std::vector<double> node_frag_;
  double frag_total_ = 0;
  std::vector<bool> dirty_;
  std::vector<int> dirty_list_;
  double capacity_allocated_ = 0;  // GPUs of capacity held
  double capacity_area_window_ = 0;
  double frag_fgd_area_window_ = 0;
  double arrived_capacity_ = 0;
  bool end_recorded_ = false;

  SimResult result_;
  double window_start_ = 0, window_end_ = 0;
  double last_t_ = 0;
  int allocated_ = 0;
  double alloc_area_window_ = 0;
  double frag_area_window_ = 0;
  double useful_gpu_s_ = 0;
  double allocated_gpu_s_ = 0;
  double lost_gpu_s_ = 0;
  double resolution_ = 1;
  std::vector<double> jct_;
  double slowdown_sum_ = 0, wait_sum_ = 0;
  double last_finish_ = 0;
  double last_progress_ = 0;  // last submit or finish
  double give_up_after_ = 0;
  int64_t waiting_ = 0;  // jobs waiting out a restart backoff
  // One GPU's memory for counting arrived shares in GPUs (the smallest
  // model's; shares are sized against it, loom/sim/workload.h).
  double share_unit_ = 1;
};

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

}  // namespace

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
  Engine engine(cluster, jobs, options, *std::move(policy));
  return engine.Run();
}

}  // namespace loom
