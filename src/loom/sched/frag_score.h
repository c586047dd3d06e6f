#pragma once

// Fragmentation of GPU capacity as the FGD paper measures it (Weng et al.,
// "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
// Fragmentation Gradient Descent", USENIX ATC'23), for the `fgd` slice score
// (slice_placement.h) and the simulator's report. Design assumptions:
// - A node's fragmentation for a task type is the free GPU capacity that a
//   task of that type cannot use there: all of it when the task does not fit
//   the node at all (GPU model, CPU, memory, or no GPU with room), else the
//   free capacity of the GPUs that each have less room than the task needs
//   of one GPU (a share's bytes, or a whole GPU).
// - The expected fragmentation weights task types by their popularity in a
//   target workload (a distribution the caller supplies: the simulator
//   counts the trace's tasks). Placing a share where it grows least is FGD.
// - Capacity is counted in GPUs: a GPU's free memory over its memory. A
//   free whole GPU is 1; a shared GPU its memory left; a whole GPU in use,
//   a MIG GPU and an unschedulable node 0 (MIG instances are not modelled).
// Pure functions of their inputs; no I/O.

#include <array>
#include <cstdint>
#include <vector>

#include "loom/core/cluster.h"
#include "loom/sched/cluster_state.h"

namespace loom {

// One kind of task of the target workload.
struct TaskType {
  GpuModelId gpu_model = kAnyGpuModel;
  int gpus = 1;              // whole GPUs per task; 0 for a share
  int64_t share_bytes = 0;   // part of one GPU's memory; 0: whole GPUs
  int64_t cpus_milli = 0;    // per task; 0: none asked
  int64_t memory_bytes = 0;  // per task; 0: none asked
  double popularity = 0;     // its fraction of the workload's tasks
  bool operator==(const TaskType&) const = default;
};

// The task types of a workload; popularities sum to 1 (or it is empty).
struct TargetWorkload {
  std::vector<TaskType> types;
  bool empty() const { return types.empty(); }
};

// Builds a workload from task types with counts in `popularity`: merges
// equal types (all fields but the popularity), keeps the `max_types` most
// popular ones (ties: first seen) and scales their popularities to sum
// to 1. FGD keeps the common types; rare ones cost time and barely move the
// expectation.
TargetWorkload MakeTargetWorkload(const std::vector<TaskType>& counted,
                                  size_t max_types = 64);

// What is free on one node, as the measure sees it.
struct NodeFree {
  GpuModelId model = 0;
  int gpus = 0;
  int64_t gpu_memory = 1;  // one GPU's memory (> 0)
  bool sharing = false;    // whole GPUs may become shared
  bool schedulable = false;
  int64_t cpus_milli = 0;
  int64_t memory_bytes = 0;
  // Per GPU, free memory in bytes: `gpu_memory` for a free whole GPU, the
  // room left on a shared GPU, 0 otherwise.
  std::array<int64_t, kMaxGpusPerNode> free{};
};

NodeFree NodeFreeOf(const ClusterState& state, int node);

// The node's fragmentation for one task type, in GPUs.
double Fragmentation(const NodeFree& node, const TaskType& type);

// The node's expected fragmentation for `workload`, in GPUs.
double ExpectedFragmentation(const NodeFree& node,
                             const TargetWorkload& workload);

// Free GPU capacity of the node, in GPUs.
double FreeCapacity(const NodeFree& node);

}  // namespace loom
