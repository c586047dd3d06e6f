#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/core/job_spec.h"
#include "loom/sched/queue_policy.h"
#include "loom/sched/scheduler.h"
#include "loom/sim/data_cache.h"
#include "loom/sim/workload.h"

namespace loom {

// A named failure model (`loom sim --failure-model NAME`, docs/simulator.md):
// how often nodes fail, how long repairs take and what a restart costs, as
// observed on a published fleet.
struct FailureModel {
  std::string name;
  std::string summary;  // one line, with the source
  // Per GPU: a node of g GPUs fails after an exponential time with mean
  // `gpu_mtbf_s / g`.
  double gpu_mtbf_s = 0;
  double repair_s = 0;
  double restart_cost_s = 0;
};

// The named models: "llama3" (Meta, "The Llama 3 Herd of Models", 2024,
// section 3.3.4: 419 unexpected interruptions in 54 days on 16,384 H100s).
std::vector<std::string> FailureModelNames();
// InvalidArgument listing the names for an unknown one.
absl::StatusOr<FailureModel> FindFailureModel(std::string_view name);

struct SimOptions {
  std::string policy = "fair";
  // `scheduler_options.target_workload` is also the workload the
  // fragmentation measure (`SimResult::frag_fgd_*`) is taken for, whatever
  // the slice score; empty: those figures are 0.
  PolicyOptions policy_options;
  SchedulerOptions scheduler_options;
  uint64_t seed = 1;
  // Node failures: each node fails after an exponential time with this mean
  // (seconds; 0 = never) and comes back after `repair_s`.
  double fail_mtbf_s = 0;
  double repair_s = 3600;
  // `fail_mtbf_s` is per GPU: a node of g GPUs fails with mean
  // `fail_mtbf_s / g` (a `FailureModel`).
  bool fail_mtbf_per_gpu = false;
  // A job that loses a node is requeued (`requeue`, not its restart policy,
  // as the server does) up to this many times; later losses count as its
  // own failures (the server's `kMaxNodeLossRequeues`, Slurm's
  // MaxBatchRequeue).
  int max_node_loss_requeues = 5;
  // Jobs save a checkpoint every this many seconds of useful run time
  // (0 = never: a failure loses the whole run).
  double checkpoint_interval_s = 0;
  // A job that starts again after preemption or failure spends this long
  // restoring before it makes progress.
  double restart_cost_s = 30;
  // A job one of whose MIG tasks needs its GPU partitioned anew
  // (`TaskPlacement::repartition`) starts this much later: the agent
  // destroys and creates GPU and compute instances through NVML first.
  double mig_repartition_s = 15;
  // The restart policy every job gets (the server's code, `DecideRetry`):
  // `restart` after failures, `requeue` after preemptions. max -1: no limit.
  // A job out of retries ends failed.
  RestartSpec restart{-1, absl::ZeroDuration()};
  RestartSpec requeue{-1, absl::ZeroDuration()};
  // The FGD paper's experiment (docs/simulator.md): jobs never end, and a
  // job that does not start in the pass at its arrival is dropped (counted
  // in `SimResult::dropped`), so arrivals fill the cluster once.
  bool no_departures = false;
  // Datasets (docs/simulator.md "Datasets"): with `data.datasets` > 0 and
  // `data.sizes` filled (`AssignDatasets`), the jobs' `dataset`s are read
  // through the node caches, and a start waits for its data.
  DataOptions data;
  // Updated with the number of jobs that have finished, for progress lines.
  std::atomic<int64_t>* progress = nullptr;
};

// One `--gang` job (`SimJob::gang`), reported on its own.
struct GangResult {
  std::string name;
  int nodes = 0;
  int spares = 0;
  bool finished = false;
  double jct_s = 0;  // finish (or the end of the run) minus submit
  double gpu_hours_allocated = 0;
  double gpu_hours_useful = 0;
  double goodput = 1.0;             // useful / allocated GPU-hours
  int64_t interruptions = 0;        // runs ended by a node failure
  int64_t recovered_on_spares = 0;  // restarts on its survivors and spares
  double restart_wait_mean_s = 0;   // interruption to the next start
  double restart_wait_max_s = 0;
  // Wall time from its first start to its end (or the end of the run):
  // useful (work kept), redone (work lost since the last checkpoint),
  // restoring (`restart_cost_s`) and waiting to start again; they add up
  // to 1. `effective` is the Llama 3 report's "effective training time".
  double effective = 1.0;
  double redone = 0, restoring = 0, waiting = 0;
};

struct SimResult {
  std::string policy;
  std::string slice_score;  // "best_fit" or "fgd"
  int64_t jobs = 0;
  int64_t finished = 0;
  int64_t infeasible = 0;
  int64_t unfinished = 0;  // still pending or running when events ran out
  int64_t failed = 0;      // ended by the restart policy (out of retries)
  std::vector<std::string> infeasible_examples;  // first few, with reasons
  double makespan_s = 0;
  double jct_mean_s = 0, jct_p50_s = 0, jct_p95_s = 0, jct_p99_s = 0;
  double wait_mean_s = 0;
  double slowdown_mean = 0;    // bounded slowdown, 10 s bound
  double gpu_utilization = 0;  // over the arrival window
  double fragmentation_mean_gpus = 0;
  double fragmentation_mean = 0;  // as a fraction of the cluster's GPUs
  // GPU capacity (docs/simulator.md "GPU sharing"): allocated capacity in
  // GPUs (a share counts its fraction of the GPU's memory, a MIG instance
  // its memory slices over 8) over the cluster's GPUs, time-weighted over
  // the arrival window and at its end (after the last arrival's pass); the
  // fragmentation of the free capacity for the workload's own task types
  // (loom/sched/frag_score.h), in GPUs, the same two ways.
  double gpu_allocation_mean = 0;
  double gpu_allocation_end = 0;
  double frag_fgd_mean_gpus = 0;
  double frag_fgd_end_gpus = 0;
  // GPUs the arrivals asked for up to the window's end (capacity units),
  // over the cluster's GPUs ("arrived workload" in the FGD paper).
  double arrived_demand = 0;
  int64_t dropped = 0;  // `no_departures`: jobs that did not start
  double gpu_hours_allocated = 0;
  double gpu_hours_lost = 0;  // work thrown away by failures
  double goodput = 1.0;       // useful GPU-hours / allocated GPU-hours
  int64_t preemptions = 0;
  int64_t node_failures = 0;
  int64_t restarts = 0;
  int64_t mig_repartitions = 0;  // jobs started on a GPU partitioned anew
  int64_t spare_reclaims = 0;    // jobs stopped at once on a reclaimed spare
  int64_t passes = 0;
  DataStats data;  // `data.enabled` when the run modelled datasets
  std::vector<GangResult> gangs;
  std::map<std::string, double> gpu_hours_by_project;
  // For plots: (seconds since the first submit, value), step functions.
  std::vector<std::pair<double, double>> utilization_series;
  std::vector<std::pair<double, double>> queue_series;
  std::vector<double> jct_s;
  double wall_seconds = 0;
};

// Replays `jobs` on `cluster` with one policy: a discrete-event simulation
// that drives the real `Scheduler` (the same code the server runs) with
// simulated time. Deterministic for a given input and seed. Fails only on a
// bad policy name or options.
absl::StatusOr<SimResult> RunSimulation(const Cluster& cluster,
                                        const std::vector<SimJob>& jobs,
                                        const SimOptions& options);

}  // namespace loom
