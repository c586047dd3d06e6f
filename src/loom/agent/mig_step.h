#pragma once

// The launch step of a task on part of a GPU (docs/agent.md "MIG"; the
// launch's `slice`, launch_request.h). A MIG task's GPU is given the layout
// the server sent (mig_control.h), unless that would destroy an instance a
// running task of the node uses, and the task sees only its own instance
// (`CUDA_VISIBLE_DEVICES=MIG-<uuid>`). A share of a GPU gets
// `LOOM_GPU_MEMORY_LIMIT`, which nothing enforces.

#include <sys/types.h>

#include <memory>
#include <string>

#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/launch_steps.h"

namespace loom {

// The step, "mig" (after "gpus"). `Prepare`, for a MIG slice: checks the
// slice against the GPU (a MIG-capable model; the profile's name and index
// as loom's profiles of the GPU have them; a valid layout: `InvalidArgument`
// naming the field), refuses with `FailedPrecondition` (field `slice`) a
// layout that lacks an instance a live task of the node uses, or that
// changes a GPU a live task uses whole (or as a share); then makes the
// layout (`MigControl::Ensure` of the node's `mig`) and sets
// `LaunchContext::mig_uuid` to the UUID of the instance at the slice's
// start. Prepares of MIG launches are serialised. `Apply` sets
// `CUDA_VISIBLE_DEVICES` to that UUID (over any value) and
// `LOOM_MIG_PROFILE` to the profile, or for a share
// `LOOM_GPU_MEMORY_LIMIT` to its bytes.
//
// For a task that uses its GPUs whole or shares one, `Prepare` turns MIG
// mode off on those GPUs that are in MIG mode (a GPU a MIG task of a
// `mig.dynamic` pool left), unless a live task runs in one of its instances
// (`FailedPrecondition`, field `gpus`).
//
// A change of MIG mode that waits (NVML makes it only on an idle GPU, and
// some platforms only at a reset) is `Aborted` (the agent answers 503: the
// server queues the job again, without using up a restart), and the GPU
// goes into `AgentNode::mig_waits`.
std::unique_ptr<const LaunchStep> MakeMigStep();

// For each GPU of `node.mig_waits` that no live task uses: asks again for
// the mode its waiting change wants (`MigControl::Settle`; NVML makes it
// once the GPU is idle). A GPU whose change no longer waits (made, taken
// back, or the GPU reset) leaves `mig_waits`. From the health monitor's
// rounds; true when a GPU left (the server should hear it soon).
bool SettleMigModes(const AgentNode& node, const AgentLog& log);

// The MIG device (`MIG-...`) that process `pid`'s `CUDA_VISIBLE_DEVICES`
// names first, read from `<proc_root>/<pid>/environ`; "" when none (or it
// cannot be read). For tasks recovered after an agent restart.
std::string MigUuidOfProcess(pid_t pid, const std::string& proc_root = "/proc");

}  // namespace loom
