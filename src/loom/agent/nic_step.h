#pragma once

// The launch step of a task's RDMA NICs (docs/agent.md, "NICs"): the NICs
// paired with the task's GPUs (nic_probe.h) become its `NCCL_IB_HCA`, so
// that NCCL sends each GPU's traffic through the NIC beside it, and their
// verbs devices are what its container gets of /dev/infiniband.

#include <memory>
#include <string>
#include <vector>

#include "loom/agent/agent_node.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/nic_probe.h"

namespace loom {

// The NICs of `node` paired with `gpus`, in the order of the GPUs, each
// once. Empty for a task without GPUs, or a node without NICs.
std::vector<const NicDevice*> NicsOfGpus(const AgentNode& node,
                                         const std::vector<int>& gpus);

// `NCCL_IB_HCA` naming exactly `nics`: "=mlx5_0,mlx5_1" (the leading '='
// makes NCCL match whole names, so that mlx5_1 is not also mlx5_10).
std::string NcclIbHca(const std::vector<const NicDevice*>& nics);

// The step, "nics". `Prepare` sets `LaunchContext::nic_devices`: the verbs
// devices (`infiniband/uverbs<N>`) of the NICs named in `NCCL_IB_HCA` when
// the step sets it, of all the node's NICs otherwise (the job sets its own
// `NCCL_IB_HCA`, the task has no GPUs, or none of them is paired), and
// `infiniband/rdma_cm` with them; the image step gives a container those
// of the node's device files that exist. `Apply` sets `NCCL_IB_HCA` unless
// the job's env has it.
std::unique_ptr<const LaunchStep> MakeNicStep();

}  // namespace loom
