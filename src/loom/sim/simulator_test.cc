#include "loom/sim/simulator.h"

#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"
#include "loom/sched/test_util.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

using testing::MakeCluster;

std::vector<SimJob> Jobs(const Cluster& c, const std::string& csv,
                         WorkloadOptions o = {}) {
  absl::StatusOr<Trace> t = ParseTrace(csv, "test.csv", TraceFormat::kCanonical,
                                       /*strict=*/true);
  EXPECT_TRUE(t.ok()) << t.status();
  return BuildWorkload(*t, c, o).jobs;
}

TEST(Simulator, FifoOnOneNodeByHand) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto jobs = Jobs(c,
                   "job_id,submit_time,duration,num_gpus\n"
                   "a,0,100,8\n"
                   "b,10,50,8\n"
                   "c,20,30,16\n");
  SimOptions o;
  o.policy = "fifo";
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finished, 2);
  EXPECT_EQ(r->infeasible, 1);  // 16 GPUs on an 8-GPU cluster
  EXPECT_EQ(r->unfinished, 0);
  EXPECT_DOUBLE_EQ(r->makespan_s, 150);
  EXPECT_DOUBLE_EQ(r->jct_mean_s, (100 + 140) / 2.0);
  EXPECT_DOUBLE_EQ(r->wait_mean_s, (0 + 90) / 2.0);
  // Busy all through the arrival window [0, 20].
  EXPECT_DOUBLE_EQ(r->gpu_utilization, 1.0);
  EXPECT_DOUBLE_EQ(r->gpu_hours_by_project["default"], 8 * 150 / 3600.0);
  EXPECT_FALSE(r->infeasible_examples.empty());
}

TEST(Simulator, SlowerGpusRunLonger) {
  Cluster c = MakeCluster({{1, 1}}, 2, 8);  // one A100 node, speed 0.4
  auto jobs = Jobs(c, "job_id,submit_time,duration,num_gpus\na,0,100,8\n");
  SimOptions o;
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->jct_mean_s, 250);
}

TEST(Simulator, BackfillBeatsFifoOnHeadOfLineBlocking) {
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  std::string csv =
      "job_id,submit_time,duration,num_gpus\n"
      "long,0,1000,8\n"
      "wide,1,100,16\n";
  for (int i = 0; i < 20; ++i) {
    csv +=
        "small" + std::to_string(i) + "," + std::to_string(2 + i) + ",50,1\n";
  }
  WorkloadOptions wo;
  wo.time_limits = *ParseTimeLimitMode("exact");
  auto jobs = Jobs(c, csv, wo);
  SimOptions fifo, backfill;
  fifo.policy = "fifo";
  backfill.policy = "backfill";
  auto a = RunSimulation(c, jobs, fifo);
  auto b = RunSimulation(c, jobs, backfill);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->finished, 22);
  EXPECT_EQ(b->finished, 22);
  EXPECT_LT(b->jct_mean_s, a->jct_mean_s);
  // The wide job is not delayed by backfilling: it starts when `long` ends.
  EXPECT_LE(b->makespan_s, a->makespan_s);
}

TEST(Simulator, DeterministicAndPoliciesDiffer) {
  Cluster c = *ClusterPreset("small");
  absl::StatusOr<Trace> t =
      ReadTraceFile("testdata/traces/sample.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(t.ok()) << t.status();
  WorkloadOptions wo;
  wo.arrival_scale = 0.01;
  auto jobs = BuildWorkload(*t, c, wo).jobs;
  for (const char* policy : {"fifo", "backfill", "las", "fair"}) {
    SimOptions o;
    o.policy = policy;
    auto r1 = RunSimulation(c, jobs, o);
    auto r2 = RunSimulation(c, jobs, o);
    ASSERT_TRUE(r1.ok() && r2.ok());
    EXPECT_EQ(r1->jct_s, r2->jct_s) << policy;
    EXPECT_EQ(r1->finished + r1->infeasible, r1->jobs) << policy;
  }
}

TEST(Simulator, FailuresLoseWorkSinceTheLastCheckpoint) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  std::string csv = "job_id,submit_time,duration,num_gpus\n";
  for (int i = 0; i < 8; ++i) {
    csv +=
        "j" + std::to_string(i) + "," + std::to_string(i * 100) + ",20000,8\n";
  }
  auto jobs = Jobs(c, csv);
  SimOptions o;
  o.fail_mtbf_s = 20000;
  o.repair_s = 600;
  o.checkpoint_interval_s = 1800;
  o.seed = 3;
  auto with_ckpt = RunSimulation(c, jobs, o);
  o.checkpoint_interval_s = 0;
  auto without = RunSimulation(c, jobs, o);
  ASSERT_TRUE(with_ckpt.ok() && without.ok());
  EXPECT_EQ(with_ckpt->finished, 8);
  EXPECT_EQ(without->finished, 8);
  EXPECT_GT(with_ckpt->node_failures, 0);
  EXPECT_GT(with_ckpt->gpu_hours_lost, 0);
  EXPECT_LT(with_ckpt->goodput, 1.0);
  // Same failures (same seed); checkpoints keep more of the work.
  EXPECT_LT(with_ckpt->gpu_hours_lost, without->gpu_hours_lost);
  EXPECT_GT(with_ckpt->goodput, without->goodput);
}

TEST(Simulator, RestartPolicyEndsJobsThatRunOutOfRestarts) {
  Cluster c = MakeCluster({{4, 0}}, 2, 8);
  std::string csv = "job_id,submit_time,duration,num_gpus\n";
  for (int i = 0; i < 8; ++i) {
    csv +=
        "j" + std::to_string(i) + "," + std::to_string(i * 100) + ",20000,8\n";
  }
  auto jobs = Jobs(c, csv);
  SimOptions o;
  o.fail_mtbf_s = 20000;
  o.repair_s = 600;
  o.seed = 3;
  auto unlimited = RunSimulation(c, jobs, o);
  ASSERT_TRUE(unlimited.ok());
  ASSERT_GT(unlimited->restarts, 0);
  EXPECT_EQ(unlimited->failed, 0);
  // No restarts: every job hit by a failure ends failed, the others finish.
  o.restart = {0, absl::ZeroDuration()};
  auto none = RunSimulation(c, jobs, o);
  ASSERT_TRUE(none.ok());
  EXPECT_GT(none->failed, 0);
  EXPECT_EQ(none->restarts, 0);
  EXPECT_EQ(none->finished + none->failed, 8);
  // A backoff keeps failed jobs out of the queue for a while: they finish
  // later, but all of them finish.
  o.restart = {-1, absl::Hours(2)};
  auto backoff = RunSimulation(c, jobs, o);
  ASSERT_TRUE(backoff.ok());
  EXPECT_EQ(backoff->finished, 8);
  EXPECT_EQ(backoff->failed, 0);
  EXPECT_GT(backoff->jct_mean_s, unlimited->jct_mean_s);
}

TEST(Simulator, LasPreemptsAndResumes) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto jobs = Jobs(c,
                   "job_id,submit_time,duration,num_gpus\n"
                   "long,0,20000,8\n"
                   "short,5000,100,8\n");
  SimOptions o;
  o.policy = "las";
  o.restart_cost_s = 30;
  auto r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->finished, 2);
  EXPECT_EQ(r->preemptions, 1);
  EXPECT_EQ(r->restarts, 1);
  // `short` ran at once; `long` paid 100 s of waiting and the restart cost.
  EXPECT_DOUBLE_EQ(r->makespan_s, 20000 + 100 + 30);
  EXPECT_DOUBLE_EQ(r->jct_s.front(), 100);
}

TEST(Simulator, GivesUpOnAGangThatCanNeverFindAllItsNodesUp) {
  // A job needs both nodes, which fail every few seconds and take long to
  // repair: it may start now and then but never finishes.

  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  auto jobs = Jobs(c,
                   "job_id,submit_time,duration,num_gpus\n"
                   "wide,0,100000,16\n");
  SimOptions o;
  o.fail_mtbf_s = 1;
  o.repair_s = 1.0e6;
  auto r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->unfinished, 1);
}

TEST(Simulator, RejectsBadOptions) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  SimOptions o;
  o.policy = "random";
  EXPECT_FALSE(RunSimulation(c, {}, o).ok());
  o.policy = "fifo";
  o.restart_cost_s = -1;
  EXPECT_FALSE(RunSimulation(c, {}, o).ok());
}

}  // namespace
}  // namespace loom
