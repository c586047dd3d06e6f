// Hot spares on the server (controller_spares.cc, docs/scheduling.md "Hot
// spares"): a job with `spares: 1` holds a spare while it runs; preemptible
// work runs there; when a node of the job is lost, the preemptible job is
// killed without grace and the job restarts on its survivor and the spare,
// also across a restart of the server.

#include <algorithm>
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

class SparesTest : public ::testing::Test {
 protected:
  // Three nodes of 8 GPUs under one leaf: a 2-node gang and one spare.
  SparesTest() : cluster_(MakeCluster({{3, 0}}, 4, 8)) { Start(T(0)); }
  void Start(absl::Time now) {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, now);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  static std::string Node(int n) { return "h200-" + std::to_string(n); }
  void Register(int n, double t,
                nlohmann::json tasks = nlohmann::json::array()) {
    auto r = c_->Register(
        EmulatedNode(Node(n), "127.0.0." + std::to_string(n + 2) + ":7100",
                     std::move(tasks)),
        T(t));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  void Beat(const std::string& node, nlohmann::json tasks, double t) {
    auto r = c_->Heartbeat({{"name", node}, {"tasks", std::move(tasks)}}, T(t));
    EXPECT_TRUE(r.ok()) << r.status();
  }
  nlohmann::json Job(JobId id, double t) { return *c_->GetJob(id, T(t)); }
  std::vector<AgentAction> Take(AgentAction::Kind kind) {
    std::vector<AgentAction> all = c_->TakeActions(), out;
    for (AgentAction& a : all) {
      if (a.kind == kind) out.push_back(std::move(a));
    }
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.task_id < b.task_id;
    });
    return out;
  }
  // Confirms `launches` and reports them running from their nodes at `t`.
  void Run(const std::vector<AgentAction>& launches, double t) {
    for (const AgentAction& a : launches) {
      c_->ActionDone(a, absl::OkStatus(), T(t));
      Beat(a.node, {{{"task_id", a.task_id}, {"state", "running"}}}, t);
    }
  }

  // The gang (job 1, spares: 1) on two nodes and a preemptible job (2) on
  // its spare, all running at 2 s. Returns the gang's launches.
  std::vector<AgentAction> StartBoth() {
    for (int n = 0; n < 3; ++n) Register(n, 1);
    EXPECT_TRUE(c_->Submit(Spec("name: ddp\ncommand: [python3, train.py]\n"
                                "tasks: 2\nspares: 1\n"
                                "resources: {gpus_per_task: 8}\n"),
                           "alice", T(1))
                    .ok());
    c_->Tick(T(1));
    std::vector<AgentAction> gang = Take(AgentAction::Kind::kLaunch);
    EXPECT_EQ(gang.size(), 2u);
    nlohmann::json job = Job(1, 1);
    EXPECT_EQ(job["spare_nodes"].size(), 1u) << job.dump(1);
    spare_ = job["spare_nodes"][0].get<std::string>();
    for (const AgentAction& a : gang) EXPECT_NE(a.node, spare_);
    EXPECT_TRUE(c_->Submit(Spec("name: spot\ncommand: [sleep, inf]\n"
                                "preemptible: true\n"
                                "resources: {gpus_per_task: 8}\n"),
                           "bob", T(1.2))
                    .ok());
    c_->Tick(T(1.2));
    std::vector<AgentAction> spot = Take(AgentAction::Kind::kLaunch);
    EXPECT_EQ(spot.size(), 1u);
    if (spot.size() == 1) {
      EXPECT_EQ(spot[0].node, spare_);  // lent to preemptible work
      spot_ = spot[0];
    }
    Run(gang, 2);
    Run(spot, 2);
    EXPECT_EQ(Job(1, 2)["state"], "running");
    EXPECT_EQ(Job(2, 2)["state"], "running");
    return gang;
  }
  // Task 0 of the gang fails at 2.2 s, and the agent of task 1's node
  // refuses the probe: task 1 is lost with its node, the gang requeued.
  void LoseTaskOnesNode(const std::vector<AgentAction>& gang) {
    Beat(
        gang[0].node,
        {{{"task_id", gang[0].task_id}, {"state", "exited"}, {"exit_code", 1}}},
        2.2);
    std::vector<AgentAction> probes = Take(AgentAction::Kind::kProbe);
    auto probe = std::find_if(probes.begin(), probes.end(),
                              [&](auto& a) { return a.node == gang[1].node; });
    ASSERT_NE(probe, probes.end());
    c_->ActionDone(*probe, absl::UnavailableError("connection refused"),
                   T(2.3));
    nlohmann::json job = Job(1, 2.3);
    EXPECT_EQ(job["state"], "pending") << job.dump(1);
    EXPECT_EQ(job["node_losses"], 1);
  }
  // The next pass kills the preemptible job on the spare at once; once it
  // ended, the gang starts on its survivor and the spare.
  void ExpectRecoveryOnSpare(const std::vector<AgentAction>& gang, double t) {
    c_->Tick(T(t));
    std::vector<AgentAction> stops = Take(AgentAction::Kind::kStop);
    ASSERT_EQ(stops.size(), 1u);
    EXPECT_EQ(stops[0].task_id, spot_.task_id);
    EXPECT_EQ(stops[0].body["signal"], 9);
    EXPECT_EQ(stops[0].body["grace_ms"], 0);
    nlohmann::json spot = Job(2, t);
    EXPECT_EQ(spot["state"], "stopping");
    EXPECT_EQ(spot["preempted_by"], 1);
    EXPECT_NE(spot.dump().find("restarts on its hot spare(s)"),
              std::string::npos)
        << spot.dump(1);
    EXPECT_EQ(Job(1, t)["state"], "pending");
    Beat(spare_,
         {{{"task_id", spot_.task_id}, {"state", "exited"}, {"signal", 9}}},
         t + 0.05);
    EXPECT_EQ(Job(2, t + 0.05)["state"], "pending");  // requeued itself
    c_->Tick(T(t + 0.1));
    std::vector<AgentAction> again = Take(AgentAction::Kind::kLaunch);
    ASSERT_EQ(again.size(), 2u);
    EXPECT_EQ(again[0].node, gang[0].node);  // task 0 stays on its node
    EXPECT_EQ(again[1].node, spare_);        // task 1 on the spare
    nlohmann::json job = Job(1, t + 0.1);
    EXPECT_EQ(job["state"], "running");
    EXPECT_NE(job.dump().find("1 of them on its hot spare(s) " + spare_ +
                              " in place of lost nodes"),
              std::string::npos)
        << job.dump(1);
    // No node is left to be its spare (the third is suspect).
    EXPECT_TRUE(job["spare_nodes"].empty()) << job.dump(1);
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
  std::string spare_;
  AgentAction spot_;
};

TEST_F(SparesTest, LostNodeIsReplacedByTheSpareAndSpotWorkIsKilled) {
  std::vector<AgentAction> gang = StartBoth();
  LoseTaskOnesNode(gang);
  ExpectRecoveryOnSpare(gang, 2.4);
}

TEST_F(SparesTest, RecoveryOnTheSpareSurvivesAServerRestart) {
  std::vector<AgentAction> gang = StartBoth();
  LoseTaskOnesNode(gang);
  // The server restarts before the next pass: the record kept the gang's
  // survivor and spare. The agents come back with what they run.
  Start(T(2.35));
  // Its first pass comes before the agents are back: the gang waits for
  // them (its nodes were not schedulable yet).
  c_->Tick(T(2.35));
  EXPECT_TRUE(Take(AgentAction::Kind::kStop).empty());
  EXPECT_EQ(Job(1, 2.35)["state"], "pending");
  Register(gang[0].node.back() - '0', 2.36);
  Register(spare_.back() - '0', 2.36,
           {{{"task_id", spot_.task_id}, {"state", "running"}}});
  // Task 1's agent never comes back.
  ExpectRecoveryOnSpare(gang, 2.4);
}

TEST_F(SparesTest, ARestoredRecoveryWaitsForItsNodesOnlySoLong) {
  std::vector<AgentAction> gang = StartBoth();
  LoseTaskOnesNode(gang);
  Start(T(2.35));
  Register(gang[0].node.back() - '0', 2.36);
  c_->Tick(T(3));
  EXPECT_EQ(Job(1, 3)["reason"].get<std::string>().find("queued: no restart"),
            std::string::npos);  // still waiting for the spare's agent
  // The spare's agent is not back 3 s (suspect_after) later: the gang is
  // queued as any other job, and waits for nodes.
  c_->Tick(T(5.4));
  nlohmann::json job = Job(1, 5.4);
  EXPECT_EQ(job["state"], "pending");
  EXPECT_NE(job["reason"].get<std::string>().find(
                "queued: no restart on hot spares, 1 of its 2 nodes lost or "
                "unusable, 0 usable hot spare(s)"),
            std::string::npos)
      << job.dump(1);
  EXPECT_TRUE(Take(AgentAction::Kind::kLaunch).empty());
}

TEST_F(SparesTest, SparesNeedWholeNodeTasksAndNothingIsWrittenOtherwise) {
  absl::StatusOr<nlohmann::json> r =
      c_->Submit(Spec("name: small\ncommand: [x]\nspares: 1\n"
                      "resources: {gpus_per_task: 4}\n"),
                 "alice", T(1));
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("spares: only for jobs whose tasks "
                                      "take whole nodes"),
            std::string::npos)
      << r.status();
  EXPECT_TRUE(absl::IsNotFound(c_->GetJob(1, T(1)).status()));
  EXPECT_TRUE(c_->ListJobs(JobQuery{}, T(1))["jobs"].empty())
      << c_->ListJobs(JobQuery{}, T(1)).dump();
}

}  // namespace
}  // namespace loom
