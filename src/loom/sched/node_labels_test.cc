#include "loom/sched/node_labels.h"

#include "gtest/gtest.h"
#include "loom/core/labels.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;

TEST(NodeLabels, StartsWithDeclaredLabelsAndMasksNonMatchingNodes) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  c.nodes[1].labels = {{"nvme", "fast"}};
  NodeLabels labels(c);
  EXPECT_EQ(labels.Get(1).at("nvme"), "fast");
  const int id = labels.Intern({{"nvme", "fast"}});
  ASSERT_GT(id, 0);
  const NodeMask* out = labels.Excluded(id);
  ASSERT_NE(out, nullptr);
  EXPECT_TRUE(out->Contains(0));
  EXPECT_FALSE(out->Contains(1));
  EXPECT_EQ(labels.Matching(id), 1);
  // Follows label changes.
  EXPECT_TRUE(labels.Set(2, {{"nvme", "fast"}}));
  EXPECT_FALSE(labels.Set(2, {{"nvme", "fast"}}));
  EXPECT_FALSE(labels.Excluded(id)->Contains(2));
  EXPECT_EQ(labels.Matching(id), 2);
  EXPECT_FALSE(labels.Set(99, {}));
}

TEST(NodeLabels, InternsEqualSelectorsOnceAndCountsReferences) {
  Cluster c = MakeCluster({{2, 0}}, 2, 1);
  NodeLabels labels(c);
  EXPECT_EQ(labels.Intern({}), 0);
  EXPECT_EQ(labels.Excluded(0), nullptr);
  EXPECT_EQ(labels.Matching(0), 2);
  const int a = labels.Intern({{"k", "v"}});
  EXPECT_EQ(labels.Intern({{"k", "v"}}), a);
  const int b = labels.Intern({{"k", "w"}});
  EXPECT_NE(a, b);
  labels.Release(a);
  EXPECT_EQ(labels.Selector(a).at("k"), "v");  // one reference left
  labels.Release(a);
  EXPECT_TRUE(labels.Selector(a).empty());
  EXPECT_EQ(labels.Excluded(a), nullptr);
  // The freed id is reused.
  EXPECT_EQ(labels.Intern({{"x", ""}}), a);
  EXPECT_EQ(labels.Matching(a), 0);
}

TEST(NodeLabels, EmptySelectorValueMatchesAnyValue) {
  EXPECT_TRUE(MatchesSelector({{"nvme", ""}}, {{"nvme", "fast"}}));
  EXPECT_FALSE(MatchesSelector({{"nvme", ""}}, {{"gpu.model", "h200"}}));
  EXPECT_FALSE(MatchesSelector({{"nvme", "slow"}}, {{"nvme", "fast"}}));
  EXPECT_TRUE(MatchesSelector({}, {}));
}

TEST(NodeLabels, RemapKeepsLabelsByOldNode) {
  Cluster c = MakeCluster({{3, 0}}, 3, 1);
  NodeLabels labels(c);
  labels.Set(2, {{"gpu.driver", "1"}});
  const int id = labels.Intern({{"gpu.driver", "1"}});
  Cluster next = MakeCluster({{2, 0}}, 2, 1);
  next.nodes[0].labels = {{"declared", "yes"}};
  labels.Remap(next, {-1, 2});
  EXPECT_EQ(labels.num_nodes(), 2);
  EXPECT_EQ(labels.Get(0).at("declared"), "yes");
  EXPECT_EQ(labels.Get(1).at("gpu.driver"), "1");
  EXPECT_EQ(labels.Excluded(id)->size(), 2);
  EXPECT_EQ(labels.Matching(id), 1);
}

}  // namespace
}  // namespace loom
