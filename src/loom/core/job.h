#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"

namespace loom {

using JobId = int64_t;

enum class JobKind { kTrain, kFinetune, kInference, kBatch };

std::string_view JobKindName(JobKind kind);
absl::StatusOr<JobKind> ParseJobKind(std::string_view name);

// The resource shape of a job: `tasks` tasks of `gpus_per_task` GPUs each, all
// of one GPU model. A task never spans nodes.
// A task's part of one GPU (docs/scheduling.md "GPU partitions"): a MIG
// instance of profile `mig` ("1g.18gb"), or a time-sliced share of
// `share_bytes` of one GPU's memory. Neither: the task takes whole GPUs.
struct GpuSlice {
  std::string mig;
  int64_t share_bytes = 0;
  bool partial() const { return !mig.empty() || share_bytes > 0; }
  bool operator==(const GpuSlice&) const = default;
};

struct JobShape {
  int tasks = 1;
  int gpus_per_task = 1;
  GpuModelId gpu_model = kAnyGpuModel;
  int64_t cpus_milli_per_task = 0;    // 0: no CPU requirement
  int64_t memory_bytes_per_task = 0;  // 0: no memory requirement
  // Every task on a node of its own (`--nodes K`, Slurm's `-N K`): the gang
  // spans exactly `tasks` nodes even when it would fit on one.
  bool one_task_per_node = false;
  // RDMA NICs each task takes on its node (`resources.nics_per_task`); 0:
  // none counted (the agent still gives a task its GPUs' paired NICs). A
  // job of several nodes needs nodes with usable NICs either way.
  int nics_per_task = 0;
  // Tasks on part of a GPU each (`gpus_per_task` is then 1). Such a task
  // counts as one GPU against quotas and fair share.
  GpuSlice slice;

  int TotalGpus() const { return tasks * gpus_per_task; }
  // Whether the whole job goes on one node of `node_gpus` GPUs.
  bool OnOneNode(int node_gpus) const {
    return TotalGpus() <= node_gpus && (tasks == 1 || !one_task_per_node);
  }
  // How many of the job's tasks one node can hold, given `fit`, the tasks its
  // free resources allow.
  int TasksPerNode(int fit) const {
    return one_task_per_node ? std::min(fit, 1) : fit;
  }
};

// Turns "N GPUs in total" into a shape, as `loom run -g N [--nodes K]` and
// trace replays do. Without `nodes` (0), up to `gpus_per_node` GPUs make one
// task and larger counts are split into whole nodes of `gpus_per_node` (the
// count must then be a multiple of it). With `nodes` = K, the GPUs are
// spread evenly over K tasks (N must divide by K).
absl::StatusOr<JobShape> ShapeFromTotalGpus(int total_gpus, int gpus_per_node,
                                            int nodes = 0);

// What the scheduler knows about a job. No true duration: policies never see
// how long a job will really run, only its optional time limit.
struct JobRequest {
  JobId id = 0;
  std::string name;
  std::string project = "default";
  std::string user = "default";
  JobKind kind = JobKind::kBatch;
  int priority = 100;  // value of the job's priority class
  bool preemptible = false;
  JobShape shape;
  // InfiniteDuration() when the job has no time limit.
  absl::Duration time_limit = absl::InfiniteDuration();
  absl::Time submit_time = absl::UnixEpoch();
  // The digest of the job's container image ("sha256:..."); empty for a
  // host-process job. Placement prefers nodes that already hold it
  // (`Scheduler::SetNodeImages`), a soft preference that never changes the
  // fit or the topology of the placement.
  std::string image;
  // The dataset versions the job reads, each a stable id or "name@version"
  // (the server fills them from the job's `data:`). Placement prefers nodes
  // whose cache holds all of them complete (`Scheduler::SetNodeDatasets`),
  // a soft preference like `image` and ranked above it; a backfill
  // reservation reports the reserved nodes that lack them
  // (`PassResult::prefetch`).
  std::vector<std::string> datasets;
  // Only nodes whose labels match this (`MatchesSelector`,
  // loom/core/labels.h; `Scheduler::SetNodeLabels`); empty: any node.
  std::map<std::string, std::string> node_selector;
  // Hot spares (docs/job-spec.md `spares`): whole nodes reserved for this
  // job while it runs, lent to preemptible work meanwhile; 0..16.
  int spares = 0;
  // A job queued again after losing nodes (the server rebuilds the request
  // from its record): the node of each task in the run that ended, -1 for a
  // task whose node was lost, and the spare nodes it held then. With both,
  // the scheduler first tries the recovery placement: the survivors plus
  // spares in place of the lost nodes (`Scheduler::Submit`).
  std::vector<int> last_nodes;
  std::vector<int> spare_nodes;
  // Replicas of one service (docs/services.md `spread`): a job whose
  // `spread_group` is not empty is placed away from the running jobs of its
  // group, on another node (`spread_leaf`: under another leaf) where one has
  // room; a soft preference that never makes a job wait.
  std::string spread_group;
  bool spread_leaf = false;
  // A service replica (docs/services.md): besides preemptible jobs of lower
  // priority classes, it may preempt those of its own class (serving before
  // spot training); nothing preempts it unless it is preemptible itself.
  bool service = false;
};

// The most hot spares one job may ask for.
inline constexpr int kMaxSpares = 16;

// Checks a request for values that are wrong on any cluster: counts that are
// not positive or absurd, a task larger than any node can be
// (`kMaxGpusPerNode`), a GPU model id the cluster does not have, a time limit
// that is not positive, spares outside 0..`kMaxSpares`, node ids in
// `last_nodes` (one per task, -1 for a lost one) or `spare_nodes` that the
// cluster does not have. Returns InvalidArgument naming the field. Whether the
// job fits this cluster is `CouldEverRun`'s question (loom/sched/placement.h).
absl::Status ValidateJobRequest(const JobRequest& job, const Cluster& cluster);

}  // namespace loom
