// Goodput (docs/accounting.md "Goodput"): a run that fails loses its work
// after its last checkpoint; a run that succeeds, or that its user
// cancels, keeps it. Per job in the API, per project and user in the usage
// ledger, `GET /v1/usage` and /metrics.

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::EmulatedNode;
using testing::MakeCluster;
using testing::Spec;
using testing::T;

class GoodputTest : public ::testing::Test {
 protected:
  GoodputTest() : cluster_(MakeCluster({{2, 0}}, 4, 8)) {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    EXPECT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    for (int n = 0; n < 2; ++n) {
      EXPECT_TRUE(c_->Register(EmulatedNode(
                                   "h200-" + std::to_string(n),
                                   "127.0.0." + std::to_string(n + 2) + ":7100",
                                   nlohmann::json::array()),
                               T(0))
                      .ok());
    }
  }
  // Starts what the pass places at `t`; returns its launch.
  AgentAction StartOne(double t) {
    c_->Tick(T(t));
    std::vector<AgentAction> launches;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind == AgentAction::Kind::kLaunch) launches.push_back(a);
    }
    EXPECT_EQ(launches.size(), 1u);
    if (launches.empty()) return {};
    c_->ActionDone(launches[0], absl::OkStatus(), T(t));
    Report(launches[0], "running", 0, t);
    return launches[0];
  }
  void Report(const AgentAction& a, const std::string& state, int code,
              double t) {
    nlohmann::json task = {{"task_id", a.task_id}, {"state", state}};
    if (state == "exited") task["exit_code"] = code;
    EXPECT_TRUE(
        c_->Heartbeat({{"name", a.node}, {"tasks", {task}}}, T(t)).ok());
  }
  nlohmann::json Job(JobId id, double t) { return *c_->GetJob(id, T(t)); }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(GoodputTest, AFailedRunLosesItsWorkAfterTheLastCheckpoint) {
  ASSERT_TRUE(c_->Submit(Spec("name: train\ncommand: [python3, t.py]\n"
                              "resources: {gpus_per_task: 8}\n"
                              "restart: {max: 1, backoff: 0s}\n"),
                         "alice", T(1))
                  .ok());
  AgentAction run0 = StartOne(1);
  ASSERT_TRUE(c_->Checkpoint(1, 100, T(11)).ok());
  // Still running: nothing is lost yet.
  nlohmann::json job = Job(1, 16);
  EXPECT_DOUBLE_EQ(job["goodput"]["gpu_seconds"].get<double>(), 8 * 15);
  EXPECT_DOUBLE_EQ(job["goodput"]["ratio"].get<double>(), 1.0);
  // It fails at 21 s: 10 s of 8 GPUs after the checkpoint are lost.
  Report(run0, "exited", 1, 21);
  job = Job(1, 21);
  EXPECT_EQ(job["state"], "pending") << job.dump(1);
  EXPECT_DOUBLE_EQ(job["goodput"]["gpu_seconds"].get<double>(), 160);
  EXPECT_DOUBLE_EQ(job["goodput"]["lost_gpu_seconds"].get<double>(), 80);
  EXPECT_DOUBLE_EQ(job["goodput"]["ratio"].get<double>(), 0.5);
  // The next run succeeds: it keeps all of its work, without checkpoint.
  AgentAction run1 = StartOne(21);
  Report(run1, "exited", 0, 61);
  job = Job(1, 61);
  EXPECT_EQ(job["state"], "succeeded") << job.dump(1);
  EXPECT_DOUBLE_EQ(job["goodput"]["gpu_seconds"].get<double>(), 160 + 320);
  EXPECT_DOUBLE_EQ(job["goodput"]["lost_gpu_seconds"].get<double>(), 80);
  EXPECT_DOUBLE_EQ(job["goodput"]["ratio"].get<double>(), 1 - 80.0 / 480);
  // Kept across a restart of the server (in the record).
  auto c2 = Controller::Create(cluster_, &store_, ControllerOptions{}, T(62));
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ((*(*c2)->GetJob(1, T(62)))["goodput"], job["goodput"]);
  // In the ledger (written with the run's end), the report and /metrics.
  UsageGrouping g;
  g.project = true;
  absl::StatusOr<nlohmann::json> usage =
      (*c2)->ReportUsage(g, T(0), T(3600), T(62));
  ASSERT_TRUE(usage.ok()) << usage.status();
  EXPECT_DOUBLE_EQ((*usage)["total_lost_gpu_seconds"].get<double>(), 80)
      << usage->dump(1);
  EXPECT_DOUBLE_EQ((*usage)["rows"][0]["goodput"].get<double>(),
                   1 - 80.0 / 480);
  std::string text;
  MetricsWriter m(&text);
  (*c2)->WriteMetrics(m, T(62));
  EXPECT_NE(text.find("loom_lost_gpu_seconds_total{project=\"default\","
                      "user=\"alice\"} 80\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("loom_goodput_ratio{project=\"default\"} 0.8333"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("loom_cluster_goodput_ratio 0.8333"), std::string::npos);
}

TEST_F(GoodputTest, ACancelledRunKeepsItsWork) {
  ASSERT_TRUE(c_->Submit(Spec("name: eval\ncommand: [sleep, inf]\n"
                              "resources: {gpus_per_task: 8}\n"),
                         "bob", T(1))
                  .ok());
  AgentAction run = StartOne(1);
  ASSERT_TRUE(c_->Cancel(1, T(11)).ok());
  Report(run, "exited", 143, 12);
  nlohmann::json job = Job(1, 12);
  EXPECT_EQ(job["state"], "cancelled") << job.dump(1);
  EXPECT_DOUBLE_EQ(job["goodput"]["gpu_seconds"].get<double>(), 88);
  EXPECT_DOUBLE_EQ(job["goodput"]["lost_gpu_seconds"].get<double>(), 0);
}

TEST_F(GoodputTest, ARunWithoutCheckpointLosesAllOfIt) {
  ASSERT_TRUE(c_->Submit(Spec("name: nock\ncommand: [x]\n"
                              "resources: {gpus_per_task: 4}\n"),
                         "bob", T(1))
                  .ok());
  AgentAction run = StartOne(1);
  Report(run, "exited", 2, 6);
  nlohmann::json job = Job(1, 6);
  EXPECT_EQ(job["state"], "failed") << job.dump(1);
  EXPECT_DOUBLE_EQ(job["goodput"]["lost_gpu_seconds"].get<double>(), 20);
  EXPECT_DOUBLE_EQ(job["goodput"]["ratio"].get<double>(), 0);
}

}  // namespace
}  // namespace loom
