#pragma once

#include <string>
#include <vector>

#include "loom/core/cluster.h"

namespace loom {

// One object that differs between two clusters, for `loom plan`: added
// (`+`), removed (`-`) or changed (`~`), in the style of Terraform's plan.
struct ClusterDiffLine {
  enum class Op { kAdd, kRemove, kChange };
  Op op = Op::kChange;
  // "cluster", "gpu_model", "pool", "node", "network", "project",
  // "priority_class", "containers" or "services".
  std::string kind;
  std::string name;
  // For a change, each field as "quota_gpus 96 -> 128"; for an addition or
  // removal, a short summary ("10 nodes of 8x h200").
  std::vector<std::string> details;
};

// The objects that differ from `from` to `to`, kind by kind (GPU models,
// pools, nodes, network, projects, priority classes, containers, services,
// then `private_data` as "~ cluster private_data: [] -> [jobs]"); within a
// kind, `from`'s objects in its order, then those `to` adds in its order.
// Nodes of a pool added or removed as a whole are in the pool's line, not
// listed one by one. Empty when the clusters are the same.
std::vector<ClusterDiffLine> DiffClusters(const Cluster& from,
                                          const Cluster& to);

// "+ pool a100-legacy (10 nodes of 8x a100)",
// "~ project search: quota_gpus 96 -> 128, weight 2 -> 3", "- node h200-17".
std::string FormatDiffLine(const ClusterDiffLine& line);

}  // namespace loom
