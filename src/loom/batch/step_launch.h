#pragma once

// The launch of one srun step's tasks on one node (docs/sbatch.md, "How it
// runs"): the message the batch head sends each node of a step, and what a
// node does with it. Shared by the step hosts and the head (for node 0).

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/batch/batch_env.h"
#include "loom/batch/step_runner.h"
#include "loom/core/srun_options.h"
#include "nlohmann/json.hpp"

namespace loom::batch {

struct StepLaunch {
  uint32_t step = 0;
  size_t step_node = 0;  // which of `plan.nodes` this message is for
  StepPlan plan;
  std::vector<AllocationNode> alloc;
  std::vector<std::string> command;
  Env env;  // srun's environment
  std::string cwd;
  int master_port = 0;
};

nlohmann::json StepLaunchToJson(const StepLaunch& launch);
absl::StatusOr<StepLaunch> StepLaunchFromJson(const nlohmann::json& j);

// Starts the message's tasks on this node with `node_env` (this node's
// `NodeEnvironment`). A task that cannot be started is reported through
// `on_failed` (its procid and why), so that its step still ends.
void LaunchStepTasks(
    StepRunner& runner, const StepLaunch& launch, const Env& node_env,
    const std::function<void(uint32_t procid, const std::string& why)>&
        on_failed);

}  // namespace loom::batch
