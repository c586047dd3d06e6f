#include "loom/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <queue>
#include <random>

#include "absl/strings/str_cat.h"
#include "loom/core/retry.h"
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
};

absl::Time At(double t) { return absl::UnixEpoch() + absl::Seconds(t); }

double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double pos = q * (sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(pos));
  const size_t hi = std::min(sorted.size() - 1, lo + 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo);
}

class Engine {
 public:
  Engine(const Cluster& cluster, const std::vector<SimJob>& jobs,
         const SimOptions& options, std::unique_ptr<QueuePolicy> policy)
      : cluster_(cluster),
        jobs_(jobs),
        options_(options),
        sched_(cluster, std::move(policy), options.scheduler_options),
        runs_(jobs.size()),
        rng_(options.seed),
        total_gpus_(cluster.TotalGpus()),
        pending_demand_(cluster.gpu_models.size() + 1),
        node_up_(cluster.nodes.size(), true) {}

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
  // Stops a running job; `failure` loses the work since its last checkpoint,
  // a preemption checkpoints first and loses nothing.
  void Interrupt(size_t i, double t, bool failure);
  void Resubmit(size_t i, double t);
  void FailNode(int node, double t);
  void RepairNode(int node, double t);
  void AddDemand(size_t i, int sign);
  void Record(double t);
  double Exp(double mean) {
    return std::exponential_distribution<double>(1.0 / mean)(rng_);
  }

  const Cluster& cluster_;
  const std::vector<SimJob>& jobs_;
  const SimOptions& options_;
  Scheduler sched_;
  std::vector<JobRun> runs_;
  std::mt19937_64 rng_;
  const int total_gpus_;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
  uint64_t seq_ = 0;
  // Pending jobs' GPU demand per model class (last entry: any model).
  std::vector<std::map<int, int>> pending_demand_;
  std::vector<bool> node_up_;

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
  if (r.run > 1) result_.restarts += 1;
  r.speed = cluster_.gpu_models[sj->placement.gpu_model].speed;
  if (r.first_start < 0) r.first_start = t;
  const double runtime = r.overhead + r.remaining_work / r.speed;
  Push(t + runtime, EventType::kFinish, static_cast<int64_t>(i), r.run);
  allocated_ += jobs_[i].request.shape.TotalGpus();
  AddDemand(i, -1);
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
  r.running = false;
  r.finish = t;
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

void Engine::Interrupt(size_t i, double t, bool failure) {
  JobRun& r = runs_[i];
  const SimJob& job = jobs_[i];
  const int gpus = job.request.shape.TotalGpus();
  const double elapsed = t - r.run_start;
  const double productive = std::max(0.0, elapsed - r.overhead);
  double kept = productive;
  if (failure) {
    const double c = options_.checkpoint_interval_s;
    kept = c > 0 ? std::floor(productive / c) * c : 0.0;
    lost_gpu_s_ += gpus * (elapsed - kept);
  }
  r.remaining_work = std::max(0.0, r.remaining_work - kept * r.speed);
  allocated_gpu_s_ += gpus * elapsed;
  useful_gpu_s_ += gpus * kept;
  result_.gpu_hours_by_project[job.request.project] += gpus * elapsed / 3600;
  allocated_ -= gpus;
  r.running = false;
  // The restart policy, as the server applies it.
  const RetryDecision retry =
      DecideRetry(options_.restart, options_.requeue,
                  failure ? RunEnd::kFailed : RunEnd::kRequeued,
                  r.restarts_used, r.requeues);
  if (!retry.again) {
    (void)sched_.Finish(job.request.id, At(t));
    result_.failed += 1;
    last_progress_ = t;
    return;
  }
  ++(failure ? r.restarts_used : r.requeues);
  if (retry.wait <= absl::ZeroDuration()) {
    r.queued = true;
    (void)sched_.Requeue(job.request.id, At(t));
    AddDemand(i, +1);
    return;
  }
  // Out of the queue until the backoff is over (the server does the same).
  (void)sched_.Finish(job.request.id, At(t));
  r.waiting = true;
  waiting_ += 1;
  Push(t + absl::ToDoubleSeconds(retry.wait), EventType::kResubmit,
       static_cast<int64_t>(i));
}

void Engine::Resubmit(size_t i, double t) {
  JobRun& r = runs_[i];
  r.waiting = false;
  waiting_ -= 1;
  if (!sched_.Submit(jobs_[i].request, At(t)).ok()) {
    result_.failed += 1;
    return;
  }
  r.queued = true;
  AddDemand(i, +1);
}

void Engine::FailNode(int node, double t) {
  if (!node_up_[node]) return;
  node_up_[node] = false;
  result_.node_failures += 1;
  sched_.SetNodeSchedulable(node, false);
  for (JobId id : sched_.JobsOnNode(node)) {
    Interrupt(static_cast<size_t>(id - 1), t, /*failure=*/true);
  }
  Push(t + options_.repair_s, EventType::kRepair, node);
}

void Engine::RepairNode(int node, double t) {
  node_up_[node] = true;
  sched_.SetNodeSchedulable(node, true);
  Push(t + Exp(options_.fail_mtbf_s), EventType::kFail, node);
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

SimResult Engine::Run() {
  const auto wall_start = std::chrono::steady_clock::now();
  result_.policy = std::string(sched_.policy().name());
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
      Push(window_start_ + Exp(options_.fail_mtbf_s), EventType::kFail,
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
    while (next_submit < jobs_.size() && jobs_[next_submit].submit_s <= t) {
      Submit(next_submit++, t);
    }
    // Preempted jobs stop at once here (their checkpoint is instant), so
    // the jobs they made room for start in a second pass at the same time.
    for (int round = 0; round < 4; ++round) {
      PassResult pass = sched_.Schedule(At(t));
      result_.passes += 1;
      for (JobId id : pass.started) Start(static_cast<size_t>(id - 1), t);
      for (const Preemption& p : pass.preempted) {
        Interrupt(static_cast<size_t>(p.victim - 1), t, /*failure=*/false);
        result_.preemptions += 1;
      }
      if (pass.preempted.empty()) break;
    }
    Record(t);
  }

  for (const JobRun& r : runs_) {
    if (r.running || r.queued || r.waiting) result_.unfinished += 1;
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
  }
  result_.gpu_hours_allocated = allocated_gpu_s_ / 3600;
  result_.gpu_hours_lost = lost_gpu_s_ / 3600;
  result_.goodput = allocated_gpu_s_ > 0 ? useful_gpu_s_ / allocated_gpu_s_ : 1;
  result_.jct_s = std::move(jct_);
  result_.wall_seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - wall_start)
                             .count();
  return std::move(result_);
}

}  // namespace

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
  Engine engine(cluster, jobs, options, *std::move(policy));
  return engine.Run();
}

}  // namespace loom
