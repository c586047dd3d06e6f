// Detection and recovery (controller_liveness.cc, docs/fault-tolerance.md):
// a gang whose task failed while a node of it went silent loses that node's
// tasks at once and is requeued (not the job's failure); a peer that
// answers leaves the failure the job's own; suspect nodes are probed but go
// down only at the timeout; a recovery's phases are recorded.

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

class LivenessTest : public ::testing::Test {
 protected:
  LivenessTest() : cluster_(MakeCluster({{3, 0}}, 4, 8)) {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    EXPECT_TRUE(c.ok()) << c.status();
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
  nlohmann::json Beat(int n, nlohmann::json tasks, double t) {
    auto r =
        c_->Heartbeat({{"name", Node(n)}, {"tasks", std::move(tasks)}}, T(t));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nlohmann::json();
  }
  nlohmann::json Job(JobId id, double t) { return *c_->GetJob(id, T(t)); }
  std::vector<AgentAction> Take(AgentAction::Kind kind) {
    std::vector<AgentAction> all = c_->TakeActions(), out;
    for (AgentAction& a : all) {
      if (a.kind == kind) out.push_back(std::move(a));
    }
    return out;
  }

  // A two-node gang of 16 GPUs running on two of the three nodes (all
  // registered at 1 s, heard at 2 s): its launches, task 0 first.
  std::vector<AgentAction> StartGang() {
    for (int n = 0; n < 3; ++n) Register(n, 1);
    EXPECT_TRUE(c_->Submit(Spec("name: ddp\ncommand: [python3, train.py]\n"
                                "resources: {gpus: 16, nodes: 2}\n"),
                           "alice", T(1))
                    .ok());
    c_->Tick(T(1));
    std::vector<AgentAction> launches = Take(AgentAction::Kind::kLaunch);
    EXPECT_EQ(launches.size(), 2u);
    std::sort(launches.begin(), launches.end(),
              [](const AgentAction& a, const AgentAction& b) {
                return a.task_id < b.task_id;
              });
    for (const AgentAction& a : launches) {
      c_->ActionDone(a, absl::OkStatus(), T(1.5));
    }
    for (int n = 0; n < 3; ++n) {
      nlohmann::json tasks = nlohmann::json::array();
      for (const AgentAction& a : launches) {
        if (a.node == Node(n)) {
          tasks.push_back({{"task_id", a.task_id}, {"state", "running"}});
        }
      }
      Beat(n, tasks, 2);
    }
    EXPECT_EQ(Job(1, 2)["state"], "running");
    return launches;
  }
  // Task 0 (on `launches[0].node`) exits with 1 at `t`.
  void FailTaskZero(const std::vector<AgentAction>& launches, double t) {
    const int n = launches[0].node.back() - '0';
    Beat(n,
         {{{"task_id", launches[0].task_id},
           {"state", "exited"},
           {"exit_code", 1}}},
         t);
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(LivenessTest, GangFailureWithARefusedPeerIsANodeLoss) {
  std::vector<AgentAction> launches = StartGang();
  FailTaskZero(launches, 2.2);
  // The run stops, and the peer's node is asked whether its agent lives.
  std::vector<AgentAction> actions = c_->TakeActions();
  auto probe = std::find_if(actions.begin(), actions.end(), [&](auto& a) {
    return a.kind == AgentAction::Kind::kProbe && a.node == launches[1].node;
  });
  ASSERT_NE(probe, actions.end());
  EXPECT_EQ(Job(1, 2.2)["state"], "stopping");
  // Refused: no agent there. Task 1 is lost with its node at once, and the
  // run is a node loss: requeued, no restart used (it has none).
  c_->ActionDone(*probe, absl::UnavailableError("connection refused"), T(2.3));
  nlohmann::json job = Job(1, 2.3);
  EXPECT_EQ(job["state"], "pending") << job.dump(1);
  EXPECT_EQ(job["node_losses"], 1);
  EXPECT_EQ(job["restarts_used"], 0);
  EXPECT_NE(job["recovery"]["cause"].get<std::string>().find(
                "task 0 exited with code 1 before, in its collective with it"),
            std::string::npos)
      << job["recovery"];
  EXPECT_NE(job.dump().find("requeued: task 1 was lost with its node"),
            std::string::npos)
      << job.dump(1);
  // The node is suspect (no new work) but not down: that waits for the
  // timeout, so that an agent restarting under its tasks keeps them.
  EXPECT_EQ((*c_->GetNode(launches[1].node, T(2.3)))["state"], "suspect");
  // The recovery so far: lost at the node's last heartbeat (2 s), known at
  // the failure's report, the gang stopped at the refusal.
  const nlohmann::json& r = job["recovery"];
  ASSERT_TRUE(r.is_object()) << job.dump(1);
  EXPECT_EQ(r["run"], 0);
  EXPECT_NEAR(r["phases"]["detection"].get<double>(), 0.2, 1e-6);
  EXPECT_NEAR(r["phases"]["gang_stop"].get<double>(), 0.1, 1e-6);
  EXPECT_TRUE(r["phases"]["placement"].is_null());

  // Queued with no backoff: the next pass places it on the two live nodes
  // (the silent one is suspect), and it recovers phase by phase.
  c_->Tick(T(2.4));
  std::vector<AgentAction> again = Take(AgentAction::Kind::kLaunch);
  ASSERT_EQ(again.size(), 2u);
  for (const AgentAction& a : again) {
    EXPECT_NE(a.node, launches[1].node);
    c_->ActionDone(a, absl::OkStatus(), T(2.6));
  }
  job = Job(1, 2.6);
  EXPECT_EQ(job["state"], "running");
  EXPECT_TRUE(job["recovery"]["phases"]["first_progress"].is_null());
  // Its first output (a heartbeat says so) is its first progress.
  const int n = again[0].node.back() - '0';
  Beat(
      n,
      {{{"task_id", again[0].task_id}, {"state", "running"}, {"output", true}}},
      3.5);
  job = Job(1, 3.5);
  const nlohmann::json& p = job["recovery"]["phases"];
  EXPECT_NEAR(p["placement"].get<double>(), 0.1, 1e-6);
  EXPECT_NEAR(p["launch"].get<double>(), 0.2, 1e-6);
  EXPECT_NEAR(p["first_progress"].get<double>(), 0.9, 1e-6);
  EXPECT_NEAR(job["recovery"]["total_s"].get<double>(), 1.5, 1e-6);
  // Kept across a restart of the server (it is in the record).
  auto c2 = Controller::Create(cluster_, &store_, ControllerOptions{}, T(4));
  ASSERT_TRUE(c2.ok()) << c2.status();
  EXPECT_EQ((*(*c2)->GetJob(1, T(4)))["recovery"], job["recovery"]);
  // The phases are in /metrics.
  std::string text;
  MetricsWriter m(&text);
  c_->WriteMetrics(m, T(4));
  EXPECT_NE(text.find("loom_recovery_phase_seconds_count{phase=\"launch\"} 1"),
            std::string::npos)
      << text;
}

TEST_F(LivenessTest, GangFailureWithALivePeerIsTheJobsOwn) {
  std::vector<AgentAction> launches = StartGang();
  FailTaskZero(launches, 2.2);
  std::vector<AgentAction> probes = Take(AgentAction::Kind::kProbe);
  ASSERT_EQ(probes.size(), 1u);
  c_->ActionDone(probes[0], absl::OkStatus(), T(2.3));  // it answers
  // Well past two heartbeat intervals its task is still not presumed lost
  // (its agent answered): it ends as stopped, and the run is the job's
  // failure (no restart policy: failed).
  c_->Tick(T(5));
  EXPECT_EQ(Job(1, 5)["state"], "stopping");
  const int n = launches[1].node.back() - '0';
  Beat(n,
       {{{"task_id", launches[1].task_id},
         {"state", "exited"},
         {"exit_code", 143},
         {"signal", 15}}},
       5.1);
  nlohmann::json job = Job(1, 5.1);
  EXPECT_EQ(job["state"], "failed") << job.dump(1);
  EXPECT_EQ(job["node_losses"], 0);
  EXPECT_TRUE(job["recovery"].is_null());  // no run follows
}

TEST_F(LivenessTest, GangFailureWithAQuietPeerLosesItAfterTwoIntervals) {
  std::vector<AgentAction> launches = StartGang();
  FailTaskZero(launches, 2.2);
  std::vector<AgentAction> probes = Take(AgentAction::Kind::kProbe);
  ASSERT_EQ(probes.size(), 1u);
  // No answer (a host powered off): once two heartbeat intervals (1 s
  // each) have passed since the failure without a word from it, its task
  // is lost with it.
  c_->ActionDone(probes[0], absl::DeadlineExceededError("no answer"), T(3.2));
  c_->Tick(T(3.5));
  EXPECT_EQ(Job(1, 3.5)["state"], "stopping");
  c_->Tick(T(4.3));
  // Lost, requeued and, in the same pass, placed on the two live nodes.
  nlohmann::json job = Job(1, 4.3);
  EXPECT_EQ(job["state"], "running") << job.dump(1);
  EXPECT_EQ(job["restart_count"], 1);
  EXPECT_EQ(job["node_losses"], 1);
  EXPECT_EQ(job["restarts_used"], 0);
}

TEST_F(LivenessTest, SuspectNodesAreProbedButDownOnlyAtTheTimeout) {
  Register(0, 1);
  c_->Tick(T(4.5));  // silent 3.5 s: suspect, and probed
  std::vector<AgentAction> probes = Take(AgentAction::Kind::kProbe);
  ASSERT_EQ(probes.size(), 1u);
  EXPECT_EQ(probes[0].address, "127.0.0.2:7100");
  c_->ActionDone(probes[0], absl::UnavailableError("refused"), T(4.6));
  EXPECT_EQ((*c_->GetNode(Node(0), T(5)))["state"], "suspect");
  c_->Tick(T(5));  // one probe a second at most
  EXPECT_TRUE(Take(AgentAction::Kind::kProbe).empty());
  c_->Tick(T(6));
  probes = Take(AgentAction::Kind::kProbe);
  ASSERT_EQ(probes.size(), 1u);
  c_->ActionDone(probes[0], absl::UnavailableError("refused"), T(6.1));
  c_->Tick(T(12));
  nlohmann::json node = *c_->GetNode(Node(0), T(12));
  EXPECT_EQ(node["state"], "down");
  EXPECT_NE(node["reason"].get<std::string>().find("refused a connection"),
            std::string::npos)
      << node["reason"];
  // A heartbeat in time clears the suspicion.
  Register(1, 20);
  c_->Tick(T(23.5));
  EXPECT_EQ((*c_->GetNode(Node(1), T(23.5)))["state"], "suspect");
  Beat(1, nlohmann::json::array(), 23.6);
  EXPECT_EQ((*c_->GetNode(Node(1), T(23.6)))["state"], "up");
}

}  // namespace
}  // namespace loom
