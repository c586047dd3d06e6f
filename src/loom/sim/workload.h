#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"
#include "loom/sched/frag_score.h"
#include "loom/trace/trace.h"

namespace loom {

// How simulated jobs get the time limits that backfilling plans with. Trace
// jobs carry none; this gives them user-like estimates.
struct TimeLimitMode {
  enum class Kind { kNone, kExact, kOverestimate };
  Kind kind = Kind::kNone;
  double factor = 1.0;  // kOverestimate: the limit is exact x U[1, factor]
};

// Parses "none", "exact" or "overestimate:K" (K >= 1).
absl::StatusOr<TimeLimitMode> ParseTimeLimitMode(std::string_view text);

// One job of a simulated workload: what the scheduler sees (`request`) plus
// the truth only the simulator knows (`duration_s`).
struct SimJob {
  JobRequest request;
  double submit_s = 0;    // after arrival scaling
  double duration_s = 0;  // true run time at GPU speed 1.0
  std::string trace_id;
  bool gang = false;  // a `--gang` job: the report gives it its own lines
  // The dataset it reads (`AssignDatasets`, loom/sim/data_cache.h); -1:
  // none.
  int dataset = -1;
};

// `--gang NODES:HOURS[:SPARES]`: one long pre-training gang of NODES whole
// nodes and HOURS of useful work, with SPARES hot spares, submitted with the
// first trace job (docs/simulator.md).
struct GangSpec {
  int nodes = 0;
  double hours = 0;
  int spares = 0;
};

absl::StatusOr<GangSpec> ParseGangSpec(std::string_view text);

struct Workload;

// Adds `gang` to `workload` as its first job (at the first submit time,
// non-preemptible, project "pretrain", whole nodes of the cluster's largest
// node size and that node's GPU model) and renumbers the jobs from 1.
// InvalidArgument when the cluster has too few such nodes.
absl::Status AddGang(const GangSpec& gang, const Cluster& cluster,
                     Workload* workload);

struct WorkloadOptions {
  double arrival_scale = 1.0;
  int64_t limit = 0;  // first N jobs by submit time; 0 = all
  uint64_t seed = 1;
  TimeLimitMode time_limits;
};

struct Workload {
  std::vector<SimJob> jobs;
  // Trace lines that cannot become jobs on this cluster (unknown GPU model,
  // unknown priority class), reported and skipped like bad trace lines.
  std::vector<TraceIssue> issues;
};

// Turns trace rows into scheduler requests for `cluster`: N GPUs become one
// task when they fit a node, else whole nodes (or, when N is not a multiple
// of the node size, equal tasks of the largest divisor of N that fits a
// node); a missing project is "default"; the priority class name maps to its
// value ("" = normal). Deterministic for a given seed.
Workload BuildWorkload(const Trace& trace, const Cluster& cluster,
                       const WorkloadOptions& options);

// The task types of `jobs` (not `--gang` ones) weighted by how many tasks
// each has, for the fgd slice score and the fragmentation measure
// (loom/sched/frag_score.h): GPU model, whole GPUs or share, CPU and memory
// per task; the 64 most common types.
TargetWorkload TargetWorkloadOf(const std::vector<SimJob>& jobs);

// The load a workload offers a cluster, with unlimited capacity: GPUs that
// would be busy if every job started on arrival. Jobs that could never run on
// the cluster are left out.
struct OfferedLoad {
  double window_start_s = 0;    // first submit
  double window_end_s = 0;      // last submit
  double mean_demand_gpus = 0;  // over the arrival window
  double peak_demand_gpus = 0;
  double mean_load = 0;  // mean demand / cluster GPUs
  double peak_load = 0;
};

OfferedLoad ComputeOfferedLoad(const std::vector<SimJob>& jobs,
                               const Cluster& cluster);

}  // namespace loom
