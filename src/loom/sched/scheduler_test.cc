#include "loom/sched/scheduler.h"

#include <random>
#include <set>

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

std::unique_ptr<Scheduler> Make(const Cluster& c, const std::string& policy) {
  return std::make_unique<Scheduler>(
      c, *MakeQueuePolicy(policy, PolicyOptions{}), SchedulerOptions{});
}

TEST(Scheduler, SubmitScheduleFinish) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "fair");
  ASSERT_EQ(s->Submit(MakeJob(1, 1, 4), T(0))->kind,
            SubmitOutcome::Kind::kQueued);
  EXPECT_EQ(s->pending_count(), 1);
  PassResult r = s->Schedule(T(1));
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_EQ(s->running_count(), 1);
  EXPECT_EQ(s->state().TotalFreeGpus(), 12);
  ASSERT_TRUE(s->Finish(1, T(11)).ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 16);
  EXPECT_EQ(s->Find(1), nullptr);
  auto usage = s->Usage(T(20));
  ASSERT_EQ(usage.size(), 1u);
  EXPECT_NEAR(usage[0].gpu_seconds, 40.0, 1e-6);
}

TEST(Scheduler, RejectsBadAndInfeasibleJobs) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "fifo");
  JobRequest bad = MakeJob(1, 0, 1);
  EXPECT_EQ(s->Submit(bad, T(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto out = s->Submit(MakeJob(2, 3, 8), T(0));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible);
  EXPECT_FALSE(out->reason.empty());
  EXPECT_EQ(s->pending_count(), 0);
  ASSERT_TRUE(s->Submit(MakeJob(3, 1, 1), T(0)).ok());
  EXPECT_EQ(s->Submit(MakeJob(3, 1, 1), T(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->Finish(99, T(1)).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s->Finish(3, T(1)).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(Scheduler, GangIsAllOrNothing) {
  Cluster c = MakeCluster({{3, 0}}, 4, 8);
  auto s = Make(c, "fifo");
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 1), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_TRUE(s->Submit(MakeJob(2, 3, 8), T(1)).ok());
  PassResult r = s->Schedule(T(1));
  EXPECT_TRUE(r.started.empty());
  EXPECT_EQ(s->state().TotalFreeGpus(), 23);
  EXPECT_EQ(s->ExplainPending(2, T(1)),
            "waiting for 3 free h200 nodes under one switch; 2 free");
  ASSERT_TRUE(s->Finish(1, T(5)).ok());
  r = s->Schedule(T(5));
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_EQ(s->Find(2)->placement.tasks.size(), 3u);
  EXPECT_EQ(s->state().TotalFreeGpus(), 0);
}

TEST(Scheduler, CancelPendingAndRunning) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto s = Make(c, "backfill");
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8), T(0)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 8), T(0)).ok());
  s->Schedule(T(0));
  EXPECT_EQ(s->running_count(), 1);
  ASSERT_TRUE(s->Cancel(2, T(1)).ok());
  ASSERT_TRUE(s->Cancel(1, T(1)).ok());
  EXPECT_EQ(s->pending_count() + s->running_count(), 0);
  EXPECT_EQ(s->state().TotalFreeGpus(), 8);
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST(Scheduler, NodeCordonAndJobsOnNode) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "fair");
  ASSERT_TRUE(s->Submit(MakeJob(1, 2, 8), T(0)).ok());
  s->Schedule(T(0));
  EXPECT_EQ(s->JobsOnNode(0), std::vector<JobId>{1});
  ASSERT_TRUE(s->Requeue(1, T(10)).ok());
  s->SetNodeSchedulable(1, false);
  s->Schedule(T(10));
  EXPECT_EQ(s->running_count(), 0);
  EXPECT_NE(s->ExplainPending(1, T(10)).find("2 free h200 nodes"),
            std::string::npos)
      << s->ExplainPending(1, T(10));
  EXPECT_NEAR(s->Find(1)->attained_gpu_seconds, 160.0, 1e-6);
}

TEST(Scheduler, RestoreRunningJobs) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto s = Make(c, "las");
  Placement p;
  p.gpu_model = 0;
  p.tasks = {{0, 0x0f}, {1, 0x0f}};
  JobRequest j = MakeJob(7, 2, 4, T(0));
  j.preemptible = true;
  ASSERT_TRUE(s->Restore(j, p, T(10), 100.0, T(20)).ok());
  EXPECT_EQ(s->running_count(), 1);
  EXPECT_EQ(s->state().TotalFreeGpus(), 8);
  EXPECT_EQ(s->Find(7)->placement.switch_level, 1);
  EXPECT_NEAR(s->Find(7)->AttainedAt(T(20)), 100.0 + 8 * 10, 1e-6);
  // A second job on the same GPUs is refused and changes nothing.
  JobRequest k = MakeJob(8, 1, 4, T(0));
  Placement q;
  q.gpu_model = 0;
  q.tasks = {{0, 0x01 | 0x10 | 0x20 | 0x40}};
  EXPECT_EQ(s->Restore(k, q, T(10), 0, T(20)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s->state().TotalFreeGpus(), 8);
  q.tasks = {{0, 0xf0}};
  EXPECT_TRUE(s->Restore(k, q, T(10), 0, T(20)).ok());
  EXPECT_TRUE(s->state().CheckInvariants().ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 4);
  ASSERT_TRUE(s->Finish(7, T(30)).ok());
  EXPECT_EQ(s->state().TotalFreeGpus(), 12);
}

TEST(Scheduler, SetNodeImagesReplacesAndClears) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  auto s = Make(c, "fifo");
  EXPECT_EQ(s->NodesWithImage("sha256:a"), nullptr);
  EXPECT_EQ(s->NodesWithImage(""), nullptr);
  s->SetNodeImages(1, {"sha256:a", "sha256:b", "sha256:a", ""});
  s->SetNodeImages(2, {"sha256:a"});
  const NodeMask* a = s->NodesWithImage("sha256:a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Count(), 2);
  EXPECT_TRUE(a->Contains(1));
  EXPECT_TRUE(a->Contains(2));
  ASSERT_NE(s->NodesWithImage("sha256:b"), nullptr);
  EXPECT_EQ(s->NodesWithImage("sha256:b")->Count(), 1);
  EXPECT_EQ(s->NodesWithImage(""), nullptr);
  // Replacing node 1's set: it drops a and b, and b (no node left) is gone.
  s->SetNodeImages(1, {"sha256:c"});
  a = s->NodesWithImage("sha256:a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->Count(), 1);
  EXPECT_TRUE(a->Contains(2));
  EXPECT_EQ(s->NodesWithImage("sha256:b"), nullptr);
  ASSERT_NE(s->NodesWithImage("sha256:c"), nullptr);
  EXPECT_TRUE(s->NodesWithImage("sha256:c")->Contains(1));
  // Clearing.
  s->SetNodeImages(2, {});
  s->SetNodeImages(1, {});
  EXPECT_EQ(s->NodesWithImage("sha256:a"), nullptr);
  EXPECT_EQ(s->NodesWithImage("sha256:c"), nullptr);
  // Out of range: ignored.
  s->SetNodeImages(-1, {"sha256:a"});
  s->SetNodeImages(4, {"sha256:a"});
  EXPECT_EQ(s->NodesWithImage("sha256:a"), nullptr);
}

TEST(Scheduler, JobGoesToANodeHoldingItsImage) {
  // Leaves {0,1} and {2,3}; node 3 holds the image, node 1 another.
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  auto s = Make(c, "fair");
  s->SetNodeImages(1, {"sha256:other"});
  s->SetNodeImages(3, {"sha256:img"});
  // Job 1 fills node 0: leaf 0 is then the one with the fewest idle nodes.
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 8, T(0)), T(0)).ok());
  s->Schedule(T(0));
  ASSERT_EQ(s->Find(1)->placement.tasks[0].node, 0);
  // Node 1 is the best fit for an idle node; the image on node 3 (another
  // leaf) does not move the job there.
  JobRequest j2 = MakeJob(2, 1, 4, T(1));
  j2.image = "sha256:img";
  ASSERT_TRUE(s->Submit(j2, T(1)).ok());
  PassResult r = s->Schedule(T(1));
  ASSERT_EQ(r.started, std::vector<JobId>{2});
  EXPECT_EQ(s->Find(2)->placement.tasks[0].node, 1);
  EXPECT_EQ(s->Find(2)->placement.preferred_tasks, 0);
  // Node 1 is now partly used (4 free); job 3 takes it, a tighter fit than
  // the idle image node 3.
  JobRequest j3 = MakeJob(3, 1, 2, T(2));
  j3.image = "sha256:img";
  ASSERT_TRUE(s->Submit(j3, T(2)).ok());
  s->Schedule(T(2));
  EXPECT_EQ(s->Find(3)->placement.tasks[0].node, 1);
  EXPECT_EQ(s->Find(3)->placement.preferred_tasks, 0);
  // Leaf 1 is whole ({2,3} idle): an 8-GPU job takes node 3, which holds
  // its image, over node 2; one without the image would take node 2.
  JobRequest j4 = MakeJob(4, 1, 8, T(3));
  j4.image = "sha256:img";
  ASSERT_TRUE(s->Submit(j4, T(3)).ok());
  r = s->Schedule(T(3));
  ASSERT_EQ(r.started, std::vector<JobId>{4});
  EXPECT_EQ(s->Find(4)->placement.tasks[0].node, 3);
  EXPECT_EQ(s->Find(4)->placement.preferred_tasks, 1);
  ASSERT_TRUE(s->Finish(4, T(4)).ok());
  ASSERT_TRUE(s->Submit(MakeJob(5, 1, 8, T(4)), T(4)).ok());
  s->Schedule(T(4));
  EXPECT_EQ(s->Find(5)->placement.tasks[0].node, 2);
  EXPECT_EQ(s->Find(5)->placement.preferred_tasks, 0);
}

TEST(Scheduler, GangTakesImageNodesWithinItsLeaf) {
  // Two leaves of 4 nodes under one spine.
  Cluster c = MakeCluster({{8, 0}}, 4, 8);
  auto s = Make(c, "backfill");
  s->SetNodeImages(2, {"sha256:img"});
  s->SetNodeImages(3, {"sha256:img"});
  s->SetNodeImages(5, {"sha256:img"});
  JobRequest j = MakeJob(1, 3, 8, T(0));
  j.image = "sha256:img";
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(0)).started, std::vector<JobId>{1});
  const Placement& p = s->Find(1)->placement;
  std::set<int> nodes;
  for (const TaskPlacement& t : p.tasks) nodes.insert(t.node);
  // Leaf 0 (the first of two equal leaves), as without the image; nodes 2
  // and 3 hold the image, node 5 is in the other leaf.
  EXPECT_EQ(nodes, (std::set<int>{0, 2, 3}));
  EXPECT_EQ(p.switch_level, 1);
  EXPECT_EQ(p.preferred_tasks, 2);
}

struct Decision {
  JobId job;
  std::vector<std::pair<int, uint32_t>> where;
  bool operator==(const Decision&) const = default;
};

// Drives a scheduler with a random stream of jobs, finishing them at random
// times, and checks the invariants after every pass. Returns the decisions.
// With `images`, nodes hold random images (changing now and then) and jobs
// ask for them, from a second random stream so that the job stream is the
// same as without.
std::vector<Decision> RandomRun(const std::string& policy, uint32_t seed,
                                bool check, bool images = false) {
  Cluster c = MakeCluster({{12, 0}, {4, 1}}, 4, 2);
  auto s = Make(c, policy);
  std::mt19937 rng(seed);
  std::mt19937 img(seed * 31 + 1);
  const std::string digests[] = {"sha256:a", "sha256:b", "sha256:c"};
  auto random_images = [&]() {
    std::vector<std::string> held;
    for (const std::string& d : digests) {
      if (img() % 3 == 0) held.push_back(d);
    }
    return held;
  };
  if (images) {
    for (int n = 0; n < static_cast<int>(c.nodes.size()); ++n) {
      s->SetNodeImages(n, random_images());
    }
  }
  std::vector<Decision> decisions;
  std::vector<std::pair<double, JobId>> running;  // (end, id)
  const int sizes[] = {1, 1, 1, 1, 2, 4, 8, 8, 16, 32};
  JobId next = 1;
  double now = 0;
  for (int step = 0; step < 600; ++step) {
    now += rng() % 50;
    for (int k = rng() % 4; k > 0; --k) {
      JobRequest j = MakeJob(next++, 1, 1, T(now));
      j.shape = *ShapeFromTotalGpus(sizes[rng() % 10], 8);
      if (rng() % 10 == 0) j.shape = *ShapeFromTotalGpus(4, 8, 2);  // -N 2
      j.shape.gpu_model = rng() % 5 == 0 ? 1 : (rng() % 2 ? 0 : kAnyGpuModel);
      j.project = "p" + std::to_string(rng() % 3);
      j.preemptible = rng() % 2;
      if (rng() % 2) j.time_limit = absl::Seconds(100 + rng() % 900);
      if (images && img() % 4 != 0) j.image = digests[img() % 3];
      EXPECT_TRUE(s->Submit(j, T(now)).ok());
    }
    // Finish what is due.
    std::sort(running.begin(), running.end());
    while (!running.empty() && running.front().first <= now) {
      EXPECT_TRUE(s->Finish(running.front().second, T(now)).ok());
      running.erase(running.begin());
    }
    if (images && step % 20 == 0) {
      s->SetNodeImages(static_cast<int>(img() % c.nodes.size()),
                       random_images());
    }
    PassResult r = s->Schedule(T(now));
    for (const Preemption& p : r.preempted) {
      EXPECT_TRUE(s->Requeue(p.victim, T(now)).ok());
      running.erase(
          std::remove_if(running.begin(), running.end(),
                         [&](auto& e) { return e.second == p.victim; }),
          running.end());
    }
    for (JobId id : r.started) {
      const SchedJob* j = s->Find(id);
      Decision d{id, {}};
      std::set<std::pair<int, uint32_t>> uniq;
      for (const TaskPlacement& t : j->placement.tasks) {
        d.where.emplace_back(t.node, t.gpu_mask);
        if (check) {
          EXPECT_EQ(std::popcount(t.gpu_mask), j->request.shape.gpus_per_task);
          if (j->request.shape.gpu_model != kAnyGpuModel) {
            EXPECT_EQ(c.nodes[t.node].gpu_model, j->request.shape.gpu_model);
          }
        }
      }
      if (check) {
        // `preferred_tasks` counts the tasks on nodes holding the image.
        const NodeMask* held = s->NodesWithImage(j->request.image);
        int preferred = 0;
        for (const TaskPlacement& t : j->placement.tasks) {
          preferred += held != nullptr && held->Contains(t.node);
        }
        EXPECT_EQ(j->placement.preferred_tasks, preferred) << "job " << id;
        // All or nothing, and small jobs on one node.
        EXPECT_EQ(static_cast<int>(j->placement.tasks.size()),
                  j->request.shape.tasks);
        std::set<int> nodes;
        for (auto& t : j->placement.tasks) nodes.insert(t.node);
        if (j->request.shape.one_task_per_node) {
          EXPECT_EQ(static_cast<int>(nodes.size()), j->request.shape.tasks)
              << "job " << id;
        } else if (j->request.shape.TotalGpus() <= 8) {
          EXPECT_EQ(nodes.size(), 1u) << "job " << id;
        }
      }
      decisions.push_back(d);
      running.emplace_back(now + 20 + rng() % 400, id);
    }
    if (check) {
      absl::Status inv = s->state().CheckInvariants();
      EXPECT_TRUE(inv.ok()) << policy << " step " << step << ": " << inv;
      if (!inv.ok()) break;
      int used = 0;
      for (int n = 0; n < s->state().num_nodes(); ++n) {
        used += s->state().NodeGpus(n) - s->state().FreeGpus(n);
      }
      EXPECT_LE(used, c.TotalGpus());
      // Every pending job has a reason a person can read.
      for (JobId id = 1; id < next; ++id) {
        const SchedJob* j = s->Find(id);
        if (j != nullptr && j->phase == JobPhase::kPending) {
          EXPECT_FALSE(s->ExplainPending(id, T(now)).empty());
        }
      }
    }
  }
  return decisions;
}

class AllPolicies : public ::testing::TestWithParam<std::string> {};

TEST_P(AllPolicies, InvariantsHoldOnRandomWorkload) {
  auto d = RandomRun(GetParam(), 7, true);
  EXPECT_GT(d.size(), 200u);
}

TEST_P(AllPolicies, SameInputSameSchedule) {
  EXPECT_EQ(RandomRun(GetParam(), 11, false), RandomRun(GetParam(), 11, false));
  EXPECT_NE(RandomRun(GetParam(), 11, false), RandomRun(GetParam(), 12, false));
}

TEST_P(AllPolicies, InvariantsHoldWithImages) {
  auto d = RandomRun(GetParam(), 7, true, true);
  EXPECT_GT(d.size(), 200u);
}

TEST_P(AllPolicies, SameInputSameScheduleWithImages) {
  EXPECT_EQ(RandomRun(GetParam(), 11, false, true),
            RandomRun(GetParam(), 11, false, true));
}

INSTANTIATE_TEST_SUITE_P(Policies, AllPolicies,
                         ::testing::Values("fifo", "backfill", "las", "fair"));

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Node selectors (docs/scheduling.md, "Labels and selectors").
class SelectorTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SelectorTest, JobLandsOnlyOnMatchingNodes) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c, GetParam());
  s->SetNodeLabels(2, {{"gpu.driver", "550.54.15"}});
  JobRequest j = MakeJob(1, 1, 2);
  j.node_selector = {{"gpu.driver", "550.54.15"}};
  ASSERT_EQ(s->Submit(j, T(0))->kind, SubmitOutcome::Kind::kQueued);
  PassResult r = s->Schedule(T(1));
  ASSERT_EQ(r.started.size(), 1u);
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 2);
}

TEST_P(SelectorTest, WaitsWithReasonWhenNoNodeMatches) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c, GetParam());
  JobRequest j = MakeJob(1, 1, 1);
  j.node_selector = {{"gpu.driver", "999"}};
  // Not infeasible: the label may be reported later.
  ASSERT_EQ(s->Submit(j, T(0))->kind, SubmitOutcome::Kind::kQueued);
  // A job of the same shape without a selector is not held back by it
  // (except under fifo's strict order).
  ASSERT_TRUE(s->Submit(MakeJob(2, 1, 1, T(1)), T(1)).ok());
  PassResult r = s->Schedule(T(2));
  if (GetParam() != "fifo") {
    ASSERT_EQ(r.started, std::vector<JobId>{2});
  }
  EXPECT_EQ(s->ReasonFor(*s->Find(1)).code,
            PendingReason::Code::kNoNodeMatchesSelector);
  EXPECT_EQ(s->ExplainPending(1, T(2)),
            "no node matches node_selector {gpu.driver: 999} (0 of 4 nodes)");
  // The label appears: the job starts there.
  s->SetNodeLabels(3, {{"gpu.driver", "999"}});
  r = s->Schedule(T(3));
  ASSERT_EQ(r.started.front(), 1);
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 3);
}

TEST_P(SelectorTest, KeyAloneMatchesAnyValue) {
  Cluster c = MakeCluster({{3, 0}}, 3, 1);
  auto s = Make(c, GetParam());
  s->SetNodeLabels(1, {{"nvme", "fast"}});
  JobRequest j = MakeJob(1, 1, 1);
  j.node_selector = {{"nvme", ""}};
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  EXPECT_EQ(s->Find(1)->placement.tasks[0].node, 1);
}

INSTANTIATE_TEST_SUITE_P(Policies, SelectorTest,
                         ::testing::Values("fifo", "fair", "backfill", "las"));

// Under policies without reservations (a reserving policy says the job holds
// the next reservation instead).
TEST(Scheduler, SelectorReasonSaysHowManyNodesMatch) {
  Cluster c = MakeCluster({{4, 0}}, 4, 1);
  auto s = Make(c, "las");
  s->SetNodeLabels(0, {{"rack", "a"}});
  s->SetNodeLabels(1, {{"rack", "a"}});
  s->SetNodeSchedulable(1, false);
  JobRequest big = MakeJob(1, 1, 8);
  ASSERT_TRUE(s->Submit(big, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  // Job 1 may have taken node 0 or another: fill node 0 for sure.
  if (s->Find(1)->placement.tasks[0].node != 0) {
    JobRequest filler = MakeJob(2, 1, 8);
    filler.node_selector = {{"rack", "a"}};
    ASSERT_TRUE(s->Submit(filler, T(1)).ok());
    ASSERT_EQ(s->Schedule(T(2)).started.size(), 1u);
  }
  JobRequest j = MakeJob(3, 1, 2, T(3));
  j.node_selector = {{"rack", "a"}};
  ASSERT_TRUE(s->Submit(j, T(3)).ok());
  EXPECT_TRUE(s->Schedule(T(4)).started.empty());
  EXPECT_EQ(s->ReasonFor(*s->Find(3)).code,
            PendingReason::Code::kNoMatchingNodeFits);
  EXPECT_EQ(s->ExplainPending(3, T(4)),
            "waiting for 2 free GPUs on nodes matching {rack: a}; 2 of 4 "
            "nodes match, 1 schedulable");
}

TEST(Scheduler, GangWithSelectorUsesOnlyMatchingNodes) {
  Cluster c = MakeCluster({{8, 0}}, 4, 2);
  auto s = Make(c, "fair");
  for (int n : {1, 3, 6}) s->SetNodeLabels(n, {{"ib", "yes"}});
  JobRequest j = MakeJob(1, 3, 8);
  j.node_selector = {{"ib", "yes"}};
  ASSERT_TRUE(s->Submit(j, T(0)).ok());
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 1u);
  std::set<int> nodes;
  for (const TaskPlacement& t : s->Find(1)->placement.tasks) {
    nodes.insert(t.node);
  }
  EXPECT_EQ(nodes, (std::set<int>{1, 3, 6}));
}

TEST(Scheduler, PreemptionForSelectorJobFreesOnlyMatchingNodes) {
  Cluster c = MakeCluster({{2, 0}}, 2, 1);
  auto s = Make(c, "fair");
  s->SetNodeLabels(1, {{"zone", "b"}});
  for (JobId id : {1, 2}) {
    JobRequest low = MakeJob(id, 1, 8);
    low.preemptible = true;
    low.priority = 0;
    ASSERT_TRUE(s->Submit(low, T(0)).ok());
  }
  ASSERT_EQ(s->Schedule(T(1)).started.size(), 2u);
  const JobId on_b = s->Find(1)->placement.tasks[0].node == 1 ? 1 : 2;
  JobRequest high = MakeJob(3, 1, 8, T(2));
  high.priority = 1000;
  high.node_selector = {{"zone", "b"}};
  ASSERT_TRUE(s->Submit(high, T(2)).ok());
  PassResult r = s->Schedule(T(3));
  ASSERT_EQ(r.preempted.size(), 1u);
  EXPECT_EQ(r.preempted[0].victim, on_b);
}

TEST(Scheduler, SelectorMustNameValidLabels) {
  Cluster c = MakeCluster({{1, 0}}, 1, 1);
  auto s = Make(c, "fifo");
  JobRequest j = MakeJob(1, 1, 1);
  j.node_selector = {{"bad key", "x"}};
  EXPECT_EQ(s->Submit(j, T(0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Replicas of one service go to other nodes (leaves) while there is room
// there; never a reason to wait.
TEST(Scheduler, SpreadGroupsPlaceAwayFromTheirOwn) {
  Cluster c = testing::MakeCluster({{4, 0}}, 2, 8);  // 2 leaves of 2 nodes
  auto s = Make(c, "fifo");
  auto node_of = [&](JobId id) {
    return s->Find(id)->placement.tasks.at(0).node;
  };
  for (JobId id = 1; id <= 5; ++id) {
    JobRequest r = testing::MakeJob(id, 1, 1);
    r.spread_group = "embed";
    ASSERT_TRUE(s->Submit(r, testing::T(0)).ok());
  }
  // Without a group, one-GPU jobs pack onto one node (best fit).
  ASSERT_TRUE(s->Submit(testing::MakeJob(6, 1, 1), testing::T(0)).ok());
  ASSERT_TRUE(s->Submit(testing::MakeJob(7, 1, 1), testing::T(0)).ok());
  s->Schedule(testing::T(1));
  std::set<int> nodes;
  for (JobId id = 1; id <= 4; ++id) nodes.insert(node_of(id));
  EXPECT_EQ(nodes.size(), 4u);                       // one per node
  EXPECT_EQ(s->Find(5)->phase, JobPhase::kRunning);  // no room away: anyway
  EXPECT_EQ(node_of(6), node_of(7));

  // By leaf: the second replica under the other leaf.
  auto l = Make(c, "fifo");
  for (JobId id = 1; id <= 3; ++id) {
    JobRequest r = testing::MakeJob(id, 1, 1);
    r.spread_group = "chat";
    r.spread_leaf = true;
    ASSERT_TRUE(l->Submit(r, testing::T(0)).ok());
  }
  l->Schedule(testing::T(1));
  const Topology& topo = c.topology;
  const int leaf1 = topo.leaf_of(l->Find(1)->placement.tasks.at(0).node);
  const int leaf2 = topo.leaf_of(l->Find(2)->placement.tasks.at(0).node);
  EXPECT_NE(leaf1, leaf2);
  EXPECT_EQ(l->Find(3)->phase, JobPhase::kRunning);
}

}  // namespace
}  // namespace loom
