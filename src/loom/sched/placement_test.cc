#include "loom/sched/placement.h"

#include <set>

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

JobShape Shape(int tasks, int gpt, GpuModelId model = kAnyGpuModel) {
  JobShape s;
  s.tasks = tasks;
  s.gpus_per_task = gpt;
  s.gpu_model = model;
  return s;
}

std::set<int> NodesOf(const Placement& p) {
  std::set<int> n;
  for (const TaskPlacement& t : p.tasks) n.insert(t.node);
  return n;
}

// Occupies `gpus` GPUs of `node` with a dummy job.
void Fill(ClusterState& st, JobId id, int node, int gpus) {
  Placement p;
  p.gpu_model = st.NodeModel(node);
  uint32_t mask = 0;
  for (int g = 0; g < gpus; ++g) mask |= 1u << g;
  p.tasks = {{node, mask}};
  st.Allocate(id, p, JobShape{}, absl::InfiniteFuture());
}

TEST(Placement, SmallJobStaysOnOneNode) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  auto p = FindPlacement(st, Shape(2, 4), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(NodesOf(*p).size(), 1u);
  EXPECT_EQ(p->switch_level, 0);
  EXPECT_NE(p->tasks[0].gpu_mask, p->tasks[1].gpu_mask);
  EXPECT_EQ(p->tasks[0].gpu_mask & p->tasks[1].gpu_mask, 0u);
}

TEST(Placement, SmallJobDoesNotSplitAcrossNodes) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 0, 4);
  Fill(st, 2, 1, 4);
  // 8 GPUs are free in total, 4 per node: an 8-GPU job must not split.
  PendingReason why;
  EXPECT_FALSE(FindPlacement(st, Shape(2, 4), nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoNodeFits);
  EXPECT_EQ(why.need, 8);
  EXPECT_EQ(why.have, 4);
  EXPECT_FALSE(FindPlacement(st, Shape(1, 8), nullptr, nullptr));
  EXPECT_TRUE(FindPlacement(st, Shape(1, 4), nullptr, nullptr));
}

TEST(Placement, BestFitPrefersPartlyUsedNodes) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 3, 5);  // node 3: 3 free
  Fill(st, 2, 1, 2);  // node 1: 6 free
  auto p = FindPlacement(st, Shape(1, 2), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);  // the tightest fit
  p = FindPlacement(st, Shape(1, 4), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
}

TEST(Placement, IdleNodeFromFullestLeaf) {
  // Leaves {0,1} and {2,3}; node 2 busy, so leaf 1 has one idle node left.
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 2, 8);
  auto p = FindPlacement(st, Shape(1, 1), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);  // keeps leaf 0 whole
}

TEST(Placement, GangUsesLowestSwitchLevel) {
  // 3 levels: 4 nodes per leaf, 2 leaves per spine, 2 spines under a core.
  Cluster c = MakeCluster({{16, 0}}, 4, 2);
  ASSERT_EQ(c.topology.num_levels(), 3);
  ClusterState st(c, false);
  auto p = FindPlacement(st, Shape(4, 8), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->switch_level, 1);
  EXPECT_EQ(p->leaves, 1);
  // Break every leaf so that no leaf has 4 idle nodes: a 4-node job then
  // needs a spine (level 2), not the core.
  for (int leaf = 0; leaf < 4; ++leaf) Fill(st, 100 + leaf, leaf * 4, 1);
  p = FindPlacement(st, Shape(4, 8), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->switch_level, 2);
  EXPECT_EQ(p->leaves, 2);
  const std::set<int> nodes = NodesOf(*p);
  EXPECT_EQ(c.topology.LowestCommonLevel(
                std::vector<int>(nodes.begin(), nodes.end())),
            2);
  // 7 whole nodes: more than a spine holds now (6), so the core.
  p = FindPlacement(st, Shape(7, 8), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->switch_level, 3);
  EXPECT_EQ(p->leaves, 3);  // 3+3+1: the fewest leaves
}

TEST(Placement, FewestLeavesAndBestFitSwitch) {
  // Two leaves of 4 under one spine; leaf 0 has 3 idle nodes, leaf 1 has 4.
  Cluster c = MakeCluster({{8, 0}}, 4, 8);
  ClusterState st(c, false);
  Fill(st, 1, 0, 8);
  // A 3-node job fits both leaves; best fit picks the leaf with 3.
  auto p = FindPlacement(st, Shape(3, 8), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->leaves, 1);
  for (int n : NodesOf(*p)) EXPECT_LT(n, 4);
}

TEST(Placement, AllOrNothing) {
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  ClusterState st(c, false);
  Fill(st, 1, 0, 1);
  Fill(st, 2, 1, 1);
  PendingReason why;
  EXPECT_FALSE(FindPlacement(st, Shape(3, 8), nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoSwitchFits);
  EXPECT_EQ(why.need, 3);
  EXPECT_EQ(why.have, 2);
  EXPECT_TRUE(why.whole_nodes);
  EXPECT_EQ(st.TotalFreeGpus(), 30);  // nothing was taken
}

TEST(Placement, ModelsAndSpeedPreference) {
  Cluster c = MakeCluster({{2, 1}, {2, 0}}, 4, 8);  // a100 nodes first
  ClusterState st(c, false);
  auto p = FindPlacement(st, Shape(1, 8), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpu_model, 0);  // h200 is faster
  p = FindPlacement(st, Shape(1, 8, 1), nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpu_model, 1);
  EXPECT_LT(p->tasks[0].node, 2);
  // 3 nodes of one model do not exist: a100 has 2, h200 has 2.
  EXPECT_FALSE(FindPlacement(st, Shape(3, 8), nullptr, nullptr));
}

TEST(Placement, AvoidMask) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  ClusterState st(c, false);
  NodeMask avoid(2);
  avoid.Insert(0);
  auto p = FindPlacement(st, Shape(1, 1), &avoid, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
  avoid.Insert(1);
  EXPECT_FALSE(FindPlacement(st, Shape(1, 1), &avoid, nullptr));
}

TEST(Placement, OneTaskPerNodeSpreadsSmallGangs) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);  // two leaves of two nodes
  ClusterState st(c, false);
  JobShape spread = *ShapeFromTotalGpus(4, 8, 2);  // loom run -g 4 --nodes 2
  ASSERT_TRUE(spread.one_task_per_node);
  auto p = FindPlacement(st, spread, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(NodesOf(*p).size(), 2u);
  EXPECT_EQ(p->switch_level, 1);  // both nodes under one leaf
  EXPECT_EQ(p->nodes, 2);
  // Three nodes busy: one node left cannot take two tasks of a spread gang,
  // though it has the GPUs for both.
  Fill(st, 1, 0, 8);
  Fill(st, 2, 1, 8);
  Fill(st, 3, 2, 8);
  PendingReason why;
  EXPECT_FALSE(FindPlacement(st, spread, nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoSwitchFits);
  EXPECT_TRUE(FindPlacement(st, Shape(2, 2), nullptr, nullptr));
  std::string reason;
  EXPECT_FALSE(CouldEverRun(c, *ShapeFromTotalGpus(5, 8, 5), &reason));
  EXPECT_NE(reason.find("needs 5 h200 nodes"), std::string::npos) << reason;
  EXPECT_TRUE(CouldEverRun(c, *ShapeFromTotalGpus(4, 8, 4), &reason));
}

TEST(Placement, CouldEverRun) {
  Cluster c = MakeCluster({{18, 0}, {10, 1}}, 16, 8);
  std::string why;
  EXPECT_TRUE(CouldEverRun(c, Shape(18, 8), &why));
  EXPECT_FALSE(CouldEverRun(c, Shape(19, 8, 0), &why));
  EXPECT_NE(why.find("19"), std::string::npos) << why;
  EXPECT_FALSE(CouldEverRun(c, Shape(11, 8, 1), &why));
  EXPECT_FALSE(CouldEverRun(c, Shape(19, 8), &why));  // no mixing models
  JobShape cpu = Shape(1, 1);
  cpu.cpus_milli_per_task = 1000000;
  EXPECT_FALSE(CouldEverRun(c, cpu, &why));
}

}  // namespace
}  // namespace loom
