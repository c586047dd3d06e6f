#pragma once

// Submit-time checks of what a job spec asks of one node against the
// nodes a cluster declares (docs/job-spec.md): the parts the scheduler does
// not weigh, or weighs only where a pool declares them, so that a typo
// (`nics_per_task: 1024`, `shm_size: 1Pi`) is a 400 naming the field, not a
// job that waits for ever or a task the node cannot hold. Pure functions of
// the spec and the cluster.

#include <cstdint>
#include <string_view>

#include "absl/status/status.h"
#include "loom/core/cluster.h"
#include "loom/core/job_spec.h"

namespace loom {

// Checks `spec` against the pools of `cluster` its `gpu_model` may use:
// - `resources.nics_per_task`: at most the most NICs a node of those pools
//   declares (`nics:`), the message naming each pool's count;
// - `resources.gpu_share.memory`: at most the memory of one GPU of those
//   pools that may be shared (pools without `sharing` are left to the
//   scheduler's infeasible answer);
// - `container.shm_size`: as `CheckShmSize`.
// InvalidArgument naming the field, or OK. The shape itself (GPUs, CPUs,
// memory) is the scheduler's question (`CouldEverRun`).
absl::Status CheckSpecFitsNodes(const JobSpec& spec, const Cluster& cluster);

// Checks a `/dev/shm` size (`container.shm_size`; 0: not given, always OK):
// /dev/shm is memory, so at most the task's `memory_per_task` when it has
// one, else at most the memory of the largest node of the pools
// `gpu_model` may use. InvalidArgument naming `container.shm_size`.
absl::Status CheckShmSize(int64_t shm_bytes, int64_t memory_per_task,
                          std::string_view gpu_model, const Cluster& cluster);

}  // namespace loom
