// Behaviour of each queue policy on small hand-made scenarios.

#include <algorithm>
#include <memory>

#include "gtest/gtest.h"
#include "loom/sched/las_policy.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

std::unique_ptr<Scheduler> Make(const Cluster& c, const std::string& policy,
                                PolicyOptions opts = {}) {
  return std::make_unique<Scheduler>(c, *MakeQueuePolicy(policy, opts),
                                     SchedulerOptions{});
}

bool Running(const Scheduler& s, JobId id) {
  const SchedJob* j = s.Find(id);
  return j != nullptr && j->phase == JobPhase::kRunning;
}

TEST(Policy, UnknownName) {
  auto p = MakeQueuePolicy("sjf", PolicyOptions{});
  EXPECT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("fifo"), std::string::npos);
}

// Two nodes. Job 1 holds one node; job 2 wants both; job 3 is small.
class HeadOfLine : public ::testing::Test {
 protected:
  void Run(const std::string& policy) {
    c_ = MakeCluster({{2, 0}}, 2, 8);
    s_ = Make(c_, policy);
    JobRequest j1 = MakeJob(1, 1, 8, T(0));
    j1.time_limit = absl::Seconds(100);
    ASSERT_TRUE(s_->Submit(j1, T(0)).ok());
    s_->Schedule(T(0));
    ASSERT_TRUE(s_->Submit(MakeJob(2, 2, 8, T(1)), T(1)).ok());
    ASSERT_TRUE(s_->Submit(MakeJob(3, 1, 1, T(2)), T(2)).ok());
  }
  Cluster c_;
  std::unique_ptr<Scheduler> s_;
};

TEST_F(HeadOfLine, FifoBlocks) {
  Run("fifo");
  s_->Schedule(T(2));
  EXPECT_FALSE(Running(*s_, 2));
  EXPECT_FALSE(Running(*s_, 3));
  EXPECT_EQ(s_->ExplainPending(3, T(2)),
            "queued behind job 2 (fifo: strict arrival order)");
}

TEST_F(HeadOfLine, BackfillKeepsReservedNodesForTheHead) {
  Run("backfill");
  s_->Schedule(T(2));
  // Job 3 has no time limit, so it may not use the node job 2 reserved.
  EXPECT_FALSE(Running(*s_, 3));
  EXPECT_NE(s_->ExplainPending(2, T(2)).find("next to run"), std::string::npos)
      << s_->ExplainPending(2, T(2));
  EXPECT_NE(s_->ExplainPending(3, T(2)).find("would delay job 2"),
            std::string::npos)
      << s_->ExplainPending(3, T(2));
}

TEST_F(HeadOfLine, BackfillRunsShortJobs) {
  Run("backfill");
  // A job that ends before job 1's time limit (t=100) may backfill.
  JobRequest j4 = MakeJob(4, 1, 2, T(3));
  j4.time_limit = absl::Seconds(50);
  ASSERT_TRUE(s_->Submit(j4, T(3)).ok());
  JobRequest j5 = MakeJob(5, 1, 2, T(3));
  j5.time_limit = absl::Seconds(500);
  ASSERT_TRUE(s_->Submit(j5, T(3)).ok());
  s_->Schedule(T(3));
  EXPECT_TRUE(Running(*s_, 4));
  EXPECT_FALSE(Running(*s_, 5));  // would delay job 2
  EXPECT_FALSE(Running(*s_, 2));
  // When job 1 and job 4 end, the head starts.
  ASSERT_TRUE(s_->Finish(1, T(60)).ok());
  ASSERT_TRUE(s_->Finish(4, T(60)).ok());
  s_->Schedule(T(60));
  EXPECT_TRUE(Running(*s_, 2));
}

TEST_F(HeadOfLine, ShortJobBehindALongOneOfTheSameShapeStillBackfills) {
  Run("backfill");
  // Job 3 (1 GPU, no limit) is blocked by the reservation; job 6 has the
  // same shape and ends before job 1's limit, so it may go.
  JobRequest j6 = MakeJob(6, 1, 1, T(4));
  j6.time_limit = absl::Seconds(30);
  ASSERT_TRUE(s_->Submit(j6, T(4)).ok());
  s_->Schedule(T(4));
  EXPECT_FALSE(Running(*s_, 3));
  EXPECT_TRUE(Running(*s_, 6)) << s_->ExplainPending(6, T(4));
  EXPECT_NE(s_->ExplainPending(3, T(4)).find("would delay job 2"),
            std::string::npos);
}

TEST(Backfill, NoTimeLimitBackfillsOutsideReservation) {
  // Three nodes; job 1 on node A; the head needs 3 nodes and reserves all;
  // but a head needing 2 nodes leaves one node outside the reservation.
  Cluster c = MakeCluster({{3, 0}}, 4, 8);
  auto s = Make(c, "backfill");
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8, T(0)), T(0)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(9, 1, 8, T(0)), T(0)).ok());
  s->Schedule(T(0));  // nodes 0 and 1 busy, node 2 idle
  ASSERT_TRUE(s->Submit(MakeJob(2, 3, 8, T(1)), T(1)).ok());  // needs all 3
  ASSERT_TRUE(s->Submit(MakeJob(3, 1, 8, T(2)), T(2)).ok());
  s->Schedule(T(2));
  EXPECT_FALSE(Running(*s, 3));  // node 2 is reserved for job 2
  ASSERT_TRUE(s->Cancel(2, T(3)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(4, 2, 8, T(3)), T(3)).ok());
  // Job 3 is now the head and starts; job 4 waits.
  s->Schedule(T(3));
  EXPECT_TRUE(Running(*s, 3));
  EXPECT_FALSE(Running(*s, 4));
}

TEST(Fair, LighterProjectGoesFirst) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto s = Make(c, "fair");
  // Project "heavy" used the node for a while.
  JobRequest h = MakeJob(1, 1, 8, T(0));
  h.project = "heavy";
  ASSERT_TRUE(s->Submit(h, T(0)).ok());
  s->Schedule(T(0));
  JobRequest h2 = MakeJob(2, 1, 8, T(10));
  h2.project = "heavy";
  JobRequest l = MakeJob(3, 1, 8, T(20));
  l.project = "light";
  ASSERT_TRUE(s->Submit(h2, T(10)).ok());
  ASSERT_TRUE(s->Submit(l, T(20)).ok());
  ASSERT_TRUE(s->Finish(1, T(1000)).ok());
  s->Schedule(T(1000));
  EXPECT_TRUE(Running(*s, 3));  // younger, but its project used less
  EXPECT_FALSE(Running(*s, 2));
}

TEST(Fair, PriorityClassFirst) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto s = Make(c, "fair");
  JobRequest lo = MakeJob(1, 1, 8, T(0));
  lo.priority = 0;
  JobRequest hi = MakeJob(2, 1, 8, T(5));
  hi.priority = 1000;
  ASSERT_TRUE(s->Submit(lo, T(0)).ok());
  ASSERT_TRUE(s->Submit(hi, T(5)).ok());
  s->Schedule(T(5));
  EXPECT_TRUE(Running(*s, 2));
  EXPECT_FALSE(Running(*s, 1));
}

TEST(Fair, AServiceReplicaPreemptsSpotWorkOfItsOwnClass) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto s = Make(c, "fair");
  JobRequest spot = MakeJob(1, 1, 8, T(1));
  spot.preemptible = true;  // the default class, as the replica's
  ASSERT_TRUE(s->Submit(spot, T(1)).ok());
  s->Schedule(T(1));
  ASSERT_TRUE(Running(*s, 1));
  // A job of the same class waits; a service replica preempts.
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 1, T(2)), T(2)).ok());
  EXPECT_TRUE(s->Schedule(T(2)).preempted.empty());
  ASSERT_TRUE(s->Cancel(2, T(2)).ok());
  JobRequest replica = MakeJob(3, 1, 1, T(3));
  replica.service = true;
  ASSERT_TRUE(s->Submit(replica, T(3)).ok());
  PassResult r = s->Schedule(T(3));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 1);
  EXPECT_EQ(r.preempted[0].for_job, 3);
  // Not the reverse: a running replica (not preemptible) is nobody's victim.
  Cluster one = MakeCluster({{1, 0}}, 2, 8);
  auto t = Make(one, "fair");
  JobRequest serving = MakeJob(1, 1, 8, T(1));
  serving.service = true;
  ASSERT_TRUE(t->Submit(serving, T(1)).ok());
  t->Schedule(T(1));
  JobRequest urgent = MakeJob(2, 1, 8, T(2));
  urgent.priority = 1000;
  ASSERT_TRUE(t->Submit(urgent, T(2)).ok());
  EXPECT_TRUE(t->Schedule(T(2)).preempted.empty());
  // Preemptible replicas of one class never take turns preempting each
  // other.
  auto u = Make(one, "fair");
  JobRequest spot_replica = MakeJob(1, 1, 8, T(1));
  spot_replica.service = true;
  spot_replica.preemptible = true;
  ASSERT_TRUE(u->Submit(spot_replica, T(1)).ok());
  u->Schedule(T(1));
  JobRequest other = MakeJob(2, 1, 8, T(2));
  other.service = true;
  other.preemptible = true;
  ASSERT_TRUE(u->Submit(other, T(2)).ok());
  EXPECT_TRUE(u->Schedule(T(2)).preempted.empty());
}

TEST(Fair, HigherPriorityPreemptsPreemptibleJobsOnce) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "fair");
  // Two preemptible low-priority jobs fill both nodes; job 3 is low
  // priority but not preemptible, job 4 of equal priority may not preempt.
  for (JobId id : {1, 2}) {
    JobRequest spot = MakeJob(id, 1, 8, T(id));
    spot.priority = 0;
    spot.preemptible = true;
    ASSERT_TRUE(s->Submit(spot, T(id)).ok());
    s->Schedule(T(id));
    ASSERT_TRUE(Running(*s, id));
  }
  JobRequest same = MakeJob(4, 1, 8, T(3));
  same.priority = 0;
  ASSERT_TRUE(s->Submit(same, T(3)).ok());
  EXPECT_TRUE(s->Schedule(T(3)).preempted.empty());
  // A high-priority job preempts the most recently started spot job.
  JobRequest hi = MakeJob(5, 1, 8, T(4));
  hi.priority = 1000;
  ASSERT_TRUE(s->Submit(hi, T(4)).ok());
  PassResult r = s->Schedule(T(4));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 2);
  EXPECT_EQ(r.preempted[0].for_job, 5);
  EXPECT_NE(s->ExplainPending(5, T(4)).find("preempted"), std::string::npos)
      << s->ExplainPending(5, T(4));
  // While its victim stops (grace period), later passes stop nobody else.
  EXPECT_TRUE(s->Schedule(T(5)).preempted.empty());
  EXPECT_TRUE(s->Schedule(T(6)).preempted.empty());
  EXPECT_TRUE(Running(*s, 1));
  ASSERT_TRUE(s->Requeue(2, T(7)).ok());
  s->Schedule(T(7));
  EXPECT_TRUE(Running(*s, 5));
  EXPECT_TRUE(Running(*s, 1));
  EXPECT_EQ(s->Find(2)->phase, JobPhase::kPending);
}

// Preemption places the job (on trial) with its image preference too: among
// the nodes its victims free, it takes those holding its image, and spares
// a victim it then does not need.
TEST(Fair, PreemptionForAJobPrefersNodesHoldingItsImage) {
  for (bool with_image : {false, true}) {
    SCOPED_TRACE(with_image ? "with image" : "without image");
    Cluster c = MakeCluster({{4, 0}}, 4, 8);  // one leaf of 4 nodes
    auto s = Make(c, "fair");
    // Job 1 on node 0, the 2-node gang 2 on nodes 1 and 2 (both
    // preemptible), job 3 (not preemptible) on node 3.
    JobRequest v1 = MakeJob(1, 1, 8, T(1));
    JobRequest gang = MakeJob(2, 2, 8, T(2));
    JobRequest fixed = MakeJob(3, 1, 8, T(3));
    for (JobRequest* j : {&v1, &gang, &fixed}) {
      j->priority = 0;
      j->preemptible = j != &fixed;
      ASSERT_TRUE(s->Submit(*j, j->submit_time).ok());
      s->Schedule(j->submit_time);
      ASSERT_TRUE(Running(*s, j->id));
    }
    ASSERT_EQ(s->Find(1)->placement.tasks[0].node, 0);
    ASSERT_EQ(s->Find(2)->placement.tasks[0].node, 1);
    ASSERT_EQ(s->Find(2)->placement.tasks[1].node, 2);
    s->SetNodeImages(1, {"sha256:img"});
    s->SetNodeImages(2, {"sha256:img"});
    // A high-priority 2-node job: freeing node 0 (job 1, the cheapest plan)
    // is not enough; freeing nodes 1 and 2 (the gang) is. Without the image
    // it takes nodes 0 and 1 and stops both jobs; with it, nodes 1 and 2.
    JobRequest hi = MakeJob(4, 2, 8, T(4));
    hi.priority = 1000;
    if (with_image) hi.image = "sha256:img";
    ASSERT_TRUE(s->Submit(hi, T(4)).ok());
    PassResult r = s->Schedule(T(4));
    std::vector<JobId> victims;
    for (const Preemption& p : r.preempted) victims.push_back(p.victim);
    std::sort(victims.begin(), victims.end());
    if (!with_image) {
      EXPECT_EQ(victims, (std::vector<JobId>{1, 2}));
      continue;
    }
    EXPECT_EQ(victims, std::vector<JobId>{2});
    ASSERT_TRUE(s->Requeue(2, T(5)).ok());
    s->Schedule(T(5));
    ASSERT_TRUE(Running(*s, 4));
    EXPECT_TRUE(Running(*s, 1));
    EXPECT_EQ(s->Find(4)->placement.preferred_tasks, 2);
  }
}

TEST(Fair, VictimIsTheJobThatLosesTheLeastWorkSinceItsCheckpoint) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "fair");
  // Job 1 started first but checkpointed just now; job 2 started later and
  // never checkpointed: stopping job 1 loses less.
  for (JobId id : {1, 2}) {
    JobRequest spot = MakeJob(id, 1, 8, T(id * 10));
    spot.priority = 0;
    spot.preemptible = true;
    ASSERT_TRUE(s->Submit(spot, T(id * 10)).ok());
    s->Schedule(T(id * 10));
    ASSERT_TRUE(Running(*s, id));
  }
  s->ReportCheckpoint(1, T(95));
  EXPECT_DOUBLE_EQ(s->Find(1)->WorkAtRisk(T(100)), 8 * 5.0);
  EXPECT_DOUBLE_EQ(s->Find(2)->WorkAtRisk(T(100)), 8 * 80.0);
  JobRequest hi = MakeJob(3, 1, 8, T(100));
  hi.priority = 1000;
  ASSERT_TRUE(s->Submit(hi, T(100)).ok());
  PassResult r = s->Schedule(T(100));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 1);
  // Without the checkpoint, the newest job would lose less.
  auto s2 = Make(c, "fair");
  for (JobId id : {1, 2}) {
    JobRequest spot = MakeJob(id, 1, 8, T(id * 10));
    spot.priority = 0;
    spot.preemptible = true;
    ASSERT_TRUE(s2->Submit(spot, T(id * 10)).ok());
    s2->Schedule(T(id * 10));
  }
  ASSERT_TRUE(s2->Submit(hi, T(100)).ok());
  r = s2->Schedule(T(100));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 2);
}

TEST(Fair, ProjectWithinItsQuotaReclaimsBorrowedGpus) {
  // Two nodes; "search" is guaranteed one node (8 GPUs), "research" none.
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  c.projects = {{"search", 8, 1.0, {}}, {"research", 0, 1.0, {}}};
  auto s = Make(c, "fair");
  // "research" borrows both nodes with preemptible jobs of normal priority.
  for (JobId id : {1, 2}) {
    JobRequest j = MakeJob(id, 1, 8, T(id));
    j.project = "research";
    j.preemptible = true;
    ASSERT_TRUE(s->Submit(j, T(id)).ok());
    s->Schedule(T(id));
    ASSERT_TRUE(Running(*s, id));
  }
  // A "search" job of the same priority, within its quota, takes one back:
  // the victim that loses the least (job 2, started last).
  JobRequest mine = MakeJob(3, 1, 8, T(10));
  mine.project = "search";
  ASSERT_TRUE(s->Submit(mine, T(10)).ok());
  PassResult r = s->Schedule(T(10));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 2);
  ASSERT_TRUE(s->Requeue(2, T(11)).ok());
  s->Schedule(T(11));
  EXPECT_TRUE(Running(*s, 3));
  // Beyond its quota it may not: a second "search" job waits.
  JobRequest more = MakeJob(4, 1, 8, T(12));
  more.project = "search";
  ASSERT_TRUE(s->Submit(more, T(12)).ok());
  EXPECT_TRUE(s->Schedule(T(12)).preempted.empty());
  EXPECT_TRUE(Running(*s, 1));
  EXPECT_FALSE(Running(*s, 4));
}

TEST(Fair, FreedNodeGoesToThePreemptorNotBackToItsVictim) {
  // One node. "search" (quota 8) has used far more than "research" (no
  // quota): once its victim is queued again, fair share alone would give the
  // victim the node back first, and it would be preempted again, and so on.
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  c.projects = {{"search", 8, 1.0, {}}, {"research", 0, 1.0, {}}};
  auto s = Make(c, "fair");
  JobRequest old = MakeJob(1, 1, 8, T(0));
  old.project = "search";
  ASSERT_TRUE(s->Submit(old, T(0)).ok());
  s->Schedule(T(0));
  ASSERT_TRUE(s->Finish(1, T(1000)).ok());
  JobRequest spot = MakeJob(2, 1, 8, T(1000));
  spot.project = "research";
  spot.preemptible = true;
  ASSERT_TRUE(s->Submit(spot, T(1000)).ok());
  s->Schedule(T(1000));
  ASSERT_TRUE(Running(*s, 2));
  JobRequest mine = MakeJob(3, 1, 8, T(1001));
  mine.project = "search";
  ASSERT_TRUE(s->Submit(mine, T(1001)).ok());
  PassResult r = s->Schedule(T(1001));
  ASSERT_EQ(r.preempted.size(), 1u);
  ASSERT_TRUE(s->Requeue(2, T(1002)).ok());
  r = s->Schedule(T(1002));
  EXPECT_EQ(r.started, std::vector<JobId>{3});
  EXPECT_TRUE(r.preempted.empty());
  EXPECT_FALSE(Running(*s, 2));
  // Once the preemptor runs, the claim is gone: the victim gets the node
  // when it frees.
  ASSERT_TRUE(s->Finish(3, T(1010)).ok());
  EXPECT_EQ(s->Schedule(T(1010)).started, std::vector<JobId>{2});
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST(Fair, StarvingGangGetsTheReservation) {
  // Two nodes. A light project keeps sending 1-node jobs; a heavy project's
  // 2-node gang must still start once it has waited past the starvation age.
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  PolicyOptions opts;
  opts.starvation_age = absl::Seconds(100);
  auto s = Make(c, "fair", opts);
  JobRequest big = MakeJob(1, 2, 8, T(0));
  big.project = "heavy";
  // Make "heavy" heavy first.
  JobRequest warm = MakeJob(100, 2, 8, T(0));
  warm.project = "heavy";
  ASSERT_TRUE(s->Submit(warm, T(0)).ok());
  s->Schedule(T(0));
  ASSERT_TRUE(s->Submit(big, T(1)).ok());
  ASSERT_TRUE(s->Finish(100, T(50)).ok());
  JobId next = 2;
  std::vector<JobId> light_running;
  bool started = false;
  for (double t = 50; t < 2000 && !started; t += 25) {
    // Keep one light job arriving each step.
    JobRequest l = MakeJob(next++, 1, 8, T(t));
    l.project = "light";
    ASSERT_TRUE(s->Submit(l, T(t)).ok());
    PassResult r = s->Schedule(T(t));
    for (JobId id : r.started) {
      if (id == 1)
        started = true;
      else
        light_running.push_back(id);
    }
    // Light jobs run 60 s.
    if (light_running.size() > 1 ||
        (!light_running.empty() && static_cast<int>(t) % 50 == 0)) {
      ASSERT_TRUE(s->Finish(light_running.front(), T(t + 1)).ok());
      light_running.erase(light_running.begin());
    }
  }
  EXPECT_TRUE(started);
}

TEST(Las, QueuesByAttainedService) {
  LasPolicy p({100.0, 1000.0});
  EXPECT_EQ(p.QueueOf(0), 0);
  EXPECT_EQ(p.QueueOf(99.9), 0);
  EXPECT_EQ(p.QueueOf(100), 1);
  EXPECT_EQ(p.QueueOf(5000), 2);
}

TEST(Las, NewJobPreemptsJobThatFellToALowerQueue) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  PolicyOptions opts;
  opts.las_thresholds = {800.0};  // 8 GPUs x 100 s
  auto s = Make(c, "las", opts);
  JobRequest old = MakeJob(1, 1, 8, T(0));
  old.preemptible = true;
  ASSERT_TRUE(s->Submit(old, T(0)).ok());
  s->Schedule(T(0));
  ASSERT_TRUE(Running(*s, 1));
  // Before the threshold a new job only waits.
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 4, T(50)), T(50)).ok());
  PassResult r = s->Schedule(T(50));
  EXPECT_TRUE(r.preempted.empty());
  // After 100 s job 1 is in queue 1 and job 2 (queue 0) preempts it.
  r = s->Schedule(T(150));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, 1);
  EXPECT_EQ(r.preempted[0].for_job, 2);
  EXPECT_EQ(s->Find(1)->phase, JobPhase::kStopping);
  EXPECT_NE(s->ExplainPending(2, T(150)).find("preempted"), std::string::npos);
  ASSERT_TRUE(s->Requeue(1, T(150)).ok());
  r = s->Schedule(T(150));
  EXPECT_TRUE(Running(*s, 2));
  EXPECT_NEAR(s->Find(1)->attained_gpu_seconds, 1200.0, 1e-6);
  // Job 1 resumes when job 2 is done.
  ASSERT_TRUE(s->Finish(2, T(200)).ok());
  s->Schedule(T(200));
  EXPECT_TRUE(Running(*s, 1));
}

TEST(Las, NonPreemptibleJobsAreNotVictims) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  PolicyOptions opts;
  opts.las_thresholds = {800.0};
  auto s = Make(c, "las", opts);
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8, T(0)), T(0)).ok());  // not preemptible
  s->Schedule(T(0));
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 4, T(50)), T(50)).ok());
  EXPECT_TRUE(s->Schedule(T(500)).preempted.empty());
}

}  // namespace
}  // namespace loom
