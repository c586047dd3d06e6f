// Tasks on parts of GPUs through the controller (task_slice.h,
// docs/scheduling.md "GPU partitions"): MIG instances and shares in the
// launches, the stored records and a restarted server.

#include <set>

#include "gmock/gmock.h"
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

class SlicesTest : public ::testing::Test {
 protected:
  SlicesTest() : cluster_(MakeCluster({{1, 0}}, 2, 8)) {
    PoolSpec& pool = cluster_.pools[0];
    pool.gpu_memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
    pool.mig.gpus = 1;
    for (int i = 0; i < 7; ++i) pool.mig.layout.push_back({0, i});
    Start(T(0), nlohmann::json::array());
  }
  void Start(absl::Time now, nlohmann::json tasks) {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, now);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    ASSERT_TRUE(
        c_->Register(EmulatedNode("h200-0", "127.0.0.2:7100", tasks), now)
            .ok());
  }
  std::vector<AgentAction> Launches(double t) {
    c_->Tick(T(t));
    std::vector<AgentAction> out;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind != AgentAction::Kind::kLaunch) continue;
      c_->ActionDone(a, absl::OkStatus(), T(t));
      out.push_back(std::move(a));
    }
    return out;
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(SlicesTest, SevenInstancesAndAWholeGpuJobLaunchOnOneNode) {
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(c_->Submit(Spec("name: eval\ncommand: [x]\n"
                                "resources: {mig: 1g.18gb}\n"),
                           "alice", T(1))
                    .ok());
  }
  ASSERT_TRUE(
      c_->Submit(Spec("name: train\ncommand: [x]\nresources: {gpus: 7}\n"),
                 "alice", T(1))
          .ok());
  std::vector<AgentAction> launches = Launches(2);
  ASSERT_EQ(launches.size(), 8u);
  std::set<int> starts;
  nlohmann::json running = nlohmann::json::array();
  for (const AgentAction& a : launches) {
    running.push_back({{"task_id", a.task_id}, {"state", "running"}});
    if (!a.body.contains("slice")) {
      EXPECT_EQ(a.body["gpus"], nlohmann::json({1, 2, 3, 4, 5, 6, 7}));
      EXPECT_EQ(a.body["env"]["CUDA_VISIBLE_DEVICES"], "1,2,3,4,5,6,7");
      continue;
    }
    const nlohmann::json& s = a.body["slice"];
    EXPECT_EQ(a.body["gpus"], nlohmann::json::array({0}));
    EXPECT_EQ(s["mig"], "1g.18gb");
    EXPECT_EQ(s["layout"].size(), 7u);
    // Only the agent knows the instance's UUID.
    EXPECT_FALSE(a.body["env"].contains("CUDA_VISIBLE_DEVICES"));
    starts.insert(s["start"].get<int>());
  }
  EXPECT_EQ(starts.size(), 7u);
  ASSERT_TRUE(
      c_->Heartbeat({{"name", "h200-0"}, {"tasks", running}}, T(3)).ok());

  // The show of a slice task names its instance.
  nlohmann::json job = *c_->GetJob(launches[0].job, T(3));
  ASSERT_EQ(job["placement"]["tasks"].size(), 1u) << job.dump();
  EXPECT_EQ(job["placement"]["tasks"][0]["slice"]["mig"], "1g.18gb")
      << job.dump();

  // GET /v1/nodes and /metrics show the instances and who holds them.
  nlohmann::json node = c_->ListNodes(T(3))["nodes"][0];
  ASSERT_EQ(node["gpu_parts"].size(), 1u) << node.dump();
  EXPECT_EQ(node["gpu_parts"][0]["mode"], "mig");
  int held = 0;
  for (const nlohmann::json& i : node["gpu_parts"][0]["instances"]) {
    held += i["job"].get<JobId>() != 0 ? 1 : 0;
  }
  EXPECT_EQ(held, 7);
  std::string text;
  MetricsWriter metrics(&text);
  c_->WriteMetrics(metrics, T(3));
  EXPECT_NE(text.find("loom_gpu_slices{node=\"h200-0\",gpu=\"0\","
                      "GPU_I_PROFILE=\"1g.18gb\",state=\"used\"} 7"),
            std::string::npos)
      << text;

  // A restarted server keeps every instance taken: an eighth waits.
  c_.reset();
  Start(T(4), running);
  auto eighth =
      c_->Submit(Spec("name: eval\ncommand: [x]\nresources: {mig: 1g.18gb}\n"),
                 "alice", T(5));
  ASSERT_TRUE(eighth.ok()) << eighth.status();
  EXPECT_TRUE(Launches(6).empty());
  nlohmann::json pending = *c_->GetJob((*eighth)["id"].get<JobId>(), T(6));
  EXPECT_EQ(pending["state"], "pending");
  EXPECT_NE(pending["reason"].get<std::string>().find("1g.18gb MIG instance"),
            std::string::npos)
      << pending["reason"];
}

TEST_F(SlicesTest, SharesAndImpossibleSlicesAreJudgedAtSubmit) {
  auto share = c_->Submit(Spec("name: emb\ncommand: [x]\n"
                               "resources: {gpu_share: {memory: 20Gi}}\n"),
                          "alice", T(1));
  ASSERT_TRUE(share.ok()) << share.status();
  std::vector<AgentAction> launches = Launches(2);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].body["slice"]["share_bytes"], int64_t{20} << 30);
  EXPECT_EQ(launches[0].body["env"]["CUDA_VISIBLE_DEVICES"], "1");
  // More memory than a GPU has: refused naming the field (issue 39,
  // finding 11).
  auto big = c_->Submit(Spec("name: x\ncommand: [x]\n"
                             "resources: {gpu_share: {memory: 200Gi}}\n"),
                        "alice", T(3));
  ASSERT_FALSE(big.ok());
  EXPECT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(big.status().message()),
              ::testing::StartsWith("resources.gpu_share.memory: 200Gi is "
                                    "more than the memory of one GPU that may "
                                    "be shared ("));
  // A profile the cluster lacks: refused.
  for (const char* r : {"{mig: 3g.71gb}", "{mig: 1g.10gb}"}) {
    auto bad = c_->Submit(
        Spec(std::string("name: x\ncommand: [x]\nresources: ") + r + "\n"),
        "alice", T(3));
    ASSERT_FALSE(bad.ok()) << r;
    EXPECT_NE(bad.status().message().find("infeasible"), std::string::npos)
        << bad.status();
  }
}

}  // namespace
}  // namespace loom
