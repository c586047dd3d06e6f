#pragma once

// Reading a cluster spec's `network` (docs/cluster-spec.md). Internal to
// `core`, like yaml_util.h.

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "loom/core/cluster.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// The most nodes a cluster spec may declare (a node range may not name
// more either).
inline constexpr int64_t kMaxClusterNodes = 1000000;

// Sets `cluster->topology` (its nodes already parsed) from the `network`
// field (null: the default, 16 nodes per leaf and 8 leaves per spine):
// `{nodes_per_leaf, leaves_per_spine}` or `{tree: [switch, ...]}` where a
// switch is `{name, children: [switch, ...]}` or `{name, nodes: [pattern,
// ...]}` ("h200-[0-3,8]"). Errors are InvalidArgument "<source>:<line>:
// <column>: <path>: <reason>".
absl::Status ParseClusterNetwork(absl::string_view source,
                                 const yaml::Field* field,
                                 const YAML::Node& root, Cluster* cluster);

}  // namespace loom::internal
