#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// A switch of the network tree. Level 1 is a leaf (top-of-rack) switch whose
// children are nodes; level k > 1 switches have switches of level k-1 as
// children. The tree has exactly one root, at the highest level.
struct Switch {
  std::string name;
  int level = 1;
  int parent = -1;            // switch index, -1 for the root
  std::vector<int> children;  // switch indices (level > 1)
  std::vector<int> nodes;     // node ids (leaves only)
  int node_count = 0;         // nodes anywhere below
};

// An explicit tree as written in a cluster spec: a switch with either child
// switches or node names.
struct TreeSpec {
  std::string name;
  std::vector<TreeSpec> children;
  std::vector<int> nodes;
};

// The node -> leaf -> spine -> core tree. Immutable after construction.
// Switch indices are dense; switches of one level are contiguous and in the
// order of the nodes below them.
class Topology {
 public:
  Topology() = default;

  // A regular tree: `nodes_per_leaf` nodes under each leaf switch,
  // `leaves_per_spine` leaves under each spine; a core switch is added when
  // there is more than one spine. With a single leaf the leaf is the root.
  static absl::StatusOr<Topology> Uniform(int num_nodes, int nodes_per_leaf,
                                          int leaves_per_spine);

  // A tree given switch by switch. Every node id in [0, num_nodes) must appear
  // under exactly one leaf, and all leaves must be at the same depth.
  static absl::StatusOr<Topology> Explicit(int num_nodes,
                                           const std::vector<TreeSpec>& roots);

  int num_nodes() const { return static_cast<int>(leaf_of_node_.size()); }
  int num_switches() const { return static_cast<int>(switches_.size()); }
  // Number of switch levels: 1 for a single switch, 3 for leaf/spine/core.
  int num_levels() const { return num_levels_; }
  int root() const { return root_; }
  const Switch& sw(int index) const { return switches_[index]; }
  int leaf_of(int node) const { return leaf_of_node_[node]; }
  // The ancestor of `node` at `level` (1 = its leaf).
  int AncestorAt(int node, int level) const;
  // Switch indices at `level`, in order.
  const std::vector<int>& SwitchesAtLevel(int level) const {
    return by_level_[level];
  }
  // Leaf switches below (or equal to) switch `index`, in order.
  std::vector<int> LeavesUnder(int index) const;
  // The level of the lowest switch that has every node of `nodes` below it;
  // 0 when all are the same node (or `nodes` is empty).
  int LowestCommonLevel(const std::vector<int>& nodes) const;
  // The tree as a spec from the root down (`Explicit` of it gives the same
  // tree); an empty spec for an empty topology.
  TreeSpec ToSpec() const;

 private:
  absl::Status Finish();

  std::vector<Switch> switches_;
  std::vector<int> leaf_of_node_;
  std::vector<std::vector<int>> by_level_;   // index 0 unused
  std::vector<std::vector<int>> ancestors_;  // [node][level] -> switch
  int num_levels_ = 0;
  int root_ = -1;
};

}  // namespace loom
