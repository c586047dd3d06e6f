// Hot spares: reservation near the placement, lending to preemptible work,
// recovery of a job that lost nodes on its spares, fallbacks and release.

#include <algorithm>
#include <memory>
#include <random>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace spares_test {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

std::unique_ptr<Scheduler> Make(const Cluster& c,
                                const std::string& policy = "fair") {
  return std::make_unique<Scheduler>(c, *MakeQueuePolicy(policy, {}),
                                     SchedulerOptions{});
}

JobRequest Gang(JobId id, int nodes, int spares, double submit = 0) {
  JobRequest j = MakeJob(id, nodes, 8, T(submit));
  j.spares = spares;
  return j;
}

JobRequest Spot(JobId id, int tasks, int gpus, double submit = 0) {
  JobRequest j = MakeJob(id, tasks, gpus, T(submit));
  j.preemptible = true;
  return j;
}

std::vector<int> Nodes(const Scheduler& s, JobId id) {
  std::vector<int> out;
  for (const TaskPlacement& t : s.Find(id)->placement.tasks) {
    out.push_back(t.node);
  }
  return out;
}

void ExpectConsistent(const Scheduler& s) {
  EXPECT_TRUE(s.state().CheckInvariants().ok()) << s.state().CheckInvariants();
  EXPECT_TRUE(s.CheckSpares().ok()) << s.CheckSpares();
}

// 16 nodes, 4 per leaf, 2 leaves per spine: leaves {0-3} {4-7} | {8-11}
// {12-15}.
Cluster Sixteen() { return MakeCluster({{16, 0}}, 4, 2); }

TEST(Spares, OnlyForJobsWhoseTasksTakeWholeNodes) {
  Cluster c = Sixteen();
  auto s = Make(c);
  JobRequest j = MakeJob(1, 4, 1);
  j.spares = 1;
  absl::StatusOr<SubmitOutcome> out = s->Submit(j, T(0));
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(out.status().message()), HasSubstr("whole nodes"));
  j.spares = 17;
  EXPECT_EQ(s->Submit(j, T(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(s->Submit(Gang(2, 2, 1), T(0)).ok());
}

TEST(Spares, ReservedNearThePlacementSameLeafFirst) {
  Cluster c = Sixteen();
  auto s = Make(c);
  // Node 0 runs a non-preemptible job: it cannot be a spare.
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_THAT(Nodes(*s, 1), ElementsAre(0));
  // A spot job on node 8 (the other spine) is no obstacle to a spare.
  ASSERT_TRUE(s->Submit(Gang(2, 3, 3), T(1)).ok());
  PassResult r = s->Schedule(T(1));
  ASSERT_THAT(r.started, ElementsAre(2));
  EXPECT_THAT(Nodes(*s, 2), ElementsAre(1, 2, 3));
  // Leaf 0 is full, so the same spine: leaf 1, by node id.
  EXPECT_THAT(s->Find(2)->spare_nodes, ElementsAre(4, 5, 6));
  EXPECT_EQ(s->SpareOwner(4), 2);
  EXPECT_EQ(s->SpareOwner(0), 0);
  // Spares are not the job's GPUs.
  EXPECT_EQ(s->Usage(T(1))[0].running_gpus, 8 + 24);
  ExpectConsistent(*s);

  // A gang in leaf 2 with a free node beside it takes that one first.
  ASSERT_TRUE(s->Submit(Gang(3, 3, 2), T(2)).ok());
  s->Schedule(T(2));
  const std::vector<int> nodes = Nodes(*s, 3);
  ASSERT_EQ(nodes.size(), 3u);
  for (int n : nodes) EXPECT_EQ(c.topology.leaf_of(n), c.topology.leaf_of(8));
  ASSERT_EQ(s->Find(3)->spare_nodes.size(), 2u);
  EXPECT_EQ(c.topology.leaf_of(s->Find(3)->spare_nodes[0]),
            c.topology.leaf_of(8));
  EXPECT_EQ(s->Find(3)->spare_nodes[1], 12);  // then the same spine
  ExpectConsistent(*s);
}

TEST(Spares, LentToPreemptibleJobsOnlyAndThePendingReasonSaysSo) {
  // One leaf of 4 nodes: the gang on 0-1, its spares 2-3.
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c);
  ASSERT_TRUE(s->Submit(Gang(12, 2, 2), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_THAT(s->Find(12)->spare_nodes, ElementsAre(2, 3));
  // A non-preemptible job does not go on the spares...
  ASSERT_TRUE(s->Submit(MakeJob(13, 1, 8, T(1)), T(1)).ok());
  PassResult r = s->Schedule(T(1));
  EXPECT_TRUE(r.started.empty());
  const std::string why = s->ExplainPending(13, T(1));
  EXPECT_THAT(why, HasSubstr("2 free nodes are hot spares of job 12")) << why;
  EXPECT_EQ(s->ReasonFor(*s->Find(13)).spare_nodes, 2);
  // ... nor does a small one, even by preemption.
  ASSERT_TRUE(s->Submit(MakeJob(14, 1, 1, T(1)), T(1)).ok());
  s->Schedule(T(1));
  EXPECT_EQ(s->Find(14)->phase, JobPhase::kPending);
  // A preemptible one does.
  ASSERT_TRUE(s->Submit(Spot(15, 1, 8, 2), T(2)).ok());
  r = s->Schedule(T(2));
  ASSERT_THAT(r.started, ElementsAre(15));
  EXPECT_EQ(s->SpareOwner(Nodes(*s, 15)[0]), 12);
  ExpectConsistent(*s);
  // With the gang gone its spares are free for everyone.
  ASSERT_TRUE(s->Finish(12, T(3)).ok());
  EXPECT_EQ(s->SpareOwner(2), 0);
  EXPECT_EQ(s->SpareOwner(3), 0);
  r = s->Schedule(T(3));
  EXPECT_EQ(s->Find(13)->phase, JobPhase::kRunning);
  EXPECT_EQ(s->Find(14)->phase, JobPhase::kRunning);
  ExpectConsistent(*s);
}

// Two leaves of 4 nodes under one spine. The gang runs on 0-2 with spare 3,
// where a spot job runs.
class Recovery : public ::testing::Test {
 protected:
  Recovery() : c_(MakeCluster({{8, 0}}, 4, 2)), s_(Make(c_)) {
    EXPECT_TRUE(s_->Submit(Gang(1, 3, 1), T(0)).ok());
    s_->Schedule(T(0));
    EXPECT_THAT(Nodes(*s_, 1), ElementsAre(0, 1, 2));
    EXPECT_THAT(s_->Find(1)->spare_nodes, ElementsAre(3));
    EXPECT_TRUE(s_->Submit(Spot(2, 1, 8, 1), T(1)).ok());
    s_->Schedule(T(1));
    EXPECT_THAT(Nodes(*s_, 2), ElementsAre(3));
  }

  Cluster c_;
  std::unique_ptr<Scheduler> s_;
};

TEST_F(Recovery, RequeueReplacesTheDownNodeByItsSpare) {
  s_->SetNodeSchedulable(1, false);  // node 1 is down
  ASSERT_TRUE(s_->Requeue(1, T(10)).ok());
  EXPECT_THAT(s_->ExplainPending(1, T(10)), HasSubstr("hot spares"));
  // Ahead of everything else: the spot job on the spare is stopped at once.
  ASSERT_TRUE(s_->Submit(MakeJob(3, 3, 8, T(10)), T(10)).ok());
  PassResult r = s_->Schedule(T(10));
  EXPECT_THAT(r.started, ElementsAre(3));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 2);
  EXPECT_EQ(r.preempted[0].for_job, 1);
  EXPECT_TRUE(r.preempted[0].immediate);
  EXPECT_EQ(s_->Find(2)->phase, JobPhase::kStopping);
  EXPECT_THAT(s_->ExplainPending(1, T(10)),
              HasSubstr("once 1 preempted job(s) there have stopped"));
  // The survivors are held for it: job 3 (3 nodes) went to leaf 1.
  EXPECT_THAT(Nodes(*s_, 3), ElementsAre(4, 5, 6));
  ExpectConsistent(*s_);
  // The caller stops the victim; the gang starts on 0, 3 (for 1), 2.
  ASSERT_TRUE(s_->Requeue(2, T(11)).ok());
  r = s_->Schedule(T(11));
  ASSERT_FALSE(r.started.empty());
  EXPECT_EQ(r.started[0], 1);
  EXPECT_THAT(Nodes(*s_, 1), ElementsAre(0, 3, 2));
  EXPECT_EQ(s_->Find(1)->placement.switch_level, 1);
  EXPECT_EQ(s_->Find(1)->placement.nodes, 3);
  EXPECT_EQ(s_->Find(1)->placement.leaves, 1);
  EXPECT_EQ(s_->Find(1)->runs, 2);
  // Its spare went into the placement; it tops up from what is left.
  EXPECT_THAT(s_->Find(1)->spare_nodes, ElementsAre(7));
  ExpectConsistent(*s_);
}

TEST_F(Recovery, FreeSpareStartsInTheSamePass) {
  ASSERT_TRUE(s_->Finish(2, T(5)).ok());
  s_->SetNodeSchedulable(2, false);
  ASSERT_TRUE(s_->Requeue(1, T(10)).ok());
  PassResult r = s_->Schedule(T(10));
  EXPECT_TRUE(r.preempted.empty());
  ASSERT_THAT(r.started, ElementsAre(1));
  EXPECT_THAT(Nodes(*s_, 1), ElementsAre(0, 1, 3));
  ExpectConsistent(*s_);
}

TEST_F(Recovery, SubmitWithLastNodesAndSparesRecoversToo) {
  // The server's path: the run ends, the job comes back with what it held.
  JobRequest again = Gang(1, 3, 1);
  again.last_nodes = {0, -1, 2};
  again.spare_nodes = s_->Find(1)->spare_nodes;
  ASSERT_TRUE(s_->Finish(1, T(10)).ok());
  EXPECT_EQ(s_->SpareOwner(3), 0);
  ASSERT_TRUE(s_->Submit(again, T(10)).ok());
  EXPECT_EQ(s_->SpareOwner(3), 1);
  PassResult r = s_->Schedule(T(10));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_TRUE(r.preempted[0].immediate);
  ASSERT_TRUE(s_->Requeue(2, T(11)).ok());
  r = s_->Schedule(T(11));
  ASSERT_FALSE(r.started.empty());
  EXPECT_EQ(r.started[0], 1);
  EXPECT_THAT(Nodes(*s_, 1), ElementsAre(0, 3, 2));
  ExpectConsistent(*s_);
}

TEST_F(Recovery, FallsBackToTheQueueWithoutEnoughSpares) {
  s_->SetNodeSchedulable(1, false);
  s_->SetNodeSchedulable(2, false);
  ASSERT_TRUE(s_->Requeue(1, T(10)).ok());
  EXPECT_EQ(s_->SpareOwner(3), 0);  // released
  EXPECT_THAT(s_->ExplainPending(1, T(10)),
              HasSubstr("no restart on hot spares, 2 of its 3 nodes lost or "
                        "unusable, 1 usable hot spare(s)"));
  PassResult r = s_->Schedule(T(10));
  EXPECT_TRUE(r.preempted.empty());
  // Placed afresh in leaf 1, with a new spare.
  ASSERT_THAT(r.started, ElementsAre(1));
  for (int n : Nodes(*s_, 1)) EXPECT_GE(n, 4);
  EXPECT_EQ(s_->Find(1)->spare_nodes.size(), 1u);
  EXPECT_THAT(s_->Find(1)->recovery_fallback, HasSubstr("2 of its 3 nodes"));
  ExpectConsistent(*s_);
}

TEST_F(Recovery, FallsBackWhenASurvivorDiesBeforeItRestarts) {
  s_->SetNodeSchedulable(1, false);
  ASSERT_TRUE(s_->Requeue(1, T(10)).ok());
  PassResult r = s_->Schedule(T(10));
  ASSERT_EQ(r.preempted.size(), 1u);
  s_->SetNodeSchedulable(0, false);  // before the victim has stopped
  ASSERT_TRUE(s_->Requeue(2, T(11)).ok());
  r = s_->Schedule(T(11));
  ASSERT_FALSE(r.started.empty());
  EXPECT_EQ(s_->Find(1)->phase, JobPhase::kRunning);
  for (int n : Nodes(*s_, 1)) EXPECT_GE(n, 3);
  ExpectConsistent(*s_);
}

TEST_F(Recovery, CancelReleasesSparesAndHeldNodes) {
  s_->SetNodeSchedulable(1, false);
  ASSERT_TRUE(s_->Requeue(1, T(10)).ok());
  ASSERT_TRUE(s_->Cancel(1, T(10)).ok());
  EXPECT_EQ(s_->SpareOwner(3), 0);
  // Nodes 0 and 2 are anyone's again.
  ASSERT_TRUE(s_->Submit(MakeJob(3, 2, 8, T(10)), T(10)).ok());
  ASSERT_TRUE(s_->Submit(MakeJob(4, 4, 8, T(10)), T(10)).ok());
  s_->Schedule(T(10));
  EXPECT_EQ(s_->Find(3)->phase, JobPhase::kRunning);
  EXPECT_EQ(s_->Find(4)->phase, JobPhase::kRunning);
  ExpectConsistent(*s_);
}

TEST(Spares, PreemptionRequeueReleasesSpares) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c);
  JobRequest j = Gang(1, 2, 1);
  j.preemptible = true;
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  s->Schedule(T(0));
  ASSERT_EQ(s->Find(1)->spare_nodes.size(), 1u);
  ASSERT_TRUE(s->Requeue(1, T(1)).ok());  // no node lost: an ordinary requeue
  EXPECT_TRUE(s->Find(1)->spare_nodes.empty());
  EXPECT_FALSE(s->Find(1)->recovering());
  ExpectConsistent(*s);
}

TEST(Spares, TopUpInLaterPassesAndSpareDownIsReplaced) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c);
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8), T(0)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_TRUE(s->Submit(Gang(3, 2, 2), T(1)).ok());
  s->Schedule(T(1));
  ASSERT_EQ(s->Find(3)->phase, JobPhase::kRunning);
  EXPECT_TRUE(s->Find(3)->spare_nodes.empty());  // nothing eligible
  const int freed = Nodes(*s, 1)[0];
  ASSERT_TRUE(s->Finish(1, T(2)).ok());
  s->Schedule(T(2));
  EXPECT_THAT(s->Find(3)->spare_nodes, ElementsAre(freed));
  const int other = Nodes(*s, 2)[0];
  ASSERT_TRUE(s->Finish(2, T(3)).ok());
  s->Schedule(T(3));
  EXPECT_EQ(s->Find(3)->spare_nodes.size(), 2u);
  // A spare that goes down is no spare; none is left to replace it.
  s->SetNodeSchedulable(other, false);
  EXPECT_EQ(s->SpareOwner(other), 0);
  EXPECT_THAT(s->Find(3)->spare_nodes, ElementsAre(freed));
  s->SetNodeSchedulable(other, true);
  s->Schedule(T(4));
  EXPECT_EQ(s->Find(3)->spare_nodes.size(), 2u);
  ExpectConsistent(*s);
}

TEST(Spares, RestoreTakesBackItsSpares) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c);
  JobRequest j = Gang(1, 2, 2);
  j.spare_nodes = {3, 0, 3};  // node 0 is in its placement; 3 once
  Placement p;
  p.gpu_model = 0;
  p.tasks = {{0, 0xff}, {1, 0xff}};
  ASSERT_TRUE(s->Restore(j, p, T(0), 0, T(0)).ok());
  EXPECT_THAT(s->Find(1)->spare_nodes, ElementsAre(3));
  s->Schedule(T(1));
  EXPECT_THAT(s->Find(1)->spare_nodes, ElementsAre(3, 2));
  ExpectConsistent(*s);
}

constexpr JobId kImmediate = -1000000;

TEST(Spares, ClusterChangeKeepsSparesByNameAndEndsRecoveries) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c);
  ASSERT_TRUE(s->Submit(Gang(1, 2, 2), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_THAT(s->Find(1)->spare_nodes, ElementsAre(2, 3));
  // h200-3 leaves the cluster: that spare goes, the other stays.
  ASSERT_TRUE(s->UpdateCluster(MakeCluster({{3, 0}}, 4, 1), T(1)).ok());
  EXPECT_THAT(s->Find(1)->spare_nodes, ElementsAre(2));
  ExpectConsistent(*s);
  // A recovery in flight becomes a plain queued job.
  s->SetNodeSchedulable(1, false);
  ASSERT_TRUE(s->Requeue(1, T(2)).ok());
  ASSERT_TRUE(s->Find(1)->recovering());
  ASSERT_TRUE(s->UpdateCluster(MakeCluster({{3, 0}}, 4, 1), T(3)).ok());
  EXPECT_FALSE(s->Find(1)->recovering());
  EXPECT_TRUE(s->Find(1)->spare_nodes.empty());
  ExpectConsistent(*s);
  PassResult r = s->Schedule(T(3));
  ASSERT_THAT(r.started, ElementsAre(1));
  EXPECT_THAT(Nodes(*s, 1), ElementsAre(0, 2));
  ExpectConsistent(*s);
}

// Random submissions, finishes and node failures; after every step the
// GPU and spare bookkeeping must hold, and the same seed gives the same
// decisions.
std::vector<JobId> RandomRun(const std::string& policy, uint64_t seed) {
  Cluster c = MakeCluster({{24, 0}}, 4, 3);
  auto s = Make(c, policy);
  std::mt19937_64 rng(seed);
  std::vector<JobId> log;
  JobId next = 1;
  for (int step = 0; step < 400; ++step) {
    const absl::Time now = T(step);
    const int what = static_cast<int>(rng() % 10);
    if (what < 4) {
      JobRequest j;
      if (rng() % 3 == 0) {
        j = Gang(next, 1 + static_cast<int>(rng() % 6),
                 static_cast<int>(rng() % 3));
      } else {
        j = MakeJob(next, 1, 1 << (rng() % 4));
        j.preemptible = rng() % 2 == 0;
      }
      j.submit_time = now;
      EXPECT_TRUE(s->Submit(j, now).ok());
      ++next;
    } else if (what < 7) {
      const JobId id = 1 + static_cast<JobId>(rng() % next);
      if (const SchedJob* j = s->Find(id);
          j != nullptr && j->phase != JobPhase::kPending) {
        EXPECT_TRUE(s->Finish(id, now).ok());
      }
    } else if (what < 9) {
      const int node = static_cast<int>(rng() % 24);
      const bool up = rng() % 2 == 0;
      s->SetNodeSchedulable(node, up);
      if (!up) {
        for (JobId id : s->JobsOnNode(node)) {
          EXPECT_TRUE(s->Requeue(id, now).ok());
        }
      }
    }
    PassResult r = s->Schedule(now);
    for (JobId id : r.started) log.push_back(id);
    for (const Preemption& p : r.preempted) {
      log.push_back(p.immediate ? kImmediate - p.victim : -p.victim);
      EXPECT_TRUE(s->Requeue(p.victim, now).ok());
    }
    EXPECT_TRUE(s->state().CheckInvariants().ok()) << step;
    EXPECT_TRUE(s->CheckSpares().ok()) << step << ": " << s->CheckSpares();
  }
  return log;
}

TEST(Spares, RandomWorkloadKeepsInvariantsAndIsDeterministic) {
  for (const char* policy : {"fifo", "backfill", "las", "fair"}) {
    const std::vector<JobId> a = RandomRun(policy, 7);
    EXPECT_EQ(a, RandomRun(policy, 7)) << policy;
    EXPECT_GT(a.size(), 50u) << policy;
    // Spares were reclaimed (recoveries happened).
    EXPECT_GT(std::count_if(a.begin(), a.end(),
                            [](JobId x) { return x < kImmediate; }),
              0)
        << policy;
  }
}

}  // namespace
}  // namespace spares_test
}  // namespace loom
