// The NIC launch step (nic_step.h): `NCCL_IB_HCA` of a task from the NICs
// paired with its GPUs, the job's own value kept, none without GPUs or NICs,
// and the RDMA devices a container task gets (with the image step).

#include "loom/agent/nic_step.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/image_step.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/node_table.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

// The env of each process of `r` on `node` after the default steps.
std::vector<std::map<std::string, std::string>> EnvAfterNicSteps(
    const AgentNode& node, const LaunchRequest& r, const AgentLog& log,
    std::vector<std::string>* nic_devices = nullptr) {
  const LaunchSteps steps = DefaultLaunchSteps({});
  LaunchContext ctx{node, r, log, std::nullopt, ""};
  std::string field;
  for (const auto& step : steps) {
    absl::Status s = step->Prepare(ctx, &field);
    EXPECT_TRUE(s.ok()) << s;
  }
  if (nic_devices != nullptr) *nic_devices = ctx.nic_devices;
  std::vector<std::map<std::string, std::string>> envs;
  for (int k = 0; k < r.processes; ++k) {
    TaskProcess p;
    p.launcher_id = absl::StrCat(r.task_id, ".p", k);
    TaskSpec spec;
    spec.task_id = p.launcher_id;
    spec.argv = r.argv;
    spec.env = r.env;
    for (const auto& step : steps) step->Apply(ctx, p, k, spec);
    envs.push_back(spec.env);
  }
  return envs;
}

LaunchRequest NicTaskRequest(std::vector<int> gpus) {
  LaunchRequest r;
  r.task_id = "42.0.1";
  r.job_id = 42;
  r.argv = {"python3", "train.py"};
  r.gpus = std::move(gpus);
  r.processes = 2;
  return r;
}

class NicStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"h200-0"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
  }
  // An emulated HGX H200 node: GPU i beside mlx5_i.
  const AgentNode& node() const { return *nodes_->nodes().front(); }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
};

TEST_F(NicStepTest, ATwoGpuTaskGetsTheNicsBesideItsGpusInGpuOrder) {
  for (const auto& env :
       EnvAfterNicSteps(node(), NicTaskRequest({2, 3}), log_.log())) {
    EXPECT_EQ(env.at("NCCL_IB_HCA"), "=mlx5_2,mlx5_3");
  }
  EXPECT_EQ(EnvAfterNicSteps(node(), NicTaskRequest({5, 1}), log_.log())[1].at(
                "NCCL_IB_HCA"),
            "=mlx5_5,mlx5_1");
}

TEST_F(NicStepTest, TheJobsOwnValueWins) {
  LaunchRequest r = NicTaskRequest({0, 1});
  r.env["NCCL_IB_HCA"] = "mlx5_7:1";
  std::vector<std::string> devices;
  for (const auto& env : EnvAfterNicSteps(node(), r, log_.log(), &devices)) {
    EXPECT_EQ(env.at("NCCL_IB_HCA"), "mlx5_7:1");
  }
  // The job chose: its container gets every NIC of the node.
  EXPECT_EQ(devices.size(), 9u);
  EXPECT_EQ(devices.back(), "infiniband/rdma_cm");
}

TEST_F(NicStepTest, NoGpusOrNoNicsNoVariable) {
  EXPECT_FALSE(
      EnvAfterNicSteps(node(), NicTaskRequest({}), log_.log())[0].contains(
          "NCCL_IB_HCA"));
  AgentNode bare;
  bare.name = "l40s-0";
  bare.root = dir_.path();
  bare.gpus.resize(2);
  bare.gpus[1].index = 1;
  std::vector<std::string> devices = {"stale"};
  EXPECT_FALSE(
      EnvAfterNicSteps(bare, NicTaskRequest({0, 1}), log_.log(), &devices)[0]
          .contains("NCCL_IB_HCA"));
  EXPECT_THAT(devices, IsEmpty());
}

TEST(NicStepPairingTest, NicsSharedByGpusAreNamedOnce) {
  AgentNode node;
  node.nics.resize(3);
  node.nics[0].name = "mlx5_0";
  node.nics[0].gpus = {0, 1};
  node.nics[1].name = "mlx5_1";
  node.nics[1].gpus = {2, 3};
  node.nics[2].name = "mlx5_10";  // no GPU of its own
  EXPECT_EQ(NcclIbHca(NicsOfGpus(node, {1, 0, 2})), "=mlx5_0,mlx5_1");
  EXPECT_EQ(NcclIbHca(NicsOfGpus(node, {3})), "=mlx5_1");
  EXPECT_THAT(NicsOfGpus(node, {4}), IsEmpty());
}

void WriteDeviceStandIn(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(NicStepContainerTest, AContainerGetsTheRdmaDevicesOfItsNicsOnly) {
  TempDir tmp;
  CapturedLog log;
  AgentNode node;
  node.name = "h200-0";
  node.root = tmp.path() + "/node";
  node.device_dir = tmp.path() + "/dev";
  for (int i = 0; i < 8; ++i) {
    GpuDevice g;
    g.index = i;
    g.minor = i;
    g.uuid = absl::StrCat("GPU-test-", i);
    node.gpus.push_back(g);
  }
  node.nics = EmulatedNicProbe(ParseGpuEmulation("8xH200").value())
                  .Probe(node.gpus)
                  .value();
  // The host's verbs devices: stand-ins (bind mounts), all but uverbs3,
  // which this host lacks; rdma_cm a real character device (/dev/null's).
  for (int i = 0; i < 8; ++i) {
    if (i == 3) continue;
    WriteDeviceStandIn(absl::StrCat(node.device_dir, "/infiniband/uverbs", i),
                       "x\n");
  }
  fs::create_symlink("/dev/null", node.device_dir + "/infiniband/rdma_cm");

  LaunchRequest r = NicTaskRequest({1, 3});
  r.container = ContainerRequest{};
  r.container->image = "127.0.0.1:5000/t/b@sha256:" + std::string(64, 'a');
  image::ImageHandle handle;
  handle.digest = "sha256:" + std::string(64, 'a');
  handle.rootfs = tmp.path() + "/image/rootfs";
  handle.config = tmp.path() + "/image/config.json";
  LaunchContext ctx{
      node,         r,  log.log(),
      std::nullopt, "", std::make_shared<ContainerLaunch>(nullptr, handle)};
  const std::unique_ptr<const LaunchStep> nics = MakeNicStep();
  const std::unique_ptr<const LaunchStep> image = MakeImageStep({});
  std::string field;
  ASSERT_TRUE(nics->Prepare(ctx, &field).ok());
  EXPECT_THAT(ctx.nic_devices,
              ElementsAre("infiniband/uverbs1", "infiniband/uverbs3",
                          "infiniband/rdma_cm"));
  TaskProcess p;
  p.launcher_id = "42.0.1.p0";
  TaskSpec spec;
  spec.task_id = p.launcher_id;
  spec.argv = r.argv;
  nics->Apply(ctx, p, 0, spec);
  image->Apply(ctx, p, 0, spec);
  ASSERT_TRUE(spec.sandbox.has_value());
  json config;
  for (const auto& [path, text] : spec.sandbox->files) {
    if (absl::EndsWith(path, "/config.json")) config = json::parse(text);
  }
  ASSERT_TRUE(config.is_object());

  std::map<std::string, std::string> binds;
  for (const json& m : config["mounts"]) {
    const std::string dst = m["destination"];
    if (absl::StartsWith(dst, "/dev/infiniband")) binds[dst] = m["source"];
  }
  EXPECT_EQ(binds, (std::map<std::string, std::string>{
                       {"/dev/infiniband/uverbs1",
                        node.device_dir + "/infiniband/uverbs1"}}));
  std::vector<std::string> devices;
  for (const json& d : config["linux"]["devices"]) {
    if (absl::StartsWith(d["path"].get<std::string>(), "/dev/infiniband")) {
      devices.push_back(d["path"]);
      EXPECT_EQ(d["major"], 1);
      EXPECT_EQ(d["minor"], 3);
    }
  }
  EXPECT_THAT(devices, ElementsAre("/dev/infiniband/rdma_cm"));
  bool named = false;
  for (const json& kv : config["process"]["env"]) {
    named = named || kv == "NCCL_IB_HCA==mlx5_1,mlx5_3";
  }
  EXPECT_TRUE(named) << config["process"]["env"].dump();
}

}  // namespace
}  // namespace loom
