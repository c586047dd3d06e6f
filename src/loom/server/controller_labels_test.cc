// Node labels, selectors and drift through the controller
// (controller_labels.cc).

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

class ControllerLabelsTest : public ::testing::Test {
 protected:
  ControllerLabelsTest() : cluster_(MakeCluster({{3, 0}}, 2, 2)) {
    cluster_.pools[0].stack = {{"driver", "550.54.15"}, {"cuda", "12.4"}};
    cluster_.nodes[0].labels = {{"rack", "a"}};
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    EXPECT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  absl::Status Register(int node, const std::string& driver, double t) {
    nlohmann::json body =
        testing::EmulatedNode("h200-" + std::to_string(node),
                              "127.0.0." + std::to_string(node + 2) + ":7100");
    body["labels"] = {{"gpu.model", "h200"},
                      {"gpu.driver", driver},
                      {"gpu.cuda", "12.4"},
                      {"kernel", "6.1.0"},
                      {"rack", "reported"}};
    body["stack"] = {{"driver", driver}, {"cuda", "12.4"}, {"loom", "0.1.0"}};
    return c_->Register(body, T(t)).status();
  }
  nlohmann::json Node(const std::string& name) {
    return *c_->GetNode(name, T(100));
  }
  nlohmann::json Job(JobId id) { return *c_->GetJob(id, T(100)); }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(ControllerLabelsTest, NodesCarryReportedDeclaredAndTopologyLabels) {
  ASSERT_TRUE(Register(0, "550.54.15", 1).ok());
  nlohmann::json n = Node("h200-0");
  EXPECT_EQ(n["state"], "up");
  EXPECT_EQ(n["labels"]["gpu.driver"], "550.54.15");
  EXPECT_EQ(n["labels"]["kernel"], "6.1.0");
  EXPECT_EQ(n["labels"]["pool"], "h200");
  EXPECT_TRUE(n["labels"].contains("leaf"));
  EXPECT_TRUE(n["labels"].contains("spine"));
  // Declared labels win over reported ones.
  EXPECT_EQ(n["labels"]["rack"], "a");
  EXPECT_EQ(n["stack"]["driver"], "550.54.15");
  EXPECT_TRUE(n["drift"].empty());
}

TEST_F(ControllerLabelsTest, SelectorPlacesOnMatchingNodesAndExplainsWaits) {
  ASSERT_TRUE(Register(0, "550.54.15", 1).ok());
  ASSERT_TRUE(Register(1, "550.54.15", 1).ok());
  ASSERT_TRUE(c_->Submit(Spec("name: a\ncommand: [x]\nresources: {gpus: 1}\n"
                              "node_selector: {rack: a}\n"),
                         "u", T(2))
                  .ok());
  ASSERT_TRUE(c_->Submit(Spec("name: b\ncommand: [x]\nresources: {gpus: 1}\n"
                              "node_selector: {gpu.cuda: \"11.8\"}\n"),
                         "u", T(2))
                  .ok());
  c_->Tick(T(3));
  nlohmann::json a = Job(1);
  EXPECT_EQ(a["state"], "running");
  EXPECT_EQ(a["placement"]["tasks"][0]["node"], "h200-0");
  nlohmann::json b = Job(2);
  EXPECT_EQ(b["state"], "pending");
  EXPECT_EQ(b["reason"],
            "no node matches node_selector {gpu.cuda: 11.8} (0 of 3 nodes)");
}

TEST_F(ControllerLabelsTest, NodeWithAnotherDriverIsDriftedAndGetsNoWork) {
  ASSERT_TRUE(Register(1, "535.161.08", 1).ok());
  nlohmann::json n = Node("h200-1");
  EXPECT_EQ(n["state"], "drifted");
  EXPECT_EQ(n["reason"], "drifted: driver 535.161.08 (pool wants 550.54.15)");
  ASSERT_EQ(n["drift"].size(), 1u);
  ASSERT_TRUE(c_->Submit(Spec("name: a\ncommand: [x]\nresources: {gpus: 1}\n"),
                         "u", T(2))
                  .ok());
  c_->Tick(T(3));
  EXPECT_EQ(Job(1)["state"], "pending");
  std::string metrics;
  MetricsWriter w(&metrics);
  c_->WriteMetrics(w, T(3));
  EXPECT_NE(metrics.find("loom_nodes_drifted 1"), std::string::npos);
  EXPECT_NE(metrics.find("loom_nodes{state=\"drifted\"} 1"), std::string::npos);
  // A heartbeat with the pool's stack ends the drift; the job starts there.
  auto beat =
      c_->Heartbeat({{"name", "h200-1"},
                     {"stack", {{"driver", "550.54.15"}, {"cuda", "12.4"}}},
                     {"tasks", nlohmann::json::array()}},
                    T(4));
  ASSERT_TRUE(beat.ok()) << beat.status();
  EXPECT_EQ(Node("h200-1")["state"], "up");
  c_->Tick(T(5));
  EXPECT_EQ(Job(1)["state"], "running");
}

TEST_F(ControllerLabelsTest, MalformedLabelsAndStackAreDropped) {
  nlohmann::json body = testing::EmulatedNode("h200-2", "127.0.0.9:7100");
  body["labels"] = {{"bad key", "x"}, {"ok", 5}, {"fine", "yes"}};
  body["stack"] = nlohmann::json::array({1, 2});
  ASSERT_TRUE(c_->Register(body, T(1)).ok());
  nlohmann::json n = Node("h200-2");
  EXPECT_EQ(n["labels"]["fine"], "yes");
  EXPECT_FALSE(n["labels"].contains("bad key"));
  EXPECT_FALSE(n["labels"].contains("ok"));
  // No stack reported against a pool that declares one: drifted.
  EXPECT_EQ(n["state"], "drifted");
  body["labels"] = "not an object";
  EXPECT_TRUE(c_->Register(body, T(2)).ok());
}

}  // namespace
}  // namespace loom
