#pragma once

// Tasks on parts of GPUs on the server (docs/scheduling.md "GPU
// partitions"): the scheduler's slice placement as a task record, its
// stored and API form, and back for a restarted server.

#include <optional>

#include "absl/status/statusor.h"
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

}  // namespace loom
