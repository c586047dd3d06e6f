#pragma once

// The simulator's event engine (simulator.h's RunSimulation): its events,
// each job's run record, and the engine that replays them against the
// scheduler library. engine.cc handles the job and node events;
// simulator.cc runs the loop and sums up the result. Internal to `sim`.

#include <cstdint>
#include <map>
#include <memory>
#include <queue>
#include <random>
#include <vector>

#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/sched/scheduler.h"
#include "loom/sim/data_cache.h"
#include "loom/sim/simulator.h"

namespace loom::sim_internal {

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

// The scheduler's clock for a simulated time in seconds.
inline absl::Time At(double t) { return absl::UnixEpoch() + absl::Seconds(t); }

// The scheduler's options for a run: with datasets, locality on or off.
SchedulerOptions SchedulerOptionsOf(const SimOptions& options);

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

}  // namespace loom::sim_internal
