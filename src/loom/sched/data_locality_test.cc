// Data locality: placement follows the datasets (`JobRequest::datasets`,
// `Scheduler::SetNodeDatasets`) and a reserved gang's nodes are told to
// prefetch them (`PassResult::prefetch`).

#include <random>
#include <set>

#include "gtest/gtest.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

std::unique_ptr<Scheduler> MakeWithData(const Cluster& c,
                                        const std::string& policy,
                                        SchedulerOptions options = {}) {
  return std::make_unique<Scheduler>(
      c, *MakeQueuePolicy(policy, PolicyOptions{}), options);
}

std::set<int> DataNodesOf(const Placement& p) {
  std::set<int> nodes;
  for (const TaskPlacement& t : p.tasks) nodes.insert(t.node);
  return nodes;
}

TEST(DataLocality, TieGoesToTheDataThenTheImage) {
  // One leaf of 4 idle nodes: any of them is an equally good fit.
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  auto s = MakeWithData(c, "fair");
  s->SetNodeImages(1, {"sha256:img"});
  s->SetNodeDatasets(2, {"imagenet@3"});
  s->SetNodeDatasets(3, {"imagenet@2"});  // another version: no help
  JobRequest j = MakeJob(1, 1, 8, T(0));
  j.image = "sha256:img";
  j.datasets = {"imagenet@3"};
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(0)).started, std::vector<JobId>{1});
  // The data node wins over the image node.
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 2);
  EXPECT_EQ(s->Find(1)->placement.data_tasks, 1);
  EXPECT_EQ(s->Find(1)->placement.preferred_tasks, 0);
  // Without its data anywhere, the image decides.
  JobRequest k = MakeJob(2, 1, 8, T(1));
  k.image = "sha256:img";
  k.datasets = {"laion@1"};
  ASSERT_TRUE(s->Submit(k, T(1)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started, std::vector<JobId>{2});
  EXPECT_EQ(s->Find(2)->placement.tasks[0].node, 1);
  EXPECT_EQ(s->Find(2)->placement.data_tasks, 0);
  // A node with both beats a node with the data alone.
  ASSERT_TRUE(s->Finish(1, T(2)).ok());
  ASSERT_TRUE(s->Finish(2, T(2)).ok());
  s->SetNodeDatasets(0, {"imagenet@3"});
  s->SetNodeImages(0, {"sha256:img"});
  JobRequest m = MakeJob(3, 1, 8, T(3));
  m.image = "sha256:img";
  m.datasets = {"imagenet@3"};
  ASSERT_TRUE(s->Submit(m, T(3)).ok());
  ASSERT_EQ(s->Schedule(T(3)).started, std::vector<JobId>{3});
  EXPECT_EQ(s->Find(3)->placement.tasks[0].node, 0);
  EXPECT_EQ(s->Find(3)->placement.data_tasks, 1);
  EXPECT_EQ(s->Find(3)->placement.preferred_tasks, 1);
}

TEST(DataLocality, NeverAWorseFit) {
  // Node 0 partly used (4 free), node 1 idle and holding the data: a 4-GPU
  // job takes node 0 (best fit), not the data node.
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = MakeWithData(c, "fair");
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 4, T(0)), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_EQ(s->Find(1)->placement.tasks[0].node, 0);
  s->SetNodeDatasets(1, {"d@1"});
  JobRequest j = MakeJob(2, 1, 4, T(1));
  j.datasets = {"d@1"};
  ASSERT_TRUE(s->Submit(j, T(1)).ok());
  s->Schedule(T(1));
  EXPECT_EQ(s->Find(2)->placement.tasks[0].node, 0);
  EXPECT_EQ(s->Find(2)->placement.data_tasks, 0);
}

TEST(DataLocality, SeveralDatasetsNeedANodeWithAll) {
  Cluster c = MakeCluster({{3, 0}}, 3, 8);
  auto s = MakeWithData(c, "fair");
  s->SetNodeDatasets(0, {"a@1"});
  s->SetNodeDatasets(1, {"b@1"});
  s->SetNodeDatasets(2, {"b@1", "a@1", ""});
  NodeMask scratch;
  const NodeMask* both = s->NodesWithDatasets({"a@1", "b@1"}, &scratch);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->Count(), 1);
  EXPECT_TRUE(both->Contains(2));
  EXPECT_EQ(s->NodesWithDatasets({"a@1", "c@1"}, &scratch), nullptr);
  EXPECT_EQ(s->NodesWithDatasets({}, &scratch), nullptr);
  JobRequest j = MakeJob(1, 1, 8, T(0));
  j.datasets = {"a@1", "b@1"};
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  s->Schedule(T(0));
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 2);
  // Clearing node 2's cache leaves no node with both.
  s->SetNodeDatasets(2, {});
  EXPECT_EQ(s->NodesWithDatasets({"a@1", "b@1"}, &scratch), nullptr);
}

TEST(DataLocality, LocalityOffIgnoresTheData) {
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  SchedulerOptions options;
  options.data_locality = false;
  auto s = MakeWithData(c, "fair", options);
  s->SetNodeDatasets(2, {"d@1"});
  JobRequest j = MakeJob(1, 1, 8, T(0));
  j.datasets = {"d@1"};
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  s->Schedule(T(0));
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 0);
  EXPECT_EQ(s->Find(1)->placement.data_tasks, 0);
}

// Random clusters and data: a placement with a data preference uses the
// same model, switch, leaves and node count as without one, and the same
// GPUs per node.
TEST(DataLocality, NeverChangesFitOrTopology) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    Cluster c = MakeCluster({{16, 0}}, 4, 2);
    ClusterState st(c, false);
    // Random load: some nodes partly or fully used.
    JobId id = 1;
    for (int n = 0; n < 16; ++n) {
      const int used = std::uniform_int_distribution<int>(0, 8)(rng);
      if (used == 0) continue;
      Placement p;
      p.gpu_model = 0;
      p.tasks.push_back({n, (1u << used) - 1});
      JobShape shape;
      shape.gpus_per_task = used;
      st.Allocate(id++, p, shape, absl::InfiniteFuture());
    }
    NodeMask data(16), image(16);
    for (int n = 0; n < 16; ++n) {
      if (rng() % 3 == 0) data.Insert(n);
      if (rng() % 3 == 0) image.Insert(n);
    }
    JobShape s;
    const int kind = round % 3;
    s.tasks = kind == 0 ? 1 : (kind == 1 ? 2 : 3);
    s.gpus_per_task = kind == 0 ? 1 + rng() % 8 : 8;
    s.gpu_model = 0;
    auto base = FindPlacement(st, s, nullptr, nullptr, nullptr);
    auto p =
        FindPlacement(st, s, nullptr, NodePreference{&data, &image}, nullptr);
    ASSERT_EQ(base.has_value(), p.has_value()) << "round " << round;
    if (!base) continue;
    EXPECT_EQ(p->gpu_model, base->gpu_model);
    EXPECT_EQ(p->switch_level, base->switch_level) << "round " << round;
    EXPECT_EQ(p->nodes, base->nodes);
    EXPECT_EQ(p->leaves, base->leaves);
    if (p->switch_level >= 1) {
      EXPECT_EQ(p->switch_index, base->switch_index) << "round " << round;
    }
    // The same free-GPU count on each chosen node (equally good nodes).
    std::multiset<int> base_free, free;
    for (int n : DataNodesOf(*base)) base_free.insert(st.FreeGpus(n));
    for (int n : DataNodesOf(*p)) free.insert(st.FreeGpus(n));
    EXPECT_EQ(free, base_free) << "round " << round;
    int on_data = 0;
    for (const TaskPlacement& t : p->tasks) on_data += data.Contains(t.node);
    EXPECT_EQ(p->data_tasks, on_data);
  }
}

// A gang that cannot start gets a reservation; the reserved nodes that lack
// its dataset are reported once for prefetch.
TEST(DataLocality, PrefetchForAReservedGang) {
  // 4 nodes in one leaf. Job 1 holds 2 nodes until t=100 (its limit).
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  auto s = MakeWithData(c, "backfill");
  JobRequest hold = MakeJob(1, 2, 8, T(0));
  hold.time_limit = absl::Seconds(100);
  ASSERT_TRUE(s->Submit(hold, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(0)).started, std::vector<JobId>{1});
  const std::set<int> held = DataNodesOf(s->Find(1)->placement);
  // The gang needs all 4 nodes; two of them already hold its data.
  s->SetNodeDatasets(*held.begin(), {"corpus@7"});
  int free_node = -1;
  for (int n = 0; n < 4; ++n) {
    if (!held.contains(n)) free_node = n;
  }
  s->SetNodeDatasets(free_node, {"corpus@7", "other@1"});
  JobRequest gang = MakeJob(2, 4, 8, T(1));
  gang.datasets = {"corpus@7"};
  ASSERT_TRUE(s->Submit(gang, T(1)).ok());
  PassResult r = s->Schedule(T(1));
  EXPECT_TRUE(r.started.empty());
  ASSERT_EQ(r.prefetch.size(), 1u);
  EXPECT_EQ(r.prefetch[0].job, 2);
  EXPECT_EQ(r.prefetch[0].datasets, std::vector<std::string>{"corpus@7"});
  std::vector<int> lacking;
  for (int n = 0; n < 4; ++n) {
    if (n != *held.begin() && n != free_node) lacking.push_back(n);
  }
  EXPECT_EQ(r.prefetch[0].nodes, lacking);
  // The next pass keeps the same reservation: nothing new to report, even
  // before the fills are done.
  r = s->Schedule(T(2));
  EXPECT_TRUE(r.prefetch.empty());
  // Fills done: the gang starts when job 1 ends, on nodes that all hold
  // its data; nothing more is reported.
  for (int n : lacking) s->SetNodeDatasets(n, {"corpus@7"});
  ASSERT_TRUE(s->Finish(1, T(50)).ok());
  r = s->Schedule(T(50));
  EXPECT_EQ(r.started, std::vector<JobId>{2});
  EXPECT_TRUE(r.prefetch.empty());
  EXPECT_EQ(s->Find(2)->placement.data_tasks, 4);
}

TEST(DataLocality, PrefetchReportedAgainForANewReservation) {
  // One leaf of 4 nodes: jobs 1, 2 and 3 hold nodes 0, 1 and 2 until t=100,
  // 200 and 300; node 3 is idle. A 3-node gang reserves the nodes that free
  // up first: 3, 0 and 1.
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  auto s = MakeWithData(c, "backfill");
  for (JobId id = 1; id <= 3; ++id) {
    JobRequest j = MakeJob(id, 1, 8, T(0));
    j.time_limit = absl::Seconds(100 * id);
    ASSERT_TRUE(s->Submit(j, T(0)).ok());
  }
  ASSERT_EQ(s->Schedule(T(0)).started.size(), 3u);
  ASSERT_EQ(s->Find(3)->placement.tasks[0].node, 2);
  s->SetNodeDatasets(0, {"d@1"});
  JobRequest gang = MakeJob(4, 3, 8, T(1));
  gang.datasets = {"d@1"};
  ASSERT_TRUE(s->Submit(gang, T(1)).ok());
  PassResult r = s->Schedule(T(1));
  ASSERT_EQ(r.prefetch.size(), 1u);
  EXPECT_EQ(r.prefetch[0].nodes, (std::vector<int>{1, 3}));
  EXPECT_TRUE(s->Schedule(T(2)).prefetch.empty());
  // Job 3 ends early: node 2 is free now, and the reservation becomes
  // {0, 2, 3}; the nodes lacking the data are reported again.
  ASSERT_TRUE(s->Finish(3, T(3)).ok());
  r = s->Schedule(T(3));
  EXPECT_TRUE(r.started.empty());
  ASSERT_EQ(r.prefetch.size(), 1u);
  EXPECT_EQ(r.prefetch[0].nodes, (std::vector<int>{2, 3}));
  EXPECT_TRUE(s->Schedule(T(4)).prefetch.empty());
  // Cancelled, the job is forgotten: no more reports.
  ASSERT_TRUE(s->Cancel(4, T(5)).ok());
  EXPECT_TRUE(s->Schedule(T(5)).prefetch.empty());
}

}  // namespace
}  // namespace loom
