#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"
#include "loom/core/mig.h"
#include "loom/sched/node_mask.h"

namespace loom {

// Where one task runs: a node and the GPUs on it (bit i = GPU i).
struct TaskPlacement {
  int node = -1;
  uint32_t gpu_mask = 0;
  // A task on part of a GPU (`JobShape::slice`; `gpu_mask` is then 0): the
  // GPU, and its MIG instance (a profile index into
  // `ClusterState::MigProfilesOn(node)` and its first memory slice) or its
  // share of the GPU's memory.
  int slice_gpu = -1;
  int mig_profile = -1;
  int mig_start = -1;
  int64_t share_bytes = 0;
  // The MIG task's GPU gets a new layout when it starts (an idle MIG GPU
  // partitioned anew, or a whole GPU turned MIG): the agent's NVML calls
  // take a while (the simulator's `mig_repartition_s`).
  bool repartition = false;
  bool partial() const { return slice_gpu >= 0; }
};

// How one GPU is used (docs/scheduling.md "GPU partitions").
enum class GpuMode : uint8_t { kWhole, kMig, kShared };

// The state of a GPU that is not handed out whole: MIG-partitioned or
// time-shared. A whole GPU has the default value.
struct GpuPart {
  GpuMode mode = GpuMode::kWhole;
  // MIG by the pool's declaration (`MigPool::gpus`): stays MIG when empty.
  // Otherwise the GPU became MIG or shared for a task and is whole again
  // once its last task has ended.
  bool pinned = false;
  std::vector<MigInstance> layout;  // kMig: the instances that exist
  std::vector<JobId> owners;        // kMig: per instance, 0 when free
  int64_t capacity = 0;             // kShared: the GPU's memory
  int64_t used = 0;                 // kShared: memory the shares hold
  int tasks = 0;                    // tasks on it
  bool operator==(const GpuPart&) const = default;
};

// Where a whole gang runs.
struct Placement {
  GpuModelId gpu_model = 0;
  std::vector<TaskPlacement> tasks;  // task i runs at tasks[i]
  // The lowest switch above every task: level 0 when all tasks share a node
  // (switch_index is then -1), 1 for one leaf switch, and so on.
  int switch_level = 0;
  int switch_index = -1;
  int nodes = 0;   // distinct nodes used
  int leaves = 0;  // distinct leaf switches used
  // Tasks placed on nodes of the `prefer` mask given to `FindPlacement`
  // (nodes that hold the job's image); 0 when there was none.
  int preferred_tasks = 0;
  // Tasks placed on nodes that hold all of the job's datasets
  // (`NodePreference::data`); 0 when there was no such preference.
  int data_tasks = 0;
};

// An entry of the reservation index: the time at which `node` will have
// enough free GPUs, assuming running jobs end at their time limit.
// `ready == InfinitePast()` means now. Ties go to the lower node id.
struct ReadyKey {
  absl::Time ready;
  int node;
  friend bool operator<(const ReadyKey& a, const ReadyKey& b) {
    if (a.ready != b.ready) return a.ready < b.ready;
    return a.node < b.node;
  }
  friend bool operator==(const ReadyKey& a, const ReadyKey& b) {
    return a.ready == b.ready && a.node == b.node;
  }
};

// The free resources of every node plus the indexes that make placement fast
// at 2,000 nodes: nodes bucketed by free GPUs, idle (fully free) nodes, and
// per switch the number of tasks of g GPUs that fit below it. All indexes are
// kept up to date incrementally on every allocation, release and node state
// change; nothing rescans the cluster.
//
// Pure data structure: no I/O, no clock. Not thread-safe.
class ClusterState {
 public:
  // `track_ready_times` maintains the reservation index (used by backfilling
  // policies; it costs a little on every allocation).
  ClusterState(const Cluster& cluster, bool track_ready_times);

  ClusterState(const ClusterState&) = delete;
  ClusterState& operator=(const ClusterState&) = delete;

  const Cluster& cluster() const { return cluster_; }
  const Topology& topology() const { return cluster_.topology; }
  int num_nodes() const { return static_cast<int>(nodes_.size()); }
  int num_models() const {
    return static_cast<int>(cluster_.gpu_models.size());
  }

  // Every GPU model, fastest first.
  const std::vector<GpuModelId>& ModelsBySpeed() const {
    return models_by_speed_;
  }
  // The largest GPU count of any node of `model` (0 when none).
  int MaxNodeGpus(GpuModelId model) const { return max_node_gpus_[model]; }

  // Per node.
  int NodeGpus(int node) const { return nodes_[node].gpus; }
  GpuModelId NodeModel(int node) const { return nodes_[node].model; }
  int FreeGpus(int node) const { return nodes_[node].free_gpus; }
  uint32_t FreeMask(int node) const { return nodes_[node].free_mask; }
  int64_t FreeCpus(int node) const { return nodes_[node].free_cpus; }
  int64_t FreeMemory(int node) const { return nodes_[node].free_memory; }
  // Usable RDMA NICs of the node (its agent's report, else the cluster
  // spec's `nics`; -1: not known, no limit) and those no task counts on.
  int Nics(int node) const { return nodes_[node].nics; }
  int FreeNics(int node) const { return nodes_[node].free_nics; }
  // Nodes known to have no usable NIC: a job of several nodes avoids them.
  const NodeMask& NodesWithoutNics() const { return no_nics_; }
  bool Schedulable(int node) const { return nodes_[node].schedulable; }
  bool IsIdle(int node) const {
    const Node& n = nodes_[node];
    return n.schedulable && n.free_gpus == n.gpus;
  }
  // How many tasks of `shape` fit on `node` now (0 when unschedulable).
  int TasksThatFit(int node, const JobShape& shape) const;

  // Aggregates over schedulable nodes.
  int ModelFreeGpus(GpuModelId model) const { return free_by_model_[model]; }
  int TotalFreeGpus() const { return total_free_; }
  // Whether anything at all may start: a free whole GPU, or a MIG or shared
  // GPU (which may have room for a slice). Policies stop a pass without.
  bool HasRoom() const { return total_free_ > 0 || !part_nodes_.Empty(); }
  int SchedulableGpus(GpuModelId model) const {
    return schedulable_by_model_[model];
  }
  // Tasks of `g` GPUs (GPU count only) that fit below switch `sw`.
  int Slots(int sw, GpuModelId model, int g) const {
    return slots_[SlotIndex(sw, model, g)];
  }
  int IdleNodes(int sw, GpuModelId model) const {
    return idle_[sw * num_models() + model];
  }
  // Partly used schedulable nodes of `model` with exactly `free` free GPUs.
  const NodeMask& PartialNodes(GpuModelId model, int free) const {
    return partial_[model * (kMaxGpusPerNode + 1) + free];
  }
  int PartialCount(GpuModelId model, int free) const {
    return partial_count_[model * (kMaxGpusPerNode + 1) + free];
  }
  // Leaf switches with idle nodes of `model`, as (idle count, leaf), fewest
  // first.
  const absl::btree_set<std::pair<int, int>>& LeavesByIdle(
      GpuModelId model) const {
    return leaves_by_idle_[model];
  }
  // The largest free GPU count on any schedulable node of `model`.
  int MaxFreeOnNode(GpuModelId model) const;
  // The reservation index for tasks of `g` GPUs (requires
  // `track_ready_times`).
  const absl::btree_set<ReadyKey>& ReadyIndex(GpuModelId model, int g) const {
    return ready_[model * (kMaxGpusPerNode + 1) + g];
  }
  bool tracks_ready_times() const { return track_ready_; }
  // Jobs holding GPUs on `node`, in allocation order (a job with several
  // tasks on the node appears once per task).
  std::vector<JobId> JobsOn(int node) const;
  // Calls `fn(job)` for each allocation on `node` (a job once per task
  // there), in allocation order, until it returns false. Returns false when
  // a call did; allocates nothing.
  template <typename Fn>
  bool ForEachJobOn(int node, Fn&& fn) const {
    for (const Allocation& a : nodes_[node].allocations) {
      if (!fn(a.job)) return false;
    }
    return true;
  }
  // Partial GPUs (docs/scheduling.md "GPU partitions"). GPUs that are MIG
  // or shared are not free as whole GPUs: `FreeMask` never has them.
  const GpuPart& Part(int node, int gpu) const {
    return nodes_[node].parts[gpu];
  }
  // The GPUs of `node` that are MIG or shared (bit i = GPU i).
  uint32_t PartMask(int node) const { return nodes_[node].part_mask; }
  // Nodes with at least one MIG or shared GPU.
  const NodeMask& PartNodes() const { return part_nodes_; }
  // The MIG profiles of the node's GPUs (empty: not MIG-capable), whether
  // its pool lets the scheduler repartition (`MigPool::dynamic`) and share
  // (`PoolSpec::sharing`) GPUs, and one GPU's memory.
  const std::vector<MigProfile>& MigProfilesOn(int node) const;
  bool MigDynamic(int node) const { return nodes_[node].mig_dynamic; }
  bool Sharing(int node) const { return nodes_[node].sharing; }
  int64_t GpuMemory(int node) const { return nodes_[node].gpu_memory; }
  // GPUs per PCIe switch or NVLink domain of the node (`PoolSpec::
  // gpu_domain`); 0: all-to-all.
  int GpuDomain(int node) const { return nodes_[node].gpu_domain; }
  // Every GPU of `node` (bit i = GPU i).
  uint32_t AllGpusMask(int node) const {
    const int g = nodes_[node].gpus;
    return g >= 32 ? ~0u : ((1u << g) - 1);
  }

  // Mutations. `Allocate` requires that the placement fits (checked with
  // assertions in debug builds and by `CheckInvariants`). A slice task
  // (`TaskPlacement::partial`) on a whole GPU turns it MIG or shared; a MIG
  // instance the GPU lacks is created there (the GPU partitioned anew, all
  // instances of the task's profile, when nothing runs on it); the last slice
  // task of a GPU that is not `pinned` leaving turns it whole again.
  void SetSchedulable(int node, bool schedulable);
  // The node's usable NICs as its agent reports them (-1: not known). Tasks
  // already counting on NICs keep them (free NICs may go below 0 until they
  // end).
  void SetNics(int node, int nics);
  void Allocate(JobId job, const Placement& placement, const JobShape& shape,
                absl::Time expected_end);
  void Release(JobId job, const Placement& placement, const JobShape& shape);

  // Recomputes every index from scratch and compares; for tests.
  absl::Status CheckInvariants() const;

 private:
  struct Allocation {
    JobId job;
    uint32_t gpu_mask;
    int64_t cpus;
    int64_t memory;
    absl::Time expected_end;
    int slice_gpu = -1;  // a slice task: its GPU, instance start or share
    int mig_start = -1;
    int64_t share = 0;
    int nics = 0;
  };
  struct Node {
    GpuModelId model = 0;
    int gpus = 0;
    int64_t cpus = 0;
    int64_t memory = 0;
    bool schedulable = true;
    int free_gpus = 0;
    uint32_t free_mask = 0;
    int64_t free_cpus = 0;
    int64_t free_memory = 0;
    std::vector<Allocation> allocations;
    std::vector<absl::Time> ready;  // [g] as inserted in ready_; empty: none
    std::vector<GpuPart> parts;     // [gpu]
    uint32_t part_mask = 0;         // GPUs whose part is not kWhole
    int gpu_domain = 0;
    int nics = -1;  // -1: not known
    int free_nics = 0;
    int pool = -1;
    bool mig_dynamic = false;
    bool sharing = true;
    int64_t gpu_memory = 0;
  };

  // Slice tasks: take or give back part of a GPU (the node is unindexed).
  void TakeSlice(JobId job, Node& n, const TaskPlacement& t);
  void GiveSlice(Node& n, const Allocation& a);
  absl::Status CheckParts(int node) const;

  size_t SlotIndex(int sw, GpuModelId model, int g) const {
    return (static_cast<size_t>(sw) * num_models() + model) *
               (kMaxGpusPerNode + 1) +
           g;
  }
  // Remove / add the node's contribution to every index but the
  // reservation index.
  void Unindex(int node);
  void Index(int node);
  // Brings the node's reservation-index entries up to date, touching only
  // those that changed.
  void RefreshReady(int node);
  // Ready times for 1..gpus GPUs ([0] unused); empty when unschedulable.
  std::vector<absl::Time> ComputeReadyTimes(int node) const;

  const Cluster& cluster_;
  const bool track_ready_;
  std::vector<Node> nodes_;
  std::vector<GpuModelId> models_by_speed_;
  std::vector<int> max_node_gpus_;
  std::vector<int> ancestors_;  // [node * levels + level - 1]
  int levels_ = 0;
  std::vector<int> free_by_model_;
  std::vector<int> schedulable_by_model_;
  int total_free_ = 0;
  std::vector<int> slots_;
  std::vector<int> idle_;
  std::vector<NodeMask> partial_;
  std::vector<int> partial_count_;
  std::vector<absl::btree_set<std::pair<int, int>>> leaves_by_idle_;
  std::vector<absl::btree_set<ReadyKey>> ready_;
  std::vector<std::vector<MigProfile>> pool_profiles_;  // [pool]
  NodeMask part_nodes_;
  NodeMask no_nics_;
};

}  // namespace loom
