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
  // A lost node is a requeue (as the server does), not a failure: without
  // restarts, every job still finishes.
  // (Their cap of five node-loss requeues lifted: these jobs never save a
  // checkpoint, so some lose their node more often.)
  o.restart = {0, absl::ZeroDuration()};
  o.max_node_loss_requeues = 1000;
  auto no_restarts = RunSimulation(c, jobs, o);
  ASSERT_TRUE(no_restarts.ok());
  EXPECT_EQ(no_restarts->failed, 0);
  EXPECT_EQ(no_restarts->finished, 8);
  EXPECT_EQ(no_restarts->jct_s, unlimited->jct_s);
  // No requeues: every job hit by a failure ends failed, the others finish.
  o.restart = {-1, absl::ZeroDuration()};
  o.requeue = {0, absl::ZeroDuration()};
  o.max_node_loss_requeues = 5;
  auto none = RunSimulation(c, jobs, o);
  ASSERT_TRUE(none.ok());
  EXPECT_GT(none->failed, 0);
  EXPECT_EQ(none->restarts, 0);
  EXPECT_EQ(none->finished + none->failed, 8);
  // A backoff keeps requeued jobs out of the queue for a while: they finish
  // later, but all of them finish.
  o.requeue = {-1, absl::Hours(2)};
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

TEST(Simulator, NodeLossesCountAsFailuresAfterFiveRequeues) {
  // One node failing every ~1000 s under a job that needs 10^5 s: five
  // losses are requeues, the sixth is the job's failure, and without
  // restarts it ends there (the server's cap, `kMaxNodeLossRequeues`).
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto jobs = Jobs(c, "job_id,submit_time,duration,num_gpus\na,0,100000,8\n");
  SimOptions o;
  o.fail_mtbf_s = 1000;
  o.repair_s = 10;
  o.restart = {0, absl::ZeroDuration()};
  auto r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->failed, 1);
  EXPECT_EQ(r->restarts, 5);
  EXPECT_EQ(r->node_failures, 6);
}

TEST(Simulator, Llama3FailureModelRate) {
  absl::StatusOr<FailureModel> m = FindFailureModel("llama3");
  ASSERT_TRUE(m.ok());
  // One interruption per ~3.1 hours across 16,384 GPUs.
  EXPECT_NEAR(m->gpu_mtbf_s / 16384 / 3600, 54.0 * 24 / 419, 1e-9);
  EXPECT_FALSE(FindFailureModel("weibull").ok());
  // 2,048 nodes of 8 GPUs over ~54 days: about 419 node failures.
  Cluster c = MakeCluster({{2048, 0}}, 16, 8);
  auto jobs = Jobs(c, "job_id,submit_time,duration,num_gpus\na,0,4665600,1\n");
  SimOptions o;
  o.fail_mtbf_s = m->gpu_mtbf_s;
  o.fail_mtbf_per_gpu = true;
  o.repair_s = m->repair_s;
  o.restart_cost_s = m->restart_cost_s;
  o.checkpoint_interval_s = 1800;
  o.seed = 11;
  auto r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->finished, 1);
  const double expected = r->makespan_s * 2048 * 8 / m->gpu_mtbf_s;
  EXPECT_NEAR(r->node_failures / expected, 1.0, 0.15)
      << r->node_failures << " failures, expected " << expected;
}

// Ten nodes on one leaf: a gang of 6 beside long spot jobs that fill the
// rest. Without spares a gang that loses a node waits for a spot job to end
// or the node to come back; with spares it restarts at once on a spare.
absl::StatusOr<SimResult> GangBesideSpotJobs(int spares) {
  Cluster c = MakeCluster({{10, 0}}, 10, 1);
  std::string csv = "job_id,submit_time,duration,num_gpus\n";
  for (int i = 0; i < 30; ++i) {
    csv += "spot" + std::to_string(i) + "," + std::to_string(i) + ",72000,8\n";
  }
  Workload w;
  w.jobs = Jobs(c, csv);
  EXPECT_TRUE(AddGang({6, 200, spares}, c, &w).ok());
  SimOptions o;
  o.fail_mtbf_s = 200 * 3600;
  o.repair_s = 4 * 3600;
  o.checkpoint_interval_s = 1800;
  o.restart_cost_s = 300;
  o.seed = 5;
  return RunSimulation(c, w.jobs, o);
}

TEST(Simulator, HotSparesCutTheGangsRestartWait) {
  auto without = GangBesideSpotJobs(0);
  auto with = GangBesideSpotJobs(2);
  ASSERT_TRUE(without.ok() && with.ok());
  ASSERT_EQ(without->gangs.size(), 1u);
  ASSERT_EQ(with->gangs.size(), 1u);
  const GangResult& a = without->gangs[0];
  const GangResult& b = with->gangs[0];
  EXPECT_TRUE(a.finished && b.finished);
  EXPECT_EQ(without->unfinished + with->unfinished, 0);
  ASSERT_GT(a.interruptions, 0);
  ASSERT_GT(b.interruptions, 0);
  EXPECT_EQ(a.recovered_on_spares, 0);
  EXPECT_GT(a.restart_wait_mean_s, 0);
  EXPECT_GT(a.waiting, 0);
  // Every interruption restarted at once on spares (or survivors held
  // while the spot jobs there were killed).
  EXPECT_EQ(b.recovered_on_spares, b.interruptions);
  EXPECT_DOUBLE_EQ(b.restart_wait_mean_s, 0);
  EXPECT_DOUBLE_EQ(b.waiting, 0);
  EXPECT_GT(b.effective, a.effective);
  EXPECT_LT(b.jct_s, a.jct_s);
  // The spot jobs on reclaimed spares were killed, losing work.
  EXPECT_GT(with->spare_reclaims, 0);
  EXPECT_EQ(without->spare_reclaims, 0);
  // The time accounting adds up.
  EXPECT_NEAR(b.effective + b.redone + b.restoring + b.waiting, 1.0, 1e-9);
  EXPECT_NEAR(a.effective + a.redone + a.restoring + a.waiting, 1.0, 1e-9);
}

TEST(Simulator, RecoveryAfterABackoffResubmitsWithTheNodesItHeld) {
  // With a requeue backoff the job leaves the scheduler and comes back
  // with `last_nodes` and `spare_nodes` (the server's path): it still
  // restarts on its spares.
  Cluster c = MakeCluster({{10, 0}}, 10, 1);
  Workload w;
  w.jobs = Jobs(c, "job_id,submit_time,duration,num_gpus\nspot,0,720000,8\n");
  ASSERT_TRUE(AddGang({6, 200, 2}, c, &w).ok());
  SimOptions o;
  o.fail_mtbf_s = 200 * 3600;
  o.repair_s = 4 * 3600;
  o.checkpoint_interval_s = 1800;
  o.requeue = {-1, absl::Seconds(10)};
  o.seed = 5;
  auto r = RunSimulation(c, w.jobs, o);
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->gangs.size(), 1u);
  const GangResult& g = r->gangs[0];
  ASSERT_GT(g.interruptions, 0);
  EXPECT_TRUE(g.finished);
  EXPECT_EQ(g.recovered_on_spares, g.interruptions);
  // Each requeue waits out its backoff (after five node losses, a loss is
  // the job's failure, restarted without one).
  EXPECT_DOUBLE_EQ(g.restart_wait_max_s, 10);
  EXPECT_GT(g.restart_wait_mean_s, 0);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// A MIG job that needs its GPU partitioned anew starts after the
// repartition delay (SimOptions::mig_repartition_s); one that finds a free
// instance does not.
TEST(Simulator, AMigRepartitionDelaysItsJob) {
  Cluster c = testing::MakeCluster({{1, 0}}, 2, 8);
  c.pools[0].gpu_memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
  c.pools[0].mig.gpus = 1;
  c.pools[0].mig.dynamic = true;
  for (int i = 0; i < 7; ++i) c.pools[0].mig.layout.push_back({0, i});
  std::vector<SimJob> jobs(2);
  for (int i = 0; i < 2; ++i) {
    jobs[i].request = testing::MakeJob(i + 1, 1, 1);
    jobs[i].submit_s = 0;
    jobs[i].duration_s = 100;
  }
  jobs[0].request.shape.slice.mig = "1g.18gb";  // declared: no change
  jobs[1].request.shape.slice.mig = "2g.35gb";  // a whole GPU turned MIG
  SimOptions o;
  o.policy = "fifo";
  o.mig_repartition_s = 20;
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->finished, 2);
  EXPECT_EQ(r->mig_repartitions, 1);
  EXPECT_DOUBLE_EQ(r->makespan_s, 120);
  EXPECT_DOUBLE_EQ(r->jct_mean_s, (100 + 120) / 2.0);
}

}  // namespace
}  // namespace loom
