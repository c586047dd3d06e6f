// Rolling maintenance through the controller (controller_maintenance.cc):
// a simulated fleet of agents that run tasks and maintenance commands as
// they are asked, and heartbeat what they run.

#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "loom/common/metrics_text.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::Spec;
using testing::T;

struct FakeAgent {
  std::string driver = "550.54.15";
  std::map<std::string, nlohmann::json> tasks;  // task id -> report
  nlohmann::json command;                       // the last command's report
};

class ControllerMaintenanceTest : public ::testing::Test {
 protected:
  ControllerMaintenanceTest() : cluster_(MakeCluster({{4, 0}}, 2, 2)) {
    cluster_.pools[0].stack = {{"driver", "550.54.15"}};
    Make();
    for (int n = 0; n < 4; ++n) Register(n);
  }
  void Make() {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(t_));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  static std::string Name(int n) { return "h200-" + std::to_string(n); }
  nlohmann::json Body(int n) {
    FakeAgent& a = agents_[n];
    nlohmann::json tasks = nlohmann::json::array();
    for (const auto& [id, t] : a.tasks) tasks.push_back(t);
    nlohmann::json body = {
        {"name", Name(n)}, {"stack", {{"driver", a.driver}}}, {"tasks", tasks}};
    if (!a.command.is_null()) body["maintenance"] = a.command;
    return body;
  }
  void Register(int n) {
    nlohmann::json body = testing::EmulatedNode(
        Name(n), "127.0.0." + std::to_string(n + 2) + ":7100");
    body.update(Body(n));
    ASSERT_TRUE(c_->Register(body, T(t_)).ok());
  }
  // One second of the world: heartbeats, a tick, the agents do what they
  // were asked.
  void Step() {
    t_ += 1;
    for (int n = 0; n < 4; ++n) {
      auto r = c_->Heartbeat(Body(n), T(t_));
      ASSERT_TRUE(r.ok()) << r.status();
      // Ended tasks that were acknowledged are forgotten.
      if (r->contains("ack")) {
        for (const auto& id : (*r)["ack"])
          agents_[n].tasks.erase(id.get<std::string>());
      }
    }
    c_->Tick(T(t_));
    for (const AgentAction& a : c_->TakeActions()) {
      const int n = std::stoi(a.node.substr(5));
      switch (a.kind) {
        case AgentAction::Kind::kLaunch:
          agents_[n].tasks[a.task_id] = {{"task_id", a.task_id},
                                         {"state", "running"}};
          c_->ActionDone(a, absl::OkStatus(), T(t_));
          break;
        case AgentAction::Kind::kStop:
          agents_[n].tasks[a.task_id] = {
              {"task_id", a.task_id}, {"state", "exited"}, {"signal", 10}};
          c_->ActionDone(a, absl::OkStatus(), T(t_));
          break;
        case AgentAction::Kind::kMaintain:
          commands_.push_back(a);
          agents_[n].driver = "560.35.03";
          agents_[n].command = {{"id", a.task_id},
                                {"state", "exited"},
                                {"exit_code", exit_code_},
                                {"output", "upgraded\n"}};
          c_->ActionDone(a, absl::OkStatus(), T(t_));
          break;
        default:
          break;
      }
    }
    nlohmann::json nodes = c_->ListNodes(T(t_))["nodes"];
    int out = 0;
    for (const auto& node : nodes) out += node["state"] != "up";
    max_out_ = std::max(max_out_, out);
  }
  nlohmann::json Run(int64_t id) { return *c_->GetMaintenance(id); }
  nlohmann::json NodeJson(int n) { return *c_->GetNode(Name(n), T(t_)); }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
  double t_ = 0;
  FakeAgent agents_[4];
  std::vector<AgentAction> commands_;
  int exit_code_ = 0;
  int max_out_ = 0;
};

TEST_F(ControllerMaintenanceTest,
       ANewDeclaredStackMakesNodesOutdatedNotDrifted) {
  EXPECT_EQ(NodeJson(0)["state"], "up");
  // The pool's declared stack moves on (a new revision, here a restart
  // with another cluster): the nodes, unchanged, are outdated and work.
  cluster_.pools[0].stack = {{"driver", "560.35.03"}};
  Make();
  for (int n = 0; n < 4; ++n) Register(n);
  nlohmann::json node = NodeJson(0);
  EXPECT_EQ(node["state"], "up") << node.dump();
  EXPECT_EQ(node["outdated"].size(), 1u);
  EXPECT_NE(
      node["reason"].get<std::string>().find("outdated: driver 550.54.15"),
      std::string::npos)
      << node["reason"];
  std::string metrics;
  MetricsWriter w(&metrics);
  c_->WriteMetrics(w, T(t_));
  EXPECT_NE(metrics.find("loom_nodes_outdated 4"), std::string::npos);
  EXPECT_NE(metrics.find("loom_nodes_drifted 0"), std::string::npos);
  ASSERT_TRUE(c_->Submit(Spec("name: a\ncommand: [x]\nresources: {gpus: 8}\n"),
                         "u", T(t_))
                  .ok());
  Step();
  EXPECT_EQ((*c_->GetJob(1, T(t_)))["state"], "running");
  // A node that changes by itself to neither stack is drifted.
  agents_[3].driver = "535.0";
  Step();
  EXPECT_EQ(NodeJson(3)["state"], "drifted");
}

TEST_F(ControllerMaintenanceTest, RollsThePoolTwoAtATimeAndMovesTheGangOff) {
  ASSERT_TRUE(c_->Submit(Spec("name: gang\ncommand: [x]\n"
                              "resources: {gpus: 16, nodes: 2}\n"),
                         "u", T(t_))
                  .ok());
  Step();
  ASSERT_EQ((*c_->GetJob(1, T(t_)))["state"], "running");
  std::set<std::string> first_nodes;
  const nlohmann::json before = *c_->GetJob(1, T(t_));
  for (const auto& t : before["placement"]["tasks"]) {
    first_nodes.insert(t["node"].get<std::string>());
  }
  // The new stack is declared; the nodes are outdated.
  cluster_.pools[0].stack = {{"driver", "560.35.03"}};
  Make();
  for (int n = 0; n < 4; ++n) Register(n);
  auto started = c_->StartMaintenance(
      {{"pool", "h200"}, {"batch", 2}, {"command", "apt-get upgrade"}}, "alice",
      T(t_));
  ASSERT_TRUE(started.ok()) << started.status();
  EXPECT_EQ((*started)["batches_total"], 2);
  // One at a time.
  auto second = c_->StartMaintenance(
      {{"pool", "h200"}, {"batch", 1}, {"command", "x"}}, "alice", T(t_));
  EXPECT_TRUE(absl::IsAborted(second.status())) << second.status();

  for (int i = 0; i < 30 && Run(1)["state"] == "running"; ++i) Step();
  nlohmann::json m = Run(1);
  EXPECT_EQ(m["state"], "done") << m.dump(2);
  EXPECT_LE(max_out_, 2);
  EXPECT_EQ(commands_.size(), 4u);
  for (int n = 0; n < 4; ++n) {
    nlohmann::json node = NodeJson(n);
    EXPECT_EQ(node["state"], "up") << node.dump();
    EXPECT_EQ(node["stack"]["driver"], "560.35.03");
    EXPECT_EQ(node["labels"]["gpu.driver"], "560.35.03");
    EXPECT_TRUE(node["outdated"].empty());
  }
  // The idle nodes went first; the gang moved once, onto upgraded nodes,
  // and runs.
  std::set<std::string> batch1;
  for (const auto& n : m["node_status"]) {
    if (n["batch"] == 1) batch1.insert(n["name"].get<std::string>());
  }
  for (const std::string& n : first_nodes) EXPECT_FALSE(batch1.count(n)) << n;
  nlohmann::json job = *c_->GetJob(1, T(t_));
  EXPECT_EQ(job["state"], "running");
  std::set<std::string> now_on;
  for (const auto& t : job["placement"]["tasks"]) {
    now_on.insert(t["node"].get<std::string>());
  }
  EXPECT_EQ(now_on, batch1);
}

TEST_F(ControllerMaintenanceTest, TheRunSurvivesARestartOfTheServer) {
  cluster_.pools[0].stack = {{"driver", "560.35.03"}};
  Make();
  for (int n = 0; n < 4; ++n) Register(n);
  ASSERT_TRUE(c_->StartMaintenance({{"nodes", {"h200-0", "h200-1", "h200-2"}},
                                    {"batch", 1},
                                    {"command", "upgrade"}},
                                   "alice", T(t_))
                  .ok());
  for (int i = 0; i < 30 && Run(1)["counts"]["done"] < 1; ++i) Step();
  ASSERT_EQ(Run(1)["counts"]["done"], 1);
  // A new controller over the same store, the agents registering again.
  Make();
  for (int n = 0; n < 4; ++n) Register(n);
  EXPECT_EQ(Run(1)["state"], "running");
  for (int i = 0; i < 30 && Run(1)["state"] == "running"; ++i) Step();
  EXPECT_EQ(Run(1)["state"], "done") << Run(1).dump(2);
  EXPECT_EQ(commands_.size(), 3u);
  EXPECT_EQ(agents_[3].driver, "550.54.15");  // not in the run
  EXPECT_EQ(NodeJson(3)["state"], "up");      // outdated, working
}

TEST_F(ControllerMaintenanceTest, AFailedCommandStopsTheRunAndKeepsTheNodeOut) {
  exit_code_ = 3;
  ASSERT_TRUE(c_->StartMaintenance(
                    {{"pool", "h200"}, {"batch", 1}, {"command", "false"}},
                    "alice", T(t_))
                  .ok());
  for (int i = 0; i < 10 && Run(1)["state"] == "running"; ++i) Step();
  nlohmann::json m = Run(1);
  EXPECT_EQ(m["state"], "failed");
  EXPECT_EQ(m["counts"]["failed"], 1);
  EXPECT_EQ(commands_.size(), 1u);
  const std::string failed = commands_[0].node;
  nlohmann::json node = *c_->GetNode(failed, T(t_));
  EXPECT_EQ(node["state"], "drained");
  EXPECT_NE(node["reason"].get<std::string>().find("maintenance 1"),
            std::string::npos);
  // Another run waits for this one to be resumed or aborted.
  EXPECT_TRUE(absl::IsAborted(
      c_->StartMaintenance({{"pool", "h200"}, {"batch", 1}, {"command", "x"}},
                           "alice", T(t_))
          .status()));
  auto aborted = c_->ChangeMaintenance(1, "abort", "bob", T(t_));
  ASSERT_TRUE(aborted.ok()) << aborted.status();
  EXPECT_EQ((*aborted)["state"], "aborted");
  EXPECT_TRUE(absl::IsAborted(
      c_->ChangeMaintenance(1, "resume", "bob", T(t_)).status()));
  EXPECT_TRUE(absl::IsNotFound(
      c_->ChangeMaintenance(9, "pause", "bob", T(t_)).status()));
  EXPECT_TRUE(
      c_->StartMaintenance({{"pool", "h200"}, {"batch", 1}, {"command", "x"}},
                           "alice", T(t_))
          .ok());
  EXPECT_EQ(c_->ListMaintenances()["maintenances"][0]["id"], 2);
}

TEST_F(ControllerMaintenanceTest, BadRequestsCreateNothing) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      c_->StartMaintenance({{"pool", "a100"}, {"batch", 1}, {"command", "x"}},
                           "alice", T(t_))
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      c_->StartMaintenance(
            {{"nodes", {"h200-9"}}, {"batch", 1}, {"command", "x"}}, "alice",
            T(t_))
          .status()));
  EXPECT_TRUE(c_->ListMaintenances()["maintenances"].empty());
  EXPECT_TRUE(store_.List("/maintenance/")->empty());
}

}  // namespace
}  // namespace loom
