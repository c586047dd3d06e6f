#pragma once

// Tasks on parts of GPUs on the server (docs/scheduling.md "GPU
// partitions"): the scheduler's slice placement as a task record, its
// stored and API form, and back for a restarted server.

#include <optional>

#include "absl/status/statusor.h"
#include "loom/common/metrics_text.h"
#include "loom/sched/cluster_state.h"
#include "loom/server/job_record.h"
#include "nlohmann/json.hpp"

namespace loom {

// The slice of task placement `t` (`t.partial()`) of a job the scheduler
// has started, with the layout its GPU now has (what the agent creates).
TaskSlice SliceOf(const ClusterState& state, const TaskPlacement& t);

// {"mig": "1g.18gb", "profile": 0, "start": 2, "layout": [["1g.18gb", 0],
// ...]} or {"share_bytes": N}: what is stored, what the launch carries and
// what the API shows.
nlohmann::json SliceJson(const TaskSlice& slice);
absl::StatusOr<TaskSlice> ParseSlice(const nlohmann::json& j);

// The task placement of a stored slice task on node `node`, GPU `gpu`.
TaskPlacement SlicePlacement(int node, int gpu, const TaskSlice& slice);

// The node's MIG and shared GPUs for `GET /v1/nodes` (docs/api.md): one
// entry per GPU that is not whole, {"gpu", "mode": "mig", "instances":
// [{"profile", "start", "job"}]} (job 0: free) or {"gpu", "mode":
// "shared", "capacity_bytes", "used_bytes", "tasks"}.
nlohmann::json GpuPartsJson(const ClusterState& state, int node);

// `loom_gpu_slices{node,gpu,GPU_I_PROFILE,state}` (MIG instances, used or
// free) and `loom_gpu_shared_bytes{node,gpu,state}` (a shared GPU's memory,
// used or free), for the partitioned GPUs of `cluster` (docs/metrics.md).
void WriteGpuPartMetrics(const ClusterState& state, const Cluster& cluster,
                         MetricsWriter& out);

}  // namespace loom
