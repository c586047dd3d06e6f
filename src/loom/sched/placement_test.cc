#include "loom/sched/placement.h"

#include <random>
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
  auto p = FindPlacement(st, Shape(2, 4), nullptr, nullptr, nullptr);
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
  EXPECT_FALSE(FindPlacement(st, Shape(2, 4), nullptr, nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoNodeFits);
  EXPECT_EQ(why.need, 8);
  EXPECT_EQ(why.have, 4);
  EXPECT_FALSE(FindPlacement(st, Shape(1, 8), nullptr, nullptr, nullptr));
  EXPECT_TRUE(FindPlacement(st, Shape(1, 4), nullptr, nullptr, nullptr));
}

TEST(Placement, BestFitPrefersPartlyUsedNodes) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 3, 5);  // node 3: 3 free
  Fill(st, 2, 1, 2);  // node 1: 6 free
  auto p = FindPlacement(st, Shape(1, 2), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);  // the tightest fit
  p = FindPlacement(st, Shape(1, 4), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
}

TEST(Placement, IdleNodeFromFullestLeaf) {
  // Leaves {0,1} and {2,3}; node 2 busy, so leaf 1 has one idle node left.
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 2, 8);
  auto p = FindPlacement(st, Shape(1, 1), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);  // keeps leaf 0 whole
}

TEST(Placement, GangUsesLowestSwitchLevel) {
  // 3 levels: 4 nodes per leaf, 2 leaves per spine, 2 spines under a core.
  Cluster c = MakeCluster({{16, 0}}, 4, 2);
  ASSERT_EQ(c.topology.num_levels(), 3);
  ClusterState st(c, false);
  auto p = FindPlacement(st, Shape(4, 8), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->switch_level, 1);
  EXPECT_EQ(p->leaves, 1);
  // Break every leaf so that no leaf has 4 idle nodes: a 4-node job then
  // needs a spine (level 2), not the core.
  for (int leaf = 0; leaf < 4; ++leaf) Fill(st, 100 + leaf, leaf * 4, 1);
  p = FindPlacement(st, Shape(4, 8), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->switch_level, 2);
  EXPECT_EQ(p->leaves, 2);
  const std::set<int> nodes = NodesOf(*p);
  EXPECT_EQ(c.topology.LowestCommonLevel(
                std::vector<int>(nodes.begin(), nodes.end())),
            2);
  // 7 whole nodes: more than a spine holds now (6), so the core.
  p = FindPlacement(st, Shape(7, 8), nullptr, nullptr, nullptr);
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
  auto p = FindPlacement(st, Shape(3, 8), nullptr, nullptr, nullptr);
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
  EXPECT_FALSE(FindPlacement(st, Shape(3, 8), nullptr, nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoSwitchFits);
  EXPECT_EQ(why.need, 3);
  EXPECT_EQ(why.have, 2);
  EXPECT_TRUE(why.whole_nodes);
  EXPECT_EQ(st.TotalFreeGpus(), 30);  // nothing was taken
}

TEST(Placement, ModelsAndSpeedPreference) {
  Cluster c = MakeCluster({{2, 1}, {2, 0}}, 4, 8);  // a100 nodes first
  ClusterState st(c, false);
  auto p = FindPlacement(st, Shape(1, 8), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpu_model, 0);  // h200 is faster
  p = FindPlacement(st, Shape(1, 8, 1), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->gpu_model, 1);
  EXPECT_LT(p->tasks[0].node, 2);
  // 3 nodes of one model do not exist: a100 has 2, h200 has 2.
  EXPECT_FALSE(FindPlacement(st, Shape(3, 8), nullptr, nullptr, nullptr));
}

TEST(Placement, AvoidMask) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  ClusterState st(c, false);
  NodeMask avoid(2);
  avoid.Insert(0);
  auto p = FindPlacement(st, Shape(1, 1), &avoid, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
  avoid.Insert(1);
  EXPECT_FALSE(FindPlacement(st, Shape(1, 1), &avoid, nullptr, nullptr));
}

TEST(Placement, OneTaskPerNodeSpreadsSmallGangs) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);  // two leaves of two nodes
  ClusterState st(c, false);
  JobShape spread = *ShapeFromTotalGpus(4, 8, 2);  // loom run -g 4 --nodes 2
  ASSERT_TRUE(spread.one_task_per_node);
  auto p = FindPlacement(st, spread, nullptr, nullptr, nullptr);
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
  EXPECT_FALSE(FindPlacement(st, spread, nullptr, nullptr, &why));
  EXPECT_EQ(why.code, PendingReason::Code::kNoSwitchFits);
  EXPECT_TRUE(FindPlacement(st, Shape(2, 2), nullptr, nullptr, nullptr));
  std::string reason;
  EXPECT_FALSE(CouldEverRun(c, *ShapeFromTotalGpus(5, 8, 5), &reason));
  EXPECT_NE(reason.find("needs 5 h200 nodes"), std::string::npos) << reason;
  EXPECT_TRUE(CouldEverRun(c, *ShapeFromTotalGpus(4, 8, 4), &reason));
}

NodeMask Mask(int size, std::initializer_list<int> nodes) {
  NodeMask m(size);
  for (int n : nodes) m.Insert(n);
  return m;
}

TEST(ImageLocality, OneNodeJobTakesImageNodeAmongEqualFit) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 1, 5);  // node 1: 3 free
  Fill(st, 2, 3, 5);  // node 3: 3 free
  Fill(st, 3, 2, 2);  // node 2: 6 free
  auto p = FindPlacement(st, Shape(1, 2), nullptr, nullptr, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);  // the tightest fit, lowest id
  EXPECT_EQ(p->preferred_tasks, 0);
  const NodeMask image = Mask(4, {3});
  p = FindPlacement(st, Shape(1, 2), nullptr, &image, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);  // as tight, and holds the image
  EXPECT_EQ(p->preferred_tasks, 1);
  EXPECT_EQ(p->tasks[0].gpu_mask, 0b1100000u);
  // An avoided image node is not used.
  const NodeMask avoid = Mask(4, {3});
  p = FindPlacement(st, Shape(1, 2), &avoid, &image, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
  EXPECT_EQ(p->preferred_tasks, 0);
}

TEST(ImageLocality, NeverAWorseFitForTheImage) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  Fill(st, 1, 1, 5);  // node 1: 3 free
  Fill(st, 2, 2, 2);  // node 2: 6 free
  // Node 2 (6 free) and the idle nodes 0 and 3 hold the image; node 1 is
  // the best fit and wins.
  const NodeMask image = Mask(4, {0, 2, 3});
  auto p = FindPlacement(st, Shape(1, 2), nullptr, &image, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
  EXPECT_EQ(p->preferred_tasks, 0);
  // Four GPUs do not fit node 1: node 2 is the best fit and holds it.
  p = FindPlacement(st, Shape(1, 4), nullptr, &image, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 2);
  EXPECT_EQ(p->preferred_tasks, 1);
}

TEST(ImageLocality, IdleNodeWithinTheChosenLeaf) {
  // Leaves {0,1} and {2,3}.
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, false);
  // Both leaves have 2 idle nodes: leaf 0 is chosen, node 0 first.
  const NodeMask in_leaf = Mask(4, {1});
  auto p = FindPlacement(st, Shape(1, 8), nullptr, &in_leaf, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 1);
  EXPECT_EQ(p->preferred_tasks, 1);
  // The image in the other leaf does not move the job there.
  const NodeMask other_leaf = Mask(4, {2, 3});
  p = FindPlacement(st, Shape(1, 8), nullptr, &other_leaf, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 0);
  EXPECT_EQ(p->preferred_tasks, 0);
  // Node 2 busy: leaf 1 has the fewest idle nodes and keeps leaf 0 whole,
  // image or not.
  Fill(st, 1, 2, 8);
  const NodeMask leaf0 = Mask(4, {0, 1});
  p = FindPlacement(st, Shape(1, 1), nullptr, &leaf0, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->tasks[0].node, 3);
  EXPECT_EQ(p->preferred_tasks, 0);
}

TEST(ImageLocality, GangKeepsItsLeavesAndTakesImageNodesWithin) {
  // 3 levels: 4 nodes per leaf, 2 leaves per spine, 2 spines.
  Cluster c = MakeCluster({{16, 0}}, 4, 2);
  ClusterState st(c, false);
  Fill(st, 1, 0, 8);  // leaf 0: 3 idle nodes, the best fit for 2 nodes
  auto base = FindPlacement(st, Shape(2, 8), nullptr, nullptr, nullptr);
  ASSERT_TRUE(base);
  EXPECT_EQ(NodesOf(*base), (std::set<int>{1, 2}));
  // The image on node 3 and on all of leaf 1: leaf 0 stays, node 3 is used.
  const NodeMask image = Mask(16, {3, 4, 5, 6, 7});
  auto p = FindPlacement(st, Shape(2, 8), nullptr, &image, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(NodesOf(*p), (std::set<int>{1, 3}));
  EXPECT_EQ(p->preferred_tasks, 1);
  EXPECT_EQ(p->switch_level, base->switch_level);
  EXPECT_EQ(p->switch_index, base->switch_index);
  EXPECT_EQ(p->leaves, base->leaves);
  EXPECT_EQ(p->nodes, base->nodes);

  // Across leaves: no leaf holds 6 nodes, so spine 0 (leaves 0 and 1, 7
  // idle nodes; best fit against spine 1's 8): all of leaf 1 and 2 of leaf
  // 0's 3 idle nodes, nodes 1 and 2 without the image.
  base = FindPlacement(st, Shape(6, 8), nullptr, nullptr, nullptr);
  ASSERT_TRUE(base);
  EXPECT_EQ(NodesOf(*base), (std::set<int>{1, 2, 4, 5, 6, 7}));
  // The image on node 3 and on spine 1's nodes 8-11: the spine and the
  // leaves stay; within leaf 0, node 3 replaces node 2.
  const NodeMask late = Mask(16, {3, 8, 9, 10, 11});
  p = FindPlacement(st, Shape(6, 8), nullptr, &late, nullptr);
  ASSERT_TRUE(p);
  EXPECT_EQ(NodesOf(*p), (std::set<int>{1, 3, 4, 5, 6, 7}));
  EXPECT_EQ(p->switch_level, 2);
  EXPECT_EQ(p->switch_level, base->switch_level);
  EXPECT_EQ(p->switch_index, base->switch_index);
  EXPECT_EQ(p->leaves, base->leaves);
  EXPECT_EQ(p->nodes, base->nodes);
  EXPECT_EQ(p->preferred_tasks, 1);
}

TEST(ImageLocality, GangDoesNotUseMoreNodesForTheImage) {
  Cluster c = MakeCluster({{4, 0}}, 4, 8);  // one leaf of 4
  ClusterState st(c, false);
  Fill(st, 1, 0, 4);  // node 0: room for one 4-GPU task, the others two
  const NodeMask image = Mask(4, {0, 3});
  auto p = FindPlacement(st, Shape(4, 4), nullptr, &image, nullptr);
  ASSERT_TRUE(p);
  // Two whole nodes (fewest nodes), the image node 3 among them; node 0
  // holds the image but has less room.
  EXPECT_EQ(NodesOf(*p), (std::set<int>{1, 3}));
  EXPECT_EQ(p->nodes, 2);
  EXPECT_EQ(p->preferred_tasks, 2);
}

// On random cluster states and random image masks: whether a placement is
// found, the model, the fit of a one-node job and a gang's switch, leaves
// and node count never depend on `prefer`; an empty mask and a null one give
// the same placement, and so does a mask of every node (all nodes tie).
TEST(ImageLocality, PreferOnlyBreaksTies) {
  Cluster c = MakeCluster({{24, 0}, {8, 1}}, 4, 4);
  const int n = static_cast<int>(c.nodes.size());
  ClusterState st(c, false);
  std::mt19937 rng(7);
  const int sizes[] = {1, 1, 1, 2, 4, 8, 16, 24, 32, 64};
  JobId next = 1;
  struct Live {
    JobId id;
    Placement p;
    JobShape s;
  };
  std::vector<Live> live;
  const NodeMask empty(n);
  NodeMask all(n);
  for (int i = 0; i < n; ++i) all.Insert(i);
  auto leaves_of = [&](const Placement& p) {
    std::set<int> l;
    for (const TaskPlacement& t : p.tasks) {
      l.insert(c.topology.AncestorAt(t.node, 1));
    }
    return l;
  };
  int preferred_seen = 0;
  for (int step = 0; step < 2000; ++step) {
    JobShape s = *ShapeFromTotalGpus(sizes[rng() % 10], 8);
    s.gpu_model = rng() % 4 == 0 ? kAnyGpuModel : static_cast<int>(rng() % 2);
    if (rng() % 5 == 0) s.cpus_milli_per_task = 8000;
    NodeMask image(n);
    for (int k = rng() % 12; k > 0; --k) image.Insert(rng() % n);
    auto base = FindPlacement(st, s, nullptr, nullptr, nullptr);
    auto p = FindPlacement(st, s, nullptr, &image, nullptr);
    auto again = FindPlacement(st, s, nullptr, &image, nullptr);
    auto with_empty = FindPlacement(st, s, nullptr, &empty, nullptr);
    auto with_all = FindPlacement(st, s, nullptr, &all, nullptr);
    ASSERT_EQ(base.has_value(), p.has_value()) << "step " << step;
    ASSERT_EQ(base.has_value(), with_empty.has_value());
    ASSERT_EQ(base.has_value(), with_all.has_value());
    if (base) {
      auto where = [](const Placement& x) {
        std::vector<std::pair<int, uint32_t>> w;
        for (const TaskPlacement& t : x.tasks)
          w.emplace_back(t.node, t.gpu_mask);
        return w;
      };
      EXPECT_EQ(base->preferred_tasks, 0);
      EXPECT_EQ(where(*with_empty), where(*base));
      EXPECT_EQ(with_empty->preferred_tasks, 0);
      EXPECT_EQ(where(*with_all), where(*base));
      EXPECT_EQ(with_all->preferred_tasks, s.tasks);
      EXPECT_EQ(where(*again), where(*p));  // deterministic
      EXPECT_EQ(p->gpu_model, base->gpu_model);
      EXPECT_EQ(p->switch_level, base->switch_level);
      EXPECT_EQ(p->switch_index, base->switch_index);
      EXPECT_EQ(p->nodes, base->nodes);
      EXPECT_EQ(p->leaves, base->leaves);
      int preferred = 0;
      for (const TaskPlacement& t : p->tasks)
        preferred += image.Contains(t.node);
      EXPECT_EQ(p->preferred_tasks, preferred);
      preferred_seen += preferred;
      if (base->nodes == 1 && s.tasks * s.gpus_per_task <= 8) {
        // One-node job: as tight a fit, and an idle node stays in its leaf.
        const int bn = base->tasks[0].node, pn = p->tasks[0].node;
        EXPECT_EQ(st.FreeGpus(pn), st.FreeGpus(bn)) << "step " << step;
        if (st.IsIdle(bn)) {
          EXPECT_EQ(c.topology.AncestorAt(pn, 1), c.topology.AncestorAt(bn, 1));
        }
      } else {
        EXPECT_EQ(leaves_of(*p), leaves_of(*base)) << "step " << step;
      }
    }
    // Advance the state: start the preferred placement or finish a job.
    if (p && (live.empty() || rng() % 3 != 0)) {
      st.Allocate(next, *p, s, absl::InfiniteFuture());
      live.push_back({next++, *p, s});
    } else if (!live.empty()) {
      size_t i = rng() % live.size();
      st.Release(live[i].id, live[i].p, live[i].s);
      live.erase(live.begin() + i);
    }
  }
  EXPECT_GT(preferred_seen, 0);
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

namespace loom {
namespace {

// A node whose GPUs hang off PCIe switches in pairs (`gpu.domain: 2`): a
// task of 2 GPUs takes both of one switch, best fit, and a 1-GPU task the
// switch whose other GPU is taken.
TEST(Placement, TasksStayUnderOnePcieSwitch) {
  Cluster c = testing::MakeCluster({{1, 1}}, 4, 4);
  c.pools[0].gpu_domain = 2;
  ClusterState state(c, false);
  JobShape one;
  one.gpus_per_task = 1;
  std::optional<Placement> p =
      FindPlacement(state, one, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].gpu_mask, 0x1u);
  state.Allocate(1, *p, one, absl::InfiniteFuture());
  JobShape two;
  two.gpus_per_task = 2;
  p = FindPlacement(state, two, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].gpu_mask, 0xCu) << "GPUs 2 and 3, not 1 and 2";
  state.Allocate(2, *p, two, absl::InfiniteFuture());
  p = FindPlacement(state, one, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].gpu_mask, 0x2u) << "GPU 1, beside GPU 0";
  JobShape four;
  four.gpus_per_task = 4;
  p = FindPlacement(state, four, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].gpu_mask, 0xF0u) << "two whole switches, not GPU 1";
  p = FindPlacement(state, one, nullptr, nullptr, nullptr);
  state.Allocate(3, *p, one, absl::InfiniteFuture());
  p = FindPlacement(state, four, nullptr, nullptr, nullptr);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tasks[0].gpu_mask, 0xF0u);
  EXPECT_TRUE(state.CheckInvariants().ok());
}

}  // namespace
}  // namespace loom
