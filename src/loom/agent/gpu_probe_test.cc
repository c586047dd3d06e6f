// GPU discovery (gpu_probe.h): NVML through the fake libnvidia-ml
// (LOOM_FAKE_NVML_PATH), the Xid watcher, model names, emulation, the host;
// and an agent on real GPUs (the fake NVML) or without NVML.

#include "loom/agent/gpu_probe.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::HasProblem;
using agent_testing::kGi;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

TEST(GpuProbeTest, NvmlIsUnavailableWithoutTheLibrary) {
  if (void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(lib);
    GTEST_SKIP() << "this host has libnvidia-ml.so.1";
  }
  NvmlGpuProbe probe;
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe.Probe();
  ASSERT_FALSE(gpus.ok());
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  EXPECT_THAT(std::string(gpus.status().message()),
              HasSubstr("libnvidia-ml.so.1"));
}

TEST(GpuProbeTest, NvmlReportsAMissingLibraryOrFunction) {
  absl::StatusOr<std::vector<GpuDevice>> gpus =
      NvmlGpuProbe("/nonexistent/libnvidia-ml.so.1").Probe();
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  gpus = NvmlGpuProbe("libc.so.6").Probe();
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  EXPECT_THAT(std::string(gpus.status().message()), HasSubstr("nvmlInit_v2"));
}

TEST(GpuProbeTest, NvmlReadsDevicesThroughTheLibrary) {
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe.Probe();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  EXPECT_EQ(probe.Software().driver, "550.54.15");
  EXPECT_EQ(probe.Software().cuda, "12.4");
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[0].minor, 4);  // nvmlDeviceGetMinorNumber
  EXPECT_EQ((*gpus)[1].minor, 5);
  EXPECT_EQ((*gpus)[1].name, "NVIDIA H200");
  EXPECT_EQ((*gpus)[1].model, "h200");
  EXPECT_EQ((*gpus)[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ((*gpus)[1].memory_bytes, 150754820096);
  EXPECT_EQ((*gpus)[1].ecc_uncorrected, 0);
  EXPECT_EQ((*gpus)[1].utilization_percent, 41);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, 0);
  EXPECT_EQ((*gpus)[1].temperature_c, 55);
  EXPECT_DOUBLE_EQ((*gpus)[1].power_watts, 250.5);
  EXPECT_EQ((*gpus)[1].sm_clock_mhz, 1980);
}

TEST(GpuProbeTest, NvmlRemembersTheLibraryItLoaded) {
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  EXPECT_EQ(probe.LoadedLibrary(), "");  // before any Probe
  ASSERT_TRUE(probe.Probe().ok());
  const std::string loaded = probe.LoadedLibrary();
  ASSERT_FALSE(loaded.empty());
  EXPECT_EQ(loaded[0], '/');
  char want[PATH_MAX];
  char got[PATH_MAX];
  ASSERT_NE(realpath(LOOM_FAKE_NVML_PATH, want), nullptr);
  ASSERT_NE(realpath(loaded.c_str(), got), nullptr) << loaded;
  EXPECT_EQ(std::string(got), std::string(want));
  // Emulated GPUs have no library; their minors are their indices, the
  // names of their stand-ins.
  EmulatedGpuProbe emulated(*ParseGpuEmulation("2xH200"), "h200-0");
  EXPECT_EQ(emulated.LoadedLibrary(), "");
  EXPECT_EQ(emulated.Probe()->back().minor, 1);
}

TEST(GpuProbeTest, XidWatcherKeepsTheLastXidOfEachGpu) {
  NvmlXidWatcher missing("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(missing.Start().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(missing.LastXids().empty());
  setenv("LOOM_FAKE_NVML_XID", "79", 1);
  NvmlXidWatcher watcher(LOOM_FAKE_NVML_PATH);
  ASSERT_TRUE(watcher.Start().ok());
  EXPECT_TRUE(WaitFor([&] { return watcher.LastXids().size() == 1; }));
  unsetenv("LOOM_FAKE_NVML_XID");
  EXPECT_EQ(watcher.LastXids(), (std::map<int, int64_t>{{1, 79}}));
  watcher.Stop();
  watcher.Stop();  // idempotent
  EXPECT_TRUE(IsHardwareXid(79));
  EXPECT_TRUE(IsHardwareXid(48));
  EXPECT_FALSE(IsHardwareXid(13));  // an application's illegal access
  EXPECT_FALSE(IsHardwareXid(31));
}

TEST(GpuProbeTest, ModelNames) {
  EXPECT_EQ(GpuModelFromName("NVIDIA H200"), "h200");
  EXPECT_EQ(GpuModelFromName("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(GpuModelFromName("NVIDIA A100 80GB PCIe"), "a100");
  EXPECT_EQ(GpuModelFromName("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GpuModelFromName("Tesla V100-SXM2-32GB"), "v100");
  EXPECT_EQ(GpuModelFromName("NVIDIA L40S"), "l40s");
  EXPECT_EQ(GpuModelFromName("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GpuModelFromName(""), "unknown");
}

TEST(GpuProbeTest, Emulation) {
  absl::StatusOr<GpuEmulation> e = ParseGpuEmulation("8xH200");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->count, 8);
  EXPECT_EQ(e->model, "h200");
  EXPECT_EQ(e->gpu_memory_bytes, 141 * kGi);
  EXPECT_EQ(e->cpus, 192);
  EXPECT_EQ(e->memory_bytes, 2048 * kGi);
  e = ParseGpuEmulation("8xa100");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->gpu_memory_bytes, 80 * kGi);
  EXPECT_EQ(e->cpus, 96);
  EXPECT_EQ(e->memory_bytes, 1024 * kGi);
  e = ParseGpuEmulation("4xL4:24Gi");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->model, "l4");
  EXPECT_EQ(e->gpu_memory_bytes, 24 * kGi);
  EXPECT_EQ(e->cpus, 0);
  for (const char* bad : {"", "8", "xH200", "0xH200", "8xfoo", "8xH200:abc",
                          "2000xH200", "8xH 200"}) {
    EXPECT_FALSE(ParseGpuEmulation(bad).ok()) << bad;
  }
  std::vector<GpuDevice> a =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-0").Probe().value();
  std::vector<GpuDevice> b =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-1").Probe().value();
  std::vector<GpuDevice> a2 =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-0").Probe().value();
  EXPECT_NE(a[0].uuid, b[0].uuid);
  EXPECT_NE(a[0].uuid, a[1].uuid);
  EXPECT_EQ(a[0].uuid, a2[0].uuid);
  EXPECT_EQ(a[0].uuid.size(), 40u);  // GPU- and 36 characters
  GpuEmulation other = *ParseGpuEmulation("2xH200");
  EXPECT_EQ(EmulatedGpuProbe(other, "n-0").Software().driver, "550.54.15");
  other.driver_version = "535.161.08";
  EXPECT_EQ(EmulatedGpuProbe(other, "n-0").Software().driver, "535.161.08");
  EXPECT_EQ(EmulatedGpuProbe(other, "n-0").Software().cuda, "12.4");
  EXPECT_EQ(CudaVersionText(12020), "12.2");
}

TEST(GpuProbeTest, HostInfo) {
  absl::StatusOr<HostInfo> host = ProbeHost();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_GT(host->cpus, 0);
  EXPECT_GT(host->memory_bytes, 0);
  EXPECT_FALSE(host->hostname.empty());
  EXPECT_FALSE(host->kernel.empty());
  EXPECT_FALSE(ProbeHost("/nonexistent/meminfo").ok());
}

TEST(AgentTest, RealGpusReportXidAndTelemetry) {
  setenv("LOOM_FAKE_NVML_XID", "79", 1);
  FakeServer server;
  TempDir dir;
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation.reset();
  options.gpu_probe = &probe;
  options.nvml_library = LOOM_FAKE_NVML_PATH;
  options.health_interval = absl::Milliseconds(100);
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  EXPECT_TRUE(WaitFor([&] {
    return HasProblem(server.LastHealth("h200-0"),
                      "GPU 1: Xid 79 (a hardware error)");
  }));
  unsetenv("LOOM_FAKE_NVML_XID");
  AgentClient client(*agent);
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_XID_ERRORS\\{gpu=\"1\",[^}]*"
                             "emulated=\"false\"\\} 79\n"));
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_GPU_UTIL\\{gpu=\"0\",[^}]*\\} 40\n"));
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_POWER_USAGE\\{gpu=\"1\",[^}]*\\} "
                             "250.5\n"));
}

class UnavailableProbe : public GpuProbe {
 public:
  absl::StatusOr<std::vector<GpuDevice>> Probe() override {
    return absl::UnavailableError("NVML is not available: test");
  }
};

TEST(AgentTest, RealGpusWithoutNvmlAskForEmulation) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation.reset();
  UnavailableProbe probe;
  options.gpu_probe = &probe;
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_TRUE(absl::IsUnavailable(agent.status()));
  EXPECT_THAT(std::string(agent.status().message()), HasSubstr("--emulate"));
  // A fleet needs emulation.
  options.node_names = {"a-0", "a-1"};
  agent = Agent::Create(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(agent.status()));
}

}  // namespace
}  // namespace loom
