#pragma once

// The environments of a batch job (docs/sbatch.md, "Environment"): the
// script's (Slurm's SLURM_* names beside loom's own) and each srun step
// task's (SLURM_PROCID, ... and the torch.distributed contract). Pure
// functions of what the batch head and the step hosts know.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/sbatch_job.h"
#include "loom/core/srun_options.h"

namespace loom::batch {

using Env = std::map<std::string, std::string>;

// What the batch head learns when the job runs.
struct BatchRuntime {
  uint64_t job_id = 0;
  std::optional<uint64_t> array_job_id;  // an array element's array
  std::optional<int> array_task_id;
  std::optional<int> array_task_count, array_task_min, array_task_max;
  int restart_count = 0;
  std::string user;
  std::vector<AllocationNode> nodes;  // node 0 runs the script
};

// Reads the runtime facts from the head task's environment (LOOM_JOB_ID,
// LOOM_ARRAY_*, LOOM_RESTART_COUNT, LOOM_JOB_USER, else USER); `nodes` is
// left to the caller.
BatchRuntime RuntimeFromEnv(const Env& task_env);

// The variables that describe one node, taken from that node's task
// environment: its GPUs, its names, its checkpoint directory.
Env NodeEnvironment(const Env& task_env);

// The script's environment: the task's, without loom's torch contract
// (MASTER_ADDR, ... describe the batch allocation's control channel, not a
// training world; srun sets them per step), with the SLURM_* variables, the
// shims' directory first on PATH and the head's socket in
// LOOM_BATCH_SOCKET.
Env ScriptEnvironment(const Env& task_env, const BatchInvocation& b,
                      const BatchRuntime& rt, const std::string& shim_dir,
                      const std::string& socket_path);

// One step task's environment: srun's own, the node's variables
// (`node_env`, from `NodeEnvironment`) over it, then the step's SLURM_*
// and, unless srun's environment has them, MASTER_ADDR (the host of the
// step's first node) and MASTER_PORT (`master_port`). RANK, LOCAL_RANK,
// WORLD_SIZE, LOCAL_WORLD_SIZE and NODE_RANK always follow the step.
Env StepTaskEnvironment(const Env& srun_env, const Env& node_env,
                        const std::vector<AllocationNode>& alloc,
                        const StepPlan& plan, uint32_t step_id,
                        size_t step_node, int localid, int master_port);

// The torch contract names that the script does not inherit.
inline constexpr const char* kTorchContract[] = {
    "MASTER_ADDR", "MASTER_PORT",      "WORLD_SIZE", "RANK",
    "LOCAL_RANK",  "LOCAL_WORLD_SIZE", "NODE_RANK",  "GROUP_RANK"};

}  // namespace loom::batch
