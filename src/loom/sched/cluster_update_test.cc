// Scheduler::PreviewCluster / UpdateCluster: the cluster changes under live
// jobs, and the scheduler's indexes stay right after each kind of change.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeJob;
using testing::T;

struct PoolDef {
  std::string name;
  int nodes = 1;
  std::string model = "h200";
  int gpus = 8;
  std::map<std::string, std::string> labels = {};
};

// A cluster of `pools` (nodes named <pool>-<i>) on a uniform tree, with
// extra GPU models after the built-ins.
Cluster Build(const std::vector<PoolDef>& pools, int nodes_per_leaf = 2,
              const std::vector<std::string>& extra_models = {}) {
  Cluster c;
  c.name = "test";
  c.gpu_models = DefaultGpuModels();
  for (const std::string& m : extra_models) {
    c.gpu_models.push_back({m, 0.5, int64_t{48} << 30});
  }
  c.priority_classes = DefaultPriorityClasses();
  for (const PoolDef& def : pools) {
    PoolSpec pool;
    pool.name = def.name;
    pool.node_count = def.nodes;
    pool.gpu_model = c.FindGpuModel(def.model);
    pool.gpus_per_node = def.gpus;
    pool.cpus_milli = 64000;
    pool.memory_bytes = int64_t{512} << 30;
    pool.labels = def.labels;
    c.pools.push_back(pool);
    for (int i = 0; i < def.nodes; ++i) {
      NodeSpec n;
      n.name = def.name + "-" + std::to_string(i);
      n.pool = static_cast<int>(c.pools.size()) - 1;
      n.gpu_model = pool.gpu_model;
      n.gpus = def.gpus;
      n.cpus_milli = pool.cpus_milli;
      n.memory_bytes = pool.memory_bytes;
      n.labels = def.labels;
      c.nodes.push_back(n);
    }
  }
  c.topology =
      *Topology::Uniform(static_cast<int>(c.nodes.size()), nodes_per_leaf, 8);
  return c;
}

std::unique_ptr<Scheduler> Make(const Cluster& c, const std::string& policy) {
  return std::make_unique<Scheduler>(
      c, *MakeQueuePolicy(policy, PolicyOptions{}), SchedulerOptions{});
}

// The names of the nodes job `id` runs on, in task order.
std::vector<std::string> NodesOf(const Scheduler& s, JobId id) {
  std::vector<std::string> out;
  const SchedJob* job = s.Find(id);
  if (job == nullptr) return out;
  for (const TaskPlacement& t : job->placement.tasks) {
    out.push_back(s.cluster().nodes[t.node].name);
  }
  return out;
}

class ClusterUpdateTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ClusterUpdateTest, AddedPoolTakesWork) {
  auto s = Make(Build({{"h200", 2}}), GetParam());
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8), T(2)).ok());
  EXPECT_TRUE(s->Schedule(T(3)).started.empty());

  auto change = s->UpdateCluster(Build({{"h200", 2}, {"extra", 2}}), T(4));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_TRUE(change->blocked.empty());
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  EXPECT_EQ(s->state().num_nodes(), 4);
  EXPECT_EQ(NodesOf(*s, 1), (std::vector<std::string>{"h200-0", "h200-1"}));
  EXPECT_EQ(s->running_count(), 1);
  EXPECT_EQ(s->pending_count(), 1);

  PassResult r = s->Schedule(T(5));
  ASSERT_EQ(r.started, std::vector<JobId>{2});
  EXPECT_EQ(NodesOf(*s, 2)[0].rfind("extra-", 0), 0u) << NodesOf(*s, 2)[0];
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 8);
  ASSERT_TRUE(s->Finish(1, T(10)).ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 24);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST_P(ClusterUpdateTest, BusyNodeCannotBeRemovedIdleOneCan) {
  auto s = Make(Build({{"h200", 3}}), GetParam());
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  ASSERT_EQ(NodesOf(*s, 1), (std::vector<std::string>{"h200-0", "h200-1"}));

  // h200-1 holds job 1: refused, nothing changes.
  const Cluster one = Build({{"h200", 1}});
  Scheduler::ClusterChange preview = s->PreviewCluster(one);
  ASSERT_EQ(preview.blocked.size(), 1u);
  EXPECT_EQ(preview.blocked[0].job, 1);
  EXPECT_EQ(preview.blocked[0].node, "h200-1");
  EXPECT_EQ(preview.blocked[0].why, "node h200-1 is removed");
  auto refused = s->UpdateCluster(one, T(2));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("h200-1 is removed"),
            std::string::npos)
      << refused.status();
  EXPECT_EQ(s->state().num_nodes(), 3);
  EXPECT_EQ(s->running_count(), 1);
  EXPECT_TRUE(s->state().CheckInvariants().ok());

  // h200-2 is idle: it goes.
  auto change = s->UpdateCluster(Build({{"h200", 2}}), T(3));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(s->state().num_nodes(), 2);
  EXPECT_EQ(s->state().TotalFreeGpus(), 0);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  ASSERT_TRUE(s->Requeue(1, T(4)).ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 16);
  EXPECT_EQ(s->Schedule(T(5)).started, std::vector<JobId>{1});
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST_P(ClusterUpdateTest, RelabelledNodesKeepJobsAndCordons) {
  auto s = Make(Build({{"h200", 4}}), GetParam());
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 4), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  const std::vector<std::string> before = NodesOf(*s, 1);
  s->SetNodeSchedulable(3, false);
  s->SetNodeImages(2, {"sha256:aa"});

  auto change =
      s->UpdateCluster(Build({{"h200", 4, "h200", 8, {{"rack", "b"}}}}), T(2));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(s->cluster().nodes[0].labels.at("rack"), "b");
  EXPECT_EQ(NodesOf(*s, 1), before);
  EXPECT_FALSE(s->state().Schedulable(3));
  EXPECT_TRUE(s->state().Schedulable(2));
  ASSERT_NE(s->NodesWithImage("sha256:aa"), nullptr);
  EXPECT_TRUE(s->NodesWithImage("sha256:aa")->Contains(2));
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST_P(ClusterUpdateTest, NodeMovedBetweenPoolsAndLeaves) {
  // Same names, another order: "b-0" moves ahead of the "a" pool and the
  // tree regroups (one leaf per node, then all under one leaf).
  Cluster first = Build({{"a", 2}, {"b", 2}}, 1);
  auto s = Make(first, GetParam());
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  const std::vector<std::string> before = NodesOf(*s, 1);
  ASSERT_EQ(s->Find(1)->placement.switch_level, 2);

  Cluster next = Build({{"b", 2}, {"a", 2}}, 4);
  auto change = s->UpdateCluster(next, T(2));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(NodesOf(*s, 1), before);
  EXPECT_EQ(s->Find(1)->placement.switch_level, 1);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  // The GPUs it holds are the same nodes' under their new ids.
  for (const TaskPlacement& t : s->Find(1)->placement.tasks) {
    EXPECT_EQ(s->state().FreeGpus(t.node), 0);
  }
  EXPECT_EQ(s->state().TotalFreeGpus(), 16);
}

TEST_P(ClusterUpdateTest, PendingJobParkedWhileInfeasible) {
  auto s = Make(Build({{"h200", 4}}), GetParam());
  for (int n = 0; n < 4; ++n) s->SetNodeSchedulable(n, false);
  ASSERT_TRUE(s->Submit(MakeJob(1, 4, 8), T(0)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8), T(0)).ok());
  s->Schedule(T(1));

  auto change = s->UpdateCluster(Build({{"h200", 2}}), T(2));
  ASSERT_TRUE(change.ok()) << change.status();
  ASSERT_EQ(change->infeasible.size(), 1u);
  EXPECT_EQ(change->infeasible[0].job, 1);
  EXPECT_FALSE(change->infeasible[0].why.empty());
  EXPECT_EQ(s->pending_count(), 2);
  EXPECT_EQ(s->ReasonFor(*s->Find(1)).code, PendingReason::Code::kInfeasible);
  EXPECT_NE(s->ExplainPending(1, T(2)).find("cannot run on the cluster"),
            std::string::npos)
      << s->ExplainPending(1, T(2));
  s->SetNodeSchedulable(0, true);
  s->SetNodeSchedulable(1, true);
  // Job 1 is out of the queue: even strict FIFO lets job 2 by.
  EXPECT_EQ(s->Schedule(T(3)).started, std::vector<JobId>{2});
  ASSERT_TRUE(s->Finish(2, T(4)).ok());

  // Back to four nodes: it runs again.
  EXPECT_EQ(s->PreviewCluster(Build({{"h200", 4}})).feasible,
            std::vector<JobId>{1});
  change = s->UpdateCluster(Build({{"h200", 4}}), T(5));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(change->feasible, std::vector<JobId>{1});
  EXPECT_EQ(s->Schedule(T(6)).started, std::vector<JobId>{1});
  EXPECT_TRUE(s->state().CheckInvariants().ok());

  // A parked job can be cancelled.
  ASSERT_TRUE(s->Submit(MakeJob(3, 4, 8), T(7)).ok());
  ASSERT_TRUE(s->Finish(1, T(8)).ok());
  for (int n = 0; n < 4; ++n) s->SetNodeSchedulable(n, false);
  ASSERT_TRUE(s->UpdateCluster(Build({{"h200", 1}}), T(9)).ok());
  EXPECT_FALSE(s->Find(3)->infeasible.empty());
  EXPECT_TRUE(s->Cancel(3, T(10)).ok());
  EXPECT_EQ(s->pending_count(), 0);
}

TEST_P(ClusterUpdateTest, GpuModelIdsFollowNames) {
  Cluster first = Build({{"h200", 1}, {"l", 2, "l40s"}}, 2, {"l40s"});
  auto s = Make(first, GetParam());
  const GpuModelId l40s = first.FindGpuModel("l40s");
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8, T(0), l40s), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8, T(2), l40s), T(2)).ok());
  s->Schedule(T(3));

  // "l4" comes before "l40s": its id moves up by one.
  Cluster next = Build({{"h200", 1}, {"l", 2, "l40s"}}, 2, {"l4", "l40s"});
  const GpuModelId moved = next.FindGpuModel("l40s");
  ASSERT_NE(moved, l40s);
  auto change = s->UpdateCluster(next, T(4));
  ASSERT_TRUE(change.ok()) << change.status();
  EXPECT_EQ(s->Find(1)->request.shape.gpu_model, moved);
  EXPECT_EQ(s->Find(1)->placement.gpu_model, moved);
  EXPECT_EQ(s->Find(2)->request.shape.gpu_model, moved);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  ASSERT_TRUE(s->Finish(1, T(5)).ok());
  EXPECT_EQ(s->Schedule(T(6)).started, std::vector<JobId>{2});
  EXPECT_EQ(NodesOf(*s, 2)[0].rfind("l-", 0), 0u);

  // A model a live job asks for may not go.
  auto refused = s->UpdateCluster(Build({{"h200", 1}}), T(7));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("l40s"), std::string::npos);
  EXPECT_EQ(s->state().num_nodes(), 3);
}

TEST_P(ClusterUpdateTest, ShrunkNodeBlocksTheJobOnIt) {
  auto s = Make(Build({{"h200", 1}}), GetParam());
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  Scheduler::ClusterChange p =
      s->PreviewCluster(Build({{"h200", 1, "h200", 4}}));
  ASSERT_EQ(p.blocked.size(), 1u);
  EXPECT_EQ(p.blocked[0].why, "node h200-0 has 4 GPUs; the job holds GPU 7");
  p = s->PreviewCluster(Build({{"h200", 1, "a100"}}));
  ASSERT_EQ(p.blocked.size(), 1u);
  EXPECT_EQ(p.blocked[0].why, "node h200-0 changes GPU model h200 -> a100");
}

TEST_P(ClusterUpdateTest, QuotasAndWeightsFollowTheSpec) {
  Cluster first = Build({{"h200", 2}});
  first.projects = {{"search", 8, 2.0, {}}, {"old", 4, 1.0, {}}};
  auto s = Make(first, GetParam());
  JobRequest j = MakeJob(1, 1, 8);
  j.project = "search";
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(0)).started.size(), 1u);

  Cluster next = first;
  next.projects = {{"search", 16, 3.0, {}}, {"new", 8, 1.0, {}}};
  ASSERT_TRUE(s->UpdateCluster(next, T(10)).ok());
  for (const ProjectUsage& u : s->Usage(T(10))) {
    if (u.name == "search") {
      EXPECT_EQ(u.quota_gpus, 16);
      EXPECT_EQ(u.weight, 3.0);
      EXPECT_NEAR(u.gpu_seconds, 80.0, 1e-6);
      EXPECT_EQ(u.running_gpus, 8);
    } else if (u.name == "old") {
      EXPECT_EQ(u.quota_gpus, 0);
      EXPECT_EQ(u.weight, 1.0);
    } else {
      EXPECT_EQ(u.name, "new");
      EXPECT_EQ(u.quota_gpus, 8);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, ClusterUpdateTest,
                         ::testing::Values("fifo", "backfill", "las", "fair"));

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// A revision that makes a GPU MIG under a job holding it whole is refused;
// a slice job keeps its instance across a revision that keeps the layout.
TEST(ClusterUpdateMig, AGpuBecomesMigOnlyWhenNoWholeJobHoldsIt) {
  Cluster c = Build({{"h200", 1}});
  c.pools[0].gpu_memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
  auto s = Make(c, "fifo");
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 2), T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);  // GPUs 0 and 1
  Cluster mig = c;
  mig.pools[0].mig.gpus = 1;
  for (int i = 0; i < 7; ++i) mig.pools[0].mig.layout.push_back({0, i});
  auto refused = s->UpdateCluster(mig, T(2));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find(
                "GPU 0 of node h200-0 becomes a MIG GPU"),
            std::string::npos)
      << refused.status();
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  ASSERT_TRUE(s->Finish(1, T(3)).ok());
  ASSERT_TRUE(s->UpdateCluster(mig, T(4)).ok());
  JobRequest slice = MakeJob(2, 1, 1);
  slice.shape.slice.mig = "1g.18gb";
  ASSERT_TRUE(s->Submit(slice, T(4)).ok());
  ASSERT_EQ(s->Schedule(T(5)).started.size(), 1u);
  // The same layout again (another label): the slice stays where it is.
  Cluster relabelled = mig;
  relabelled.pools[0].labels["rack"] = "b";
  relabelled.nodes[0].labels["rack"] = "b";
  ASSERT_TRUE(s->UpdateCluster(relabelled, T(6)).ok());
  EXPECT_EQ(s->state().Part(0, 0).tasks, 1);
  EXPECT_TRUE(s->state().CheckInvariants().ok())
      << s->state().CheckInvariants();
}

}  // namespace
}  // namespace loom
