#pragma once

// A simulated cluster from a published node list (the Alibaba openb
// `openb_node_list_gpu_node.csv`, loom/trace/node_list.h), for
// `loom sim --cluster FILE.csv` (docs/simulator.md "The Alibaba openb
// trace").

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/trace/node_list.h"

namespace loom {

// One GPU's memory in a cluster built from a node list: 1000 MiB, so that a
// pod's `gpu_milli` (thousandths of a GPU) is a share of `gpu_milli` MiB.
inline constexpr int64_t kNodeListGpuMemoryBytes = int64_t{1000} << 20;

// Builds the cluster: one GPU model per `model` (lower case, speed 1.0,
// `kNodeListGpuMemoryBytes` of memory), one pool per distinct (model, GPUs,
// CPUs, memory) in order of first appearance, sharing allowed, no MIG;
// nodes keep their `sn` as name and are numbered in pool order; 32 nodes
// per leaf switch, 16 leaves per spine; the default priority classes.
absl::StatusOr<Cluster> ClusterFromNodeList(
    const std::vector<NodeListEntry>& nodes, std::string name);

// What `loom sim --cluster` accepts: a preset or a cluster spec file
// (`LoadCluster`), or a node list (a file whose first line is a node list
// header, `IsNodeListHeader`).
absl::StatusOr<Cluster> LoadSimCluster(const std::string& name_or_path);

}  // namespace loom
