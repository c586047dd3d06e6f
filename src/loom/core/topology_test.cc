#include "loom/core/topology.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Names of the switches with the given indices, for readable expectations.
std::vector<std::string> Names(const Topology& t,
                               const std::vector<int>& switches) {
  std::vector<std::string> names;
  for (int s : switches) names.push_back(t.sw(s).name);
  return names;
}

TreeSpec Leaf(std::string name, std::vector<int> nodes) {
  TreeSpec spec;
  spec.name = std::move(name);
  spec.nodes = std::move(nodes);
  return spec;
}

TreeSpec Parent(std::string name, std::vector<TreeSpec> children) {
  TreeSpec spec;
  spec.name = std::move(name);
  spec.children = std::move(children);
  return spec;
}

TEST(TopologyUniform, LeafAndSpine) {
  absl::StatusOr<Topology> t = Topology::Uniform(28, 16, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_nodes(), 28);
  EXPECT_EQ(t->num_levels(), 2);
  EXPECT_EQ(t->num_switches(), 3);
  EXPECT_THAT(Names(*t, t->SwitchesAtLevel(1)), ElementsAre("leaf0", "leaf1"));
  EXPECT_EQ(t->sw(t->root()).name, "spine0");
  EXPECT_EQ(t->sw(t->root()).parent, -1);
  EXPECT_EQ(t->sw(t->root()).node_count, 28);
  const int leaf1 = t->SwitchesAtLevel(1)[1];
  EXPECT_EQ(t->sw(leaf1).nodes.size(), 12u);
  EXPECT_EQ(t->sw(leaf1).parent, t->root());
  EXPECT_EQ(t->leaf_of(16), leaf1);
  EXPECT_EQ(t->AncestorAt(20, 1), leaf1);
  EXPECT_EQ(t->AncestorAt(20, 2), t->root());
  EXPECT_EQ(t->LowestCommonLevel({}), 0);
  EXPECT_EQ(t->LowestCommonLevel({3, 3}), 0);
  EXPECT_EQ(t->LowestCommonLevel({0, 15}), 1);
  EXPECT_EQ(t->LowestCommonLevel({0, 16}), 2);
}

TEST(TopologyUniform, ThreeTierFatTree) {
  absl::StatusOr<Topology> t = Topology::Uniform(2000, 16, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_levels(), 3);
  EXPECT_EQ(t->SwitchesAtLevel(1).size(), 125u);
  EXPECT_EQ(t->SwitchesAtLevel(2).size(), 16u);
  EXPECT_EQ(t->SwitchesAtLevel(3).size(), 1u);
  EXPECT_EQ(t->sw(t->root()).name, "core");
  EXPECT_EQ(t->sw(t->root()).node_count, 2000);
  EXPECT_EQ(t->LeavesUnder(t->root()).size(), 125u);
  // The last spine holds the five leaves left over (125 = 15 * 8 + 5).
  const int last_spine = t->SwitchesAtLevel(2).back();
  EXPECT_EQ(t->LeavesUnder(last_spine).size(), 5u);
  EXPECT_EQ(t->sw(last_spine).node_count, 5 * 16);
  // A leaf is its own only leaf.
  const int leaf = t->SwitchesAtLevel(1)[7];
  EXPECT_THAT(t->LeavesUnder(leaf), ElementsAre(leaf));
  // Switches of one level are contiguous and below the next level.
  for (int lvl = 1; lvl < 3; ++lvl) {
    const std::vector<int>& at = t->SwitchesAtLevel(lvl);
    for (size_t i = 1; i < at.size(); ++i) EXPECT_EQ(at[i], at[i - 1] + 1);
    EXPECT_LT(at.back(), t->SwitchesAtLevel(lvl + 1).front());
  }
  // Nodes 0 and 127 share spine 0 (leaves 0 and 7); node 128 is on spine 1.
  EXPECT_EQ(t->LowestCommonLevel({0, 127}), 2);
  EXPECT_EQ(t->LowestCommonLevel({0, 128}), 3);
  EXPECT_EQ(t->LowestCommonLevel({0, 5, 15}), 1);
  EXPECT_EQ(t->AncestorAt(1999, 3), t->root());
  EXPECT_EQ(t->AncestorAt(1999, 2), last_spine);
}

TEST(TopologyUniform, SingleLeafIsRoot) {
  absl::StatusOr<Topology> t = Topology::Uniform(5, 16, 8);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_levels(), 1);
  EXPECT_EQ(t->num_switches(), 1);
  EXPECT_EQ(t->root(), t->leaf_of(4));
  EXPECT_EQ(t->LowestCommonLevel({0, 4}), 1);
}

TEST(TopologyUniform, Rejects) {
  EXPECT_FALSE(Topology::Uniform(0, 16, 8).ok());
  EXPECT_FALSE(Topology::Uniform(10, 0, 8).ok());
  EXPECT_FALSE(Topology::Uniform(10, 16, 0).ok());
  EXPECT_THAT(std::string(Topology::Uniform(10, 0, 8).status().message()),
              HasSubstr("nodes_per_leaf"));
}

// core -> {spineA -> {leafA: 0 1, leafB: 2}, spineB -> {leafC: 3 4 5}}.
std::vector<TreeSpec> TwoSpines() {
  return {Parent("spineA", {Leaf("leafA", {0, 1}), Leaf("leafB", {2})}),
          Parent("spineB", {Leaf("leafC", {3, 4, 5})})};
}

TEST(TopologyExplicit, HandBuiltTree) {
  absl::StatusOr<Topology> t = Topology::Explicit(6, TwoSpines());
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_levels(), 3);
  EXPECT_EQ(t->num_switches(), 6);
  EXPECT_EQ(t->sw(t->root()).name, "core");
  EXPECT_EQ(t->sw(t->root()).node_count, 6);
  EXPECT_THAT(Names(*t, t->SwitchesAtLevel(1)),
              ElementsAre("leafA", "leafB", "leafC"));
  EXPECT_THAT(Names(*t, t->SwitchesAtLevel(2)),
              ElementsAre("spineA", "spineB"));

  EXPECT_EQ(t->sw(t->leaf_of(2)).name, "leafB");
  EXPECT_EQ(t->sw(t->AncestorAt(2, 1)).name, "leafB");
  EXPECT_EQ(t->sw(t->AncestorAt(2, 2)).name, "spineA");
  EXPECT_EQ(t->sw(t->AncestorAt(4, 2)).name, "spineB");
  EXPECT_EQ(t->AncestorAt(4, 3), t->root());

  const int spine_a = t->AncestorAt(0, 2);
  EXPECT_EQ(t->sw(spine_a).node_count, 3);
  EXPECT_THAT(Names(*t, t->LeavesUnder(spine_a)),
              ElementsAre("leafA", "leafB"));
  EXPECT_THAT(Names(*t, t->LeavesUnder(t->root())),
              ElementsAre("leafA", "leafB", "leafC"));

  EXPECT_EQ(t->LowestCommonLevel({1, 1}), 0);
  EXPECT_EQ(t->LowestCommonLevel({0, 1}), 1);
  EXPECT_EQ(t->LowestCommonLevel({0, 2}), 2);
  EXPECT_EQ(t->LowestCommonLevel({0, 1, 2}), 2);
  EXPECT_EQ(t->LowestCommonLevel({0, 5}), 3);
  EXPECT_EQ(t->LowestCommonLevel({3, 4, 5}), 1);
}

TEST(TopologyExplicit, SingleRootKeepsItsName) {
  absl::StatusOr<Topology> t = Topology::Explicit(
      4, {Parent("spine", {Leaf("a", {0, 1}), Leaf("b", {2, 3})})});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->num_levels(), 2);
  EXPECT_EQ(t->sw(t->root()).name, "spine");
  EXPECT_EQ(t->LowestCommonLevel({1, 2}), 2);
}

TEST(TopologyExplicit, Rejects) {
  // A node under two leaves.
  absl::StatusOr<Topology> twice =
      Topology::Explicit(3, {Leaf("a", {0, 1}), Leaf("b", {1, 2})});
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()),
              HasSubstr("two leaf switches"));
  // A node under no leaf.
  absl::StatusOr<Topology> missing =
      Topology::Explicit(3, {Leaf("a", {0}), Leaf("b", {2})});
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("node 1 is not under any leaf"));
  // A node outside the cluster.
  EXPECT_FALSE(Topology::Explicit(2, {Leaf("a", {0, 1, 2})}).ok());
  // Leaves at different depths.
  absl::StatusOr<Topology> depth = Topology::Explicit(
      3, {Parent("s", {Leaf("a", {0}), Parent("t", {Leaf("b", {1, 2})})})});
  ASSERT_FALSE(depth.ok());
  EXPECT_THAT(std::string(depth.status().message()),
              HasSubstr("different depths"));
  // A switch with both nodes and children.
  TreeSpec mixed = Parent("s", {Leaf("a", {0})});
  mixed.nodes = {1};
  EXPECT_FALSE(Topology::Explicit(2, {mixed}).ok());
  EXPECT_FALSE(Topology::Explicit(2, {}).ok());
  EXPECT_FALSE(Topology::Explicit(0, {Leaf("a", {})}).ok());
}

}  // namespace
}  // namespace loom
