#include "loom/sched/cluster_state.h"

#include <random>

#include "gtest/gtest.h"
#include "loom/sched/placement.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

TEST(ClusterState, StartsEmptyAndIndexed) {
  Cluster c = MakeCluster({{6, 0}, {2, 1}}, 4, 8);
  ClusterState st(c, true);
  EXPECT_EQ(st.TotalFreeGpus(), 64);
  EXPECT_EQ(st.ModelFreeGpus(0), 48);
  EXPECT_EQ(st.ModelFreeGpus(1), 16);
  const int root = c.topology.root();
  EXPECT_EQ(st.IdleNodes(root, 0), 6);
  EXPECT_EQ(st.Slots(root, 0, 8), 6);
  EXPECT_EQ(st.Slots(root, 0, 3), 12);  // two 3-GPU tasks per node
  EXPECT_TRUE(st.CheckInvariants().ok());
}

TEST(ClusterState, AllocateReleaseKeepsIndexes) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, true);
  Placement p;
  p.gpu_model = 0;
  p.tasks = {{0, 0b111}, {1, 0xff}};
  JobShape shape;
  st.Allocate(7, p, shape, T(100));
  EXPECT_EQ(st.FreeGpus(0), 5);
  EXPECT_EQ(st.FreeGpus(1), 0);
  EXPECT_EQ(st.TotalFreeGpus(), 32 - 11);
  EXPECT_EQ(st.PartialCount(0, 5), 1);
  EXPECT_EQ(st.IdleNodes(c.topology.root(), 0), 2);
  EXPECT_TRUE(st.CheckInvariants().ok());
  // Node 1 frees up entirely at t=100.
  auto& idx = st.ReadyIndex(0, 8);
  int seen = 0;
  for (const ReadyKey& k : idx) {
    if (k.node == 1) {
      EXPECT_EQ(k.ready, T(100));
      ++seen;
    }
  }
  EXPECT_EQ(seen, 1);
  st.Release(7, p, shape);
  EXPECT_EQ(st.TotalFreeGpus(), 32);
  EXPECT_TRUE(st.CheckInvariants().ok());
}

TEST(ClusterState, CordonRemovesNodeFromIndexes) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  ClusterState st(c, true);
  st.SetSchedulable(2, false);
  EXPECT_EQ(st.TotalFreeGpus(), 24);
  EXPECT_EQ(st.IdleNodes(c.topology.root(), 0), 3);
  EXPECT_TRUE(st.CheckInvariants().ok());
  st.SetSchedulable(2, true);
  EXPECT_EQ(st.TotalFreeGpus(), 32);
  EXPECT_TRUE(st.CheckInvariants().ok());
}

// Random placements and releases, with the indexes checked against a full
// recount after every step: no GPU is ever given twice and capacity is never
// exceeded.
TEST(ClusterState, RandomWorkloadKeepsInvariants) {
  Cluster c = MakeCluster({{24, 0}, {8, 1}}, 4, 4);
  ClusterState st(c, true);
  std::mt19937 rng(42);
  struct Live {
    JobId id;
    Placement p;
    JobShape s;
  };
  std::vector<Live> live;
  JobId next = 1;
  const int sizes[] = {1, 1, 1, 2, 4, 8, 16, 24, 32, 64};
  for (int step = 0; step < 3000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      int total = sizes[rng() % 10];
      JobShape s = *ShapeFromTotalGpus(total, 8);
      s.gpu_model = rng() % 4 == 0 ? kAnyGpuModel : static_cast<int>(rng() % 2);
      if (rng() % 5 == 0) s.cpus_milli_per_task = 8000;
      std::optional<Placement> p =
          FindPlacement(st, s, nullptr, nullptr, nullptr);
      if (p) {
        ASSERT_EQ(static_cast<int>(p->tasks.size()), s.tasks);
        st.Allocate(next, *p, s, T(step + rng() % 1000));
        live.push_back({next++, *p, s});
      }
    } else {
      size_t i = rng() % live.size();
      st.Release(live[i].id, live[i].p, live[i].s);
      live.erase(live.begin() + i);
    }
    if (step % 7 == 0) {
      int node = rng() % c.nodes.size();
      st.SetSchedulable(node, !st.Schedulable(node));
    }
    ASSERT_TRUE(st.CheckInvariants().ok())
        << "step " << step << ": " << st.CheckInvariants();
  }
}

}  // namespace
}  // namespace loom
