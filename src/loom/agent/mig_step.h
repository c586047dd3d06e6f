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
std::unique_ptr<const LaunchStep> MakeMigStep();

// The MIG device (`MIG-...`) that process `pid`'s `CUDA_VISIBLE_DEVICES`
// names first, read from `<proc_root>/<pid>/environ`; "" when none (or it
// cannot be read). For tasks recovered after an agent restart.
std::string MigUuidOfProcess(pid_t pid, const std::string& proc_root = "/proc");

}  // namespace loom
