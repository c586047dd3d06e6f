// RDMA NICs as a resource (docs/scheduling.md "NICs"): a job of several
// nodes avoids nodes without usable NICs and says so; `nics_per_task`
// counts against a node's NICs.

#include "gtest/gtest.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

std::unique_ptr<Scheduler> MakeFifo(const Cluster& c) {
  return std::make_unique<Scheduler>(
      c, *MakeQueuePolicy("fifo", PolicyOptions{}), SchedulerOptions{});
}

TEST(Nics, AGangOfSeveralNodesAvoidsNodesWithoutNics) {
  Cluster c = MakeCluster({{3, 0}}, 4, 4);
  auto s = MakeFifo(c);
  s->SetNodeNics(0, 0);  // its agent found no usable NIC
  s->SetNodeNics(1, 8);
  // Two whole nodes: only 1 and 2 may take them.
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8), T(0)).ok());
  s->Schedule(T(1));
  ASSERT_EQ(s->Find(1)->phase, JobPhase::kRunning);
  for (const TaskPlacement& t : s->Find(1)->placement.tasks) {
    EXPECT_NE(t.node, 0);
  }
  // One node's job does not need NICs: node 0 takes it.
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8), T(1)).ok());
  s->Schedule(T(2));
  ASSERT_EQ(s->Find(2)->phase, JobPhase::kRunning);
  EXPECT_EQ(s->Find(2)->placement.tasks[0].node, 0);
  ASSERT_TRUE(s->Finish(1, T(3)).ok());
  ASSERT_TRUE(s->Finish(2, T(3)).ok());
  // Three nodes: it waits, and says why.
  ASSERT_TRUE(s->Submit(MakeJob(3, 3, 8), T(3)).ok());
  s->Schedule(T(4));
  EXPECT_EQ(s->Find(3)->phase, JobPhase::kPending);
  const std::string why = s->ExplainPending(3, T(4));
  EXPECT_NE(why.find("1 node has no usable RDMA NIC"), std::string::npos)
      << why;
  // NICs come back (a new agent report): it runs.
  s->SetNodeNics(0, 8);
  s->Schedule(T(5));
  EXPECT_EQ(s->Find(3)->phase, JobPhase::kRunning);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST(Nics, NicsPerTaskCountAgainstTheNode) {
  Cluster c = MakeCluster({{1, 0}}, 4, 4);
  c.nodes[0].nics = 4;
  auto s = MakeFifo(c);
  JobRequest a = MakeJob(1, 1, 2);
  a.shape.nics_per_task = 3;
  JobRequest b = MakeJob(2, 1, 2);
  b.shape.nics_per_task = 2;
  ASSERT_TRUE(s->Submit(a, T(0)).ok());
  ASSERT_TRUE(s->Submit(b, T(0)).ok());
  s->Schedule(T(1));
  EXPECT_EQ(s->Find(1)->phase, JobPhase::kRunning);
  EXPECT_EQ(s->Find(2)->phase, JobPhase::kPending) << "only 1 NIC left";
  EXPECT_EQ(s->state().FreeNics(0), 1);
  ASSERT_TRUE(s->Finish(1, T(2)).ok());
  s->Schedule(T(3));
  EXPECT_EQ(s->Find(2)->phase, JobPhase::kRunning);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  // More NICs per task than any node declares: infeasible at submit.
  JobRequest big = MakeJob(3, 1, 1);
  big.shape.nics_per_task = 5;
  auto out = s->Submit(big, T(3));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible);
}

}  // namespace
}  // namespace loom
