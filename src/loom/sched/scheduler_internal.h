#pragma once

// Helpers the scheduler's files share (scheduler.cc, scheduler_pass.cc).
// Internal to `sched`.

#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/scheduler.h"

namespace loom::sched_internal {

// Whether the job's tasks cannot all share one node: then its nodes talk
// over RDMA and need usable NICs.
bool SpansNodes(const ClusterState& st, const Cluster& c, const JobShape& s);

// `u` brought forward to `now`: running GPUs accrue GPU-seconds, decayed
// ones lose half their weight every `half_life`.
ProjectUsage AdvanceUsage(ProjectUsage u, absl::Time now,
                          absl::Duration half_life);

}  // namespace loom::sched_internal
