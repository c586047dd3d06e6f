// The image step's `Apply` (image_step.h) for a 2-GPU container task: the
// config.json runc gets holds exactly the devices of the task's two GPUs
// (found by minor number), the control devices, the driver's files and
// their env, from a CDI spec or from next to NVML (gpu_driver_files.h).

#include "loom/agent/image_step.h"

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
#include "loom/agent/agent_node.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::CapturedLog;
using agent_testing::TempDir;
using json = nlohmann::json;
using ::testing::Contains;
using ::testing::IsEmpty;

void WriteStepTestFile(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// A node of four GPUs whose minor numbers are `minor_offset` past their
// indices, with stand-in device files for them, and a container task.
class ImageStepHarness {
 public:
  explicit ImageStepHarness(int minor_offset) {
    node_.name = "h200-0";
    node_.root = tmp_.path() + "/node";
    node_.emulated = true;
    node_.device_dir = node_.root + "/dev";
    for (int i = 0; i < 4; ++i) {
      GpuDevice g;
      g.index = i;
      g.uuid = absl::StrCat("GPU-test-", i);
      g.minor = i + minor_offset;
      node_.gpus.push_back(g);
      WriteStepTestFile(absl::StrCat(node_.device_dir, "/nvidia", g.minor),
                        absl::StrCat("stand-in of GPU ", i, "\n"));
    }
    WriteStepTestFile(node_.device_dir + "/nvidia-uvm", "uvm\n");
    request_.task_id = "7.0.0";
    request_.gpus = {1, 3};
    request_.argv = {"/bin/sh", "-c", "true"};
    request_.container = ContainerRequest{};
    request_.container->image =
        "127.0.0.1:5000/t/b@sha256:" + std::string(64, 'a');
    image::ImageHandle handle;
    handle.digest = "sha256:" + std::string(64, 'a');
    handle.rootfs = tmp_.path() + "/image/rootfs";
    handle.config = tmp_.path() + "/image/config.json";
    launch_ = std::make_shared<ContainerLaunch>(nullptr, handle);
  }

  const std::string& root() const { return tmp_.path(); }
  AgentNode& node() { return node_; }
  // The image's Env.
  void SetImageEnv(std::vector<std::string> env) {
    auto launch = std::make_shared<ContainerLaunch>(nullptr, launch_->image);
    launch->env = std::move(env);
    launch_ = std::move(launch);
  }

  // The config.json `Apply` writes for process 0.
  // A MIG task (mig_step.h): its instance's UUID and GPU instance id.
  void SetMig(int gpu, std::string uuid, int gi) {
    request_.gpus = {gpu};
    mig_uuid_ = std::move(uuid);
    mig_gi_ = gi;
  }

  json Apply(const ImageStepOptions& options) {
    std::unique_ptr<const LaunchStep> step = MakeImageStep(options);
    LaunchContext ctx{node_, request_, log_.log(), std::nullopt, "", launch_};
    ctx.mig_uuid = mig_uuid_;
    ctx.mig_gi = mig_gi_;
    TaskProcess p;
    p.launcher_id = "7.0.0.p0";
    TaskSpec spec;
    spec.task_id = p.launcher_id;
    spec.argv = request_.argv;
    spec.env = {{"RANK", "0"}};
    step->Apply(ctx, p, 0, spec);
    EXPECT_TRUE(spec.sandbox.has_value());
    if (!spec.sandbox) return json();
    for (const auto& [path, text] : spec.sandbox->files) {
      if (absl::EndsWith(path, "/config.json")) return json::parse(text);
    }
    ADD_FAILURE() << "no config.json in the sandbox";
    return json();
  }

 private:
  TempDir tmp_;
  std::string mig_uuid_;
  int mig_gi_ = -1;
  AgentNode node_;
  LaunchRequest request_;
  CapturedLog log_;
  std::shared_ptr<const ContainerLaunch> launch_;
};

// destination -> source of the bind mounts under `prefix`.
std::map<std::string, std::string> BindsUnder(const json& config,
                                              const std::string& prefix) {
  std::map<std::string, std::string> out;
  for (const json& m : config["mounts"]) {
    const std::string dst = m["destination"];
    if (m["type"] == "bind" && absl::StartsWith(dst, prefix)) {
      out[dst] = m["source"];
    }
  }
  return out;
}

const json* BindAt(const json& config, const std::string& destination) {
  for (const json& m : config["mounts"]) {
    if (m["destination"] == destination) return &m;
  }
  return nullptr;
}

std::map<std::string, std::string> EnvOf(const json& config) {
  std::map<std::string, std::string> out;
  for (const json& kv : config["process"]["env"]) {
    const std::string s = kv;
    out[s.substr(0, s.find('='))] = s.substr(s.find('=') + 1);
  }
  return out;
}

TEST(ImageStepTest, ATwoGpuTaskGetsItsGpusAndTheCdiSpecsFiles) {
  ImageStepHarness h(/*minor_offset=*/0);
  h.SetImageEnv({"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=/opt/lib"});
  // The spec's devices have stand-ins of their own, so that the test tells
  // them from the node's.
  const std::string cdi_dev = h.root() + "/cdi-dev";
  std::string devices;
  for (int i = 0; i < 4; ++i) {
    WriteStepTestFile(absl::StrCat(cdi_dev, "/nvidia", i), "cdi stand-in\n");
    devices += absl::StrCat("- name: \"", i, "\"\n  containerEdits:\n",
                            "    deviceNodes: [{path: /dev/nvidia", i,
                            ", hostPath: ", cdi_dev, "/nvidia", i, "}]\n");
  }
  const std::string lib = h.root() + "/driver/libnvidia-test.so.1";
  WriteStepTestFile(lib, "a driver library\n");
  WriteStepTestFile(
      h.root() + "/cdi/nvidia.yaml",
      absl::StrCat("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n",
                   devices,
                   "containerEdits:\n"
                   "  env: [NVIDIA_VISIBLE_DEVICES=void, LOOM_CDI=1]\n"
                   "  mounts:\n  - {hostPath: ",
                   lib,
                   ", containerPath: /usr/lib/loom-test/libnvidia-test.so.1, "
                   "options: [ro, nosuid, nodev, bind]}\n"));
  ImageStepOptions options;
  options.gpu_driver.cdi_dirs = {h.root() + "/cdi"};
  const json c = h.Apply(options);

  // Exactly GPUs 1 and 3 (the spec's), and the node's nvidia-uvm (the spec
  // has no control devices): stand-ins are bind mounts, so no device nodes.
  EXPECT_EQ(BindsUnder(c, "/dev/nvidia"),
            (std::map<std::string, std::string>{
                {"/dev/nvidia1", cdi_dev + "/nvidia1"},
                {"/dev/nvidia3", cdi_dev + "/nvidia3"},
                {"/dev/nvidia-uvm", h.node().device_dir + "/nvidia-uvm"},
            }));
  EXPECT_THAT(c["linux"]["devices"], IsEmpty());
  const json* mounted = BindAt(c, "/usr/lib/loom-test/libnvidia-test.so.1");
  ASSERT_NE(mounted, nullptr);
  EXPECT_EQ((*mounted)["source"], lib);
  EXPECT_THAT((*mounted)["options"].get<std::vector<std::string>>(),
              Contains("ro"));
  const std::map<std::string, std::string> env = EnvOf(c);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  // The host's indices, not the spec's "void".
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(env.at("LOOM_CDI"), "1");
  EXPECT_EQ(env.at("LD_LIBRARY_PATH"), "/opt/lib:/usr/lib/loom-test");
  EXPECT_EQ(env.at("PATH"), "/usr/bin:/bin");
  EXPECT_EQ(env.at("RANK"), "0");
}

// A MIG task in a container sees its instance only: CUDA_VISIBLE_DEVICES
// and NVIDIA_VISIBLE_DEVICES name it, and it gets its GPU's device and the
// capability devices of its GPU and compute instances (mig_devices.h).
TEST(ImageStepTest, AMigTaskGetsItsInstancesCapabilityDevices) {
  ImageStepHarness h(/*minor_offset=*/4);
  h.SetMig(2, "MIG-0f1e2d3c-aaaa-4bbb-8ccc-000000000001", 5);
  const std::string gi =
      h.root() + "/proc/proc/driver/nvidia/capabilities/gpu6/mig/gi5";
  WriteStepTestFile(gi + "/access", "DeviceFileMinor: 48\n");
  WriteStepTestFile(gi + "/ci0/access", "DeviceFileMinor: 49\n");
  for (int cap : {48, 49, 50}) {
    WriteStepTestFile(
        absl::StrCat(h.node().device_dir, "/nvidia-caps/nvidia-cap", cap),
        "stand-in\n");
  }
  ImageStepOptions options;
  options.gpu_driver.proc_root = h.root() + "/proc";
  const json c = h.Apply(options);
  const std::map<std::string, std::string> env = EnvOf(c);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"),
            "MIG-0f1e2d3c-aaaa-4bbb-8ccc-000000000001");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"),
            "MIG-0f1e2d3c-aaaa-4bbb-8ccc-000000000001");
  EXPECT_EQ(BindsUnder(c, "/dev/nvidia-caps"),
            (std::map<std::string, std::string>{
                {"/dev/nvidia-caps/nvidia-cap48",
                 h.node().device_dir + "/nvidia-caps/nvidia-cap48"},
                {"/dev/nvidia-caps/nvidia-cap49",
                 h.node().device_dir + "/nvidia-caps/nvidia-cap49"},
            }));
  // Its GPU (minor 6) and no other.
  const std::map<std::string, std::string> gpus = BindsUnder(c, "/dev/nvidia");
  EXPECT_TRUE(gpus.contains("/dev/nvidia6"));
  EXPECT_FALSE(gpus.contains("/dev/nvidia5"));
  EXPECT_FALSE(gpus.contains("/dev/nvidia7"));
}

TEST(ImageStepTest, WithoutCdiTheDriverFilesNextToNvmlAndDevicesByMinor) {
  // NVML's GPU i is /dev/nvidia(i + 4).
  ImageStepHarness h(/*minor_offset=*/4);
  // An NGC image already lists the driver's directories.
  h.SetImageEnv(
      {"LD_LIBRARY_PATH=/usr/local/nvidia/lib:/usr/local/nvidia/lib64"});
  // A real character device for a control device: a device node and a
  // cgroup rule, not a mount.
  fs::create_symlink("/dev/null", h.node().device_dir + "/nvidiactl");
  const std::string drv = h.root() + "/usr/lib/x86_64-linux-gnu";
  WriteStepTestFile(drv + "/libnvidia-ml.so.550.54.15", "nvml\n");
  fs::create_symlink("libnvidia-ml.so.550.54.15", drv + "/libnvidia-ml.so.1");
  WriteStepTestFile(drv + "/libcuda.so.550.54.15", "cuda\n");
  fs::create_symlink("libcuda.so.550.54.15", drv + "/libcuda.so.1");
  WriteStepTestFile(drv + "/libunrelated.so.1", "not the driver's\n");
  const std::string smi = h.root() + "/usr/bin/nvidia-smi";
  WriteStepTestFile(smi, "smi\n");
  ImageStepOptions options;
  options.gpu_driver.nvml_library = drv + "/libnvidia-ml.so.1";
  options.gpu_driver.nvidia_smi = smi;
  const json c = h.Apply(options);

  EXPECT_EQ(BindsUnder(c, "/dev/nvidia"),
            (std::map<std::string, std::string>{
                {"/dev/nvidia5", h.node().device_dir + "/nvidia5"},
                {"/dev/nvidia7", h.node().device_dir + "/nvidia7"},
                {"/dev/nvidia-uvm", h.node().device_dir + "/nvidia-uvm"},
            }));
  ASSERT_EQ(c["linux"]["devices"].size(), 1u);
  const json& ctl = c["linux"]["devices"][0];
  EXPECT_EQ(ctl["path"], "/dev/nvidiactl");
  EXPECT_EQ(ctl["type"], "c");
  EXPECT_EQ(ctl["major"], 1);  // /dev/null's
  EXPECT_EQ(ctl["minor"], 3);
  bool allowed = false;
  for (const json& rule : c["linux"]["resources"]["devices"]) {
    allowed = allowed || (rule["allow"] == true && rule["major"] == 1 &&
                          rule["minor"] == 3);
  }
  EXPECT_TRUE(allowed) << c["linux"]["resources"].dump();

  const std::string nvml = drv + "/libnvidia-ml.so.550.54.15";
  const std::string cuda = drv + "/libcuda.so.550.54.15";
  EXPECT_EQ(BindsUnder(c, "/usr/local/nvidia"),
            (std::map<std::string, std::string>{
                {"/usr/local/nvidia/lib64/libnvidia-ml.so.1", nvml},
                {"/usr/local/nvidia/lib64/libnvidia-ml.so.550.54.15", nvml},
                {"/usr/local/nvidia/lib64/libcuda.so.1", cuda},
                {"/usr/local/nvidia/lib64/libcuda.so.550.54.15", cuda},
                {"/usr/local/nvidia/bin/nvidia-smi", smi},
            }));
  for (const auto& [dst, src] : BindsUnder(c, "/usr/local/nvidia")) {
    EXPECT_THAT((*BindAt(c, dst))["options"].get<std::vector<std::string>>(),
                Contains("ro"))
        << dst;
  }
  const std::map<std::string, std::string> env = EnvOf(c);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "0,1");
  EXPECT_EQ(env.at("NVIDIA_VISIBLE_DEVICES"), "1,3");
  EXPECT_EQ(env.at("LD_LIBRARY_PATH"),
            "/usr/local/nvidia/lib:/usr/local/nvidia/lib64");
  EXPECT_EQ(env.at("PATH"),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:"
            "/usr/local/nvidia/bin");
}

}  // namespace
}  // namespace loom
