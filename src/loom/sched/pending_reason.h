#pragma once

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"

namespace loom {

// Why a job is not running, as data; `FormatPendingReason` turns it into the
// sentence a person reads in `loom show` and `loom queue`. Kept small and
// copyable because the scheduler stores one per pending job.
struct PendingReason {
  enum class Code : uint8_t {
    kNew,                    // not yet looked at by a scheduling pass
    kNoFreeGpus,             // the cluster has no free GPU of a usable model
    kNoNodeFits,             // job fits in one node; no node has room
    kNoSwitchFits,           // gang needs several nodes under one switch
    kNoSchedulableNodes,     // every node of the model is down or cordoned
    kBehindHead,             // fifo: strict arrival order
    kReserved,               // holds the reservation; starts when it frees up
    kWouldDelayReservation,  // backfill would delay the reserved job
    kWaitingForPreemption,   // victims were told to stop; starts after them
    kHigherQueuesFirst,      // las: higher-priority queues take the GPUs
    kInfeasible,             // cannot run on the cluster as it is now
    kNoNodeMatchesSelector,  // no node's labels match the job's selector
    kNoMatchingNodeFits,     // the matching nodes have no room for the job
    kRecoveringOnSpares,     // lost nodes; restarts on its hot spares
    kNoSliceFits,            // no MIG instance or GPU share for a task
  };
  Code code = Code::kNew;
  GpuModelId gpu_model = kAnyGpuModel;
  int need = 0;  // GPUs, nodes or tasks, depending on `code`
  int have = 0;
  int gpus_per_task = 0;
  int level = 0;             // switch level for kNoSwitchFits / kReserved
  bool whole_nodes = false;  // kNoSwitchFits: each task takes a whole node
  // The head or reserved job, or victim count (kWaitingForPreemption,
  // kRecoveringOnSpares).
  JobId other = 0;
  // kNoMatchingNodeFits: `have` nodes match the selector, `usable` of them
  // schedulable; `need` GPUs.
  int usable = 0;
  // Nodes with room for a task of the job that are hot spares of other jobs
  // (a non-preemptible job is not placed there): how many, of how many
  // jobs, the first of them (lowest id), and whether all are idle. Added to
  // any code.
  int spare_nodes = 0;
  int spare_owners = 0;
  JobId spare_owner = 0;
  bool spare_nodes_idle = false;
  absl::Time when = absl::InfiniteFuture();  // reserved start
  // kNoSliceFits: `have` free instances of the MIG profile, or `bytes` the
  // most memory left on one shared GPU.
  int64_t bytes = 0;
};

// Renders `reason` for people, relative to `now` (for "expected start in").
// `selector` is the job's node selector as `FormatSelector` writes it, for
// the selector codes.
// `slice` is the job's part of a GPU, for kNoSliceFits.
std::string FormatPendingReason(const PendingReason& reason,
                                const Cluster& cluster, absl::Time now,
                                const std::string& selector = "{...}",
                                const GpuSlice* slice = nullptr);

// A short stable identifier of the code, for metrics and JSON
// ("no_node_fits", "reserved", ...).
const char* PendingReasonCodeName(PendingReason::Code code);

}  // namespace loom
