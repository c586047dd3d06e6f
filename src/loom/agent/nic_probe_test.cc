// RDMA NIC discovery and pairing (nic_probe.h): NICs and GPUs read from fake
// sysfs trees (an HGX node, a node whose NICs are only NUMA-local, missing
// and garbage files), the emulated HGX node (the same result as its sysfs
// tree), what the registration and /metrics say of them.

#include "loom/agent/nic_probe.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/node_table.h"
#include "loom/agent/node_telemetry.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::BaseOptions;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::FakeServer;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

void WriteSysfsText(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// Makes the PCIe device at `pci_path` under `root`'s sys/devices, with the
// bridges on the way (Intel root ports and switch ports, as on a real node),
// and the sys/bus/pci/devices links of all of them. Returns its directory.
fs::path WritePciDevice(const fs::path& root,
                        const std::vector<std::string>& pci_path,
                        const std::string& vendor, const std::string& cls,
                        int numa_node) {
  fs::path dir = root / "sys/devices";
  std::string relative = "../../../devices";
  for (size_t i = 0; i < pci_path.size(); ++i) {
    dir /= pci_path[i];
    relative = absl::StrCat(relative, "/", pci_path[i]);
    if (i == 0) continue;  // the root bus
    const bool last = i + 1 == pci_path.size();
    if (last || !fs::exists(dir / "vendor")) {
      WriteSysfsText(dir / "vendor",
                     absl::StrCat(last ? vendor : "0x8086", "\n"));
      WriteSysfsText(dir / "class",
                     absl::StrCat(last ? cls : "0x060400", "\n"));
      WriteSysfsText(dir / "numa_node", absl::StrCat(numa_node, "\n"));
    }
    const fs::path link = root / "sys/bus/pci/devices" / pci_path[i];
    if (!fs::exists(fs::symlink_status(link))) {
      fs::create_directories(link.parent_path());
      fs::create_directory_symlink(relative, link);
    }
  }
  return dir;
}

// Writes `topology` as Linux's sysfs shows it under `root`: the GPUs as
// NVIDIA 3D controllers, each NIC as a Mellanox device with its
// `infiniband/<name>` directory (linked from sys/class/infiniband), port
// 1's rate and state, and its verbs device.
void WriteFakeSysfs(const fs::path& root, const NicTopology& topology) {
  for (const GpuPciPlace& gpu : topology.gpus) {
    WritePciDevice(root, gpu.pci_path, "0x10de", "0x030200", gpu.numa_node);
  }
  for (const NicDevice& nic : topology.nics) {
    const fs::path dev =
        WritePciDevice(root, nic.pci_path, "0x15b3", "0x020700", nic.numa_node);
    const fs::path ib = dev / "infiniband" / nic.name;
    WriteSysfsText(ib / "ports/1/rate",
                   absl::StrCat(nic.rate_gbps, " Gb/sec (4X NDR)\n"));
    WriteSysfsText(
        ib / "ports/1/state",
        absl::StrCat(nic.state == "ACTIVE" ? 4 : 1, ": ", nic.state, "\n"));
    fs::create_directory_symlink(absl::StrCat("../../../", nic.pci_path.back()),
                                 ib / "device");
    WriteSysfsText(dev / "infiniband_verbs" / nic.uverbs / "ibdev", nic.name);
    fs::create_directories(root / "sys/class/infiniband");
    fs::create_directory_symlink(
        absl::StrCat("../../devices/", absl::StrJoin(nic.pci_path, "/"),
                     "/infiniband/", nic.name),
        root / "sys/class/infiniband" / nic.name);
  }
}

std::vector<GpuDevice> NodeGpus(int n) {
  std::vector<GpuDevice> gpus(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) gpus[i].index = i;
  return gpus;
}

// NIC name -> paired GPUs.
std::map<std::string, std::vector<int>> NicPairing(
    const std::vector<NicDevice>& nics) {
  std::map<std::string, std::vector<int>> out;
  for (const NicDevice& nic : nics) out[nic.name] = nic.gpus;
  return out;
}

TEST(NicProbeTest, HgxNodeFromSysfsPairsEachGpuWithTheNicOnItsSwitch) {
  TempDir dir;
  WriteFakeSysfs(dir.path(), HgxTopology(8, 400));
  // An NVSwitch is NVIDIA's too, but no GPU.
  WritePciDevice(dir.path(), {"pci0000:f0", "0000:f0:00.0"}, "0x10de",
                 "0x068000", 1);
  SysfsNicProbe probe(dir.path());
  absl::StatusOr<std::vector<NicDevice>> nics = probe.Probe(NodeGpus(8));
  ASSERT_TRUE(nics.ok()) << nics.status();
  EXPECT_EQ(probe.warning(), "");
  ASSERT_EQ(nics->size(), 8u);
  for (int i = 0; i < 8; ++i) {
    const NicDevice& nic = (*nics)[i];
    EXPECT_EQ(nic.name, absl::StrCat("mlx5_", i));
    EXPECT_EQ(nic.rate_gbps, 400);
    EXPECT_EQ(nic.state, "ACTIVE");
    EXPECT_EQ(nic.numa_node, i < 4 ? 0 : 1);
    EXPECT_EQ(nic.uverbs, absl::StrCat("uverbs", i));
    EXPECT_EQ(nic.pci_path.size(), 5u);
    EXPECT_THAT(nic.gpus, ElementsAre(i));
    EXPECT_EQ(nic.note, "");
  }
  // The emulated HGX H200 node is the same node.
  EmulatedNicProbe emulated(ParseGpuEmulation("8xH200").value());
  EXPECT_EQ(emulated.Probe(NodeGpus(8)).value(), *nics);
}

TEST(NicProbeTest, PairsBySwitchNotByNameOrNuma) {
  // Real nodes do not name NICs in GPU order (a DGX's compute NICs are
  // mlx5_0, mlx5_3, mlx5_4, ...): here the switches' NICs are named in
  // reverse, the NICs beside GPUs 0 and 1 mlx5_6 and mlx5_7, so that neither
  // name order (mlx5_0) nor NUMA node (mlx5_4, the first on node 0) gives
  // the answer. Within a switch the two NICs are equally near: by name.
  NicTopology hgx = HgxTopology(8, 400);
  for (NicDevice& nic : hgx.nics) {
    const int beside = nic.name.back() - '0';
    nic.name = absl::StrCat("mlx5_", (3 - beside / 2) * 2 + beside % 2);
  }
  TempDir dir;
  WriteFakeSysfs(dir.path(), hgx);
  absl::StatusOr<std::vector<NicDevice>> nics =
      SysfsNicProbe(dir.path()).Probe(NodeGpus(8));
  ASSERT_TRUE(nics.ok());
  EXPECT_EQ(NicPairing(*nics), (std::map<std::string, std::vector<int>>{
                                   {"mlx5_6", {0}},
                                   {"mlx5_7", {1}},
                                   {"mlx5_4", {2}},
                                   {"mlx5_5", {3}},
                                   {"mlx5_2", {4}},
                                   {"mlx5_3", {5}},
                                   {"mlx5_0", {6}},
                                   {"mlx5_1", {7}},
                               }));
}

TEST(NicProbeTest, NicsOnlyNumaLocalArePairedByNumaNode) {
  // Four GPUs and two NICs, each on a root port of its own: no switch is
  // shared; GPUs 0-1 and mlx5_0 on NUMA node 0, the rest on 1.
  NicTopology t;
  for (int i = 0; i < 4; ++i) {
    const std::string bus = absl::StrFormat("%02x", 0x10 + 0x20 * i);
    t.gpus.push_back(
        {i,
         {absl::StrCat("pci0000:", bus), absl::StrCat("0000:", bus, ":01.0"),
          absl::StrFormat("0000:%02x:00.0", 0x11 + 0x20 * i)},
         i < 2 ? 0 : 1});
  }
  for (int n = 0; n < 2; ++n) {
    NicDevice nic;
    nic.name = absl::StrCat("mlx5_", n);
    nic.rate_gbps = 200;
    nic.state = "ACTIVE";
    nic.numa_node = n;
    const std::string bus = absl::StrFormat("%02x", 0x90 + 0x20 * n);
    nic.pci_path = {absl::StrCat("pci0000:", bus),
                    absl::StrCat("0000:", bus, ":01.0"),
                    absl::StrFormat("0000:%02x:00.0", 0x91 + 0x20 * n)};
    nic.uverbs = absl::StrCat("uverbs", n);
    t.nics.push_back(nic);
  }
  TempDir dir;
  WriteFakeSysfs(dir.path(), t);
  absl::StatusOr<std::vector<NicDevice>> nics =
      SysfsNicProbe(dir.path()).Probe(NodeGpus(4));
  ASSERT_TRUE(nics.ok());
  EXPECT_EQ(NicPairing(*nics), (std::map<std::string, std::vector<int>>{
                                   {"mlx5_0", {0, 1}}, {"mlx5_1", {2, 3}}}));

  // A GPU whose NUMA node is not known, and that shares no switch, gets
  // none.
  t.gpus[3].numa_node = -1;
  PairGpusWithNics(t);
  EXPECT_EQ(NicPairing(t.nics), (std::map<std::string, std::vector<int>>{
                                    {"mlx5_0", {0, 1}}, {"mlx5_1", {2}}}));
}

TEST(NicProbeTest, MissingAndGarbageFilesAreNotedNeverFatal) {
  TempDir dir;
  const fs::path root = dir.path();
  WriteFakeSysfs(root, HgxTopology(8, 400));
  const fs::path ib = root / "sys/class/infiniband";
  WriteSysfsText(ib / "mlx5_0/ports/1/rate", "fast\n");
  WriteSysfsText(ib / "mlx5_1/ports/1/state", "garbage\n");
  fs::remove(ib / "mlx5_2/ports/1/rate");
  WriteSysfsText(ib / "mlx5_3/device/numa_node", "\x01\xff\n");
  fs::remove(ib / "mlx5_4/device");
  // A NIC directory with nothing in it.
  fs::create_directories(ib / "mlx5_9");
  SysfsNicProbe probe(root.string());
  absl::StatusOr<std::vector<NicDevice>> probed = probe.Probe(NodeGpus(8));
  ASSERT_TRUE(probed.ok());
  std::map<std::string, NicDevice> nics;
  for (const NicDevice& nic : *probed) nics[nic.name] = nic;
  ASSERT_EQ(nics.size(), 9u);
  EXPECT_EQ(probed->back().name, "mlx5_9");  // after mlx5_7, not mlx5_1

  EXPECT_EQ(nics["mlx5_0"].rate_gbps, 0);
  EXPECT_THAT(nics["mlx5_0"].note,
              HasSubstr("ports/1/rate: not a rate: 'fast'"));
  // Its port's state is not known: not paired. GPU 1 shares mlx5_0.
  EXPECT_EQ(nics["mlx5_1"].state, "");
  EXPECT_THAT(nics["mlx5_1"].note, HasSubstr("ports/1/state: not a port"));
  EXPECT_THAT(nics["mlx5_1"].gpus, IsEmpty());
  EXPECT_THAT(nics["mlx5_0"].gpus, ElementsAre(0, 1));
  // No rate, still paired.
  EXPECT_EQ(nics["mlx5_2"].rate_gbps, 0);
  EXPECT_THAT(nics["mlx5_2"].note, HasSubstr("ports/1/rate: cannot read"));
  EXPECT_THAT(nics["mlx5_2"].gpus, ElementsAre(2));
  EXPECT_EQ(nics["mlx5_3"].numa_node, -1);
  EXPECT_THAT(nics["mlx5_3"].note, HasSubstr("device/numa_node: not a NUMA"));
  EXPECT_THAT(nics["mlx5_3"].gpus, ElementsAre(3));
  // No device: no PCIe path, no NUMA node, so no GPU; its switch-mate takes
  // both.
  EXPECT_THAT(nics["mlx5_4"].pci_path, IsEmpty());
  EXPECT_THAT(nics["mlx5_4"].note, HasSubstr("device:"));
  EXPECT_THAT(nics["mlx5_4"].gpus, IsEmpty());
  EXPECT_THAT(nics["mlx5_5"].gpus, ElementsAre(4, 5));
  EXPECT_EQ(nics["mlx5_9"].rate_gbps, 0);
  EXPECT_EQ(nics["mlx5_9"].state, "");
  EXPECT_THAT(nics["mlx5_9"].note, HasSubstr("ports/1/rate: cannot read"));
  EXPECT_THAT(nics["mlx5_9"].gpus, IsEmpty());
  // The garbage is not passed on: the registration's JSON is valid.
  EXPECT_NO_THROW(NicsJson(*probed).dump());
}

TEST(NicProbeTest, NoSysfsNoNicsAndAGpuCountThatDiffersPairsNone) {
  EXPECT_THAT(
      SysfsNicProbe("/nonexistent/loom-sysfs").Probe(NodeGpus(8)).value(),
      IsEmpty());
  TempDir dir;
  WriteFakeSysfs(dir.path(), HgxTopology(8, 400));
  SysfsNicProbe probe(dir.path());
  absl::StatusOr<std::vector<NicDevice>> nics = probe.Probe(NodeGpus(4));
  ASSERT_TRUE(nics.ok());
  EXPECT_EQ(nics->size(), 8u);
  for (const NicDevice& nic : *nics) EXPECT_THAT(nic.gpus, IsEmpty());
  EXPECT_EQ(probe.warning(),
            "sysfs lists 8 NVIDIA GPUs and NVML 4: no GPU is paired with a "
            "NIC");
}

TEST(NicProbeTest, ParsesRatesAndStates) {
  double gbps = -1;
  EXPECT_TRUE(ParseNicRate("400 Gb/sec (4X NDR)", &gbps));
  EXPECT_EQ(gbps, 400);
  EXPECT_TRUE(ParseNicRate("2.5 Gb/sec (1X SDR)\n", &gbps));
  EXPECT_EQ(gbps, 2.5);
  for (const char* bad : {"", "fast", "400", "400 Mb/sec", "-1 Gb/sec",
                          "nan Gb/sec", "x Gb/sec"}) {
    EXPECT_FALSE(ParseNicRate(bad, &gbps)) << bad;
  }
  std::string state;
  EXPECT_TRUE(ParseNicState("4: ACTIVE", &state));
  EXPECT_EQ(state, "ACTIVE");
  EXPECT_TRUE(ParseNicState("1: DOWN", &state));
  EXPECT_EQ(state, "DOWN");
  for (const char* bad : {"", "ACTIVE", "x: ACTIVE", "4:", "4: active"}) {
    EXPECT_FALSE(ParseNicState(bad, &state)) << bad;
  }
}

TEST(NicProbeTest, EmulatedModels) {
  std::vector<NicDevice> a100 =
      EmulatedNicProbe(ParseGpuEmulation("8xA100").value())
          .Probe(NodeGpus(8))
          .value();
  ASSERT_EQ(a100.size(), 8u);
  EXPECT_EQ(a100[7].rate_gbps, 200);
  EXPECT_THAT(a100[7].gpus, ElementsAre(7));
  EXPECT_THAT(EmulatedNicProbe(ParseGpuEmulation("4xL4:24Gi").value())
                  .Probe(NodeGpus(4))
                  .value(),
              IsEmpty());
  // More than ten: names in natural order, each GPU still beside its own.
  std::vector<NicDevice> big =
      EmulatedNicProbe(ParseGpuEmulation("12xH100").value())
          .Probe(NodeGpus(12))
          .value();
  ASSERT_EQ(big.size(), 12u);
  EXPECT_EQ(big[10].name, "mlx5_10");
  EXPECT_THAT(big[10].gpus, ElementsAre(10));
}

TEST(NicProbeTest, JsonOfTheRegistration) {
  std::vector<NicDevice> nics =
      EmulatedNicProbe(ParseGpuEmulation("8xH200").value())
          .Probe(NodeGpus(8))
          .value();
  nics[7].rate_gbps = 2.5;
  nics[7].note = "ports/1/state: cannot read";
  const json j = NicsJson(nics);
  ASSERT_EQ(j.size(), 8u);
  EXPECT_EQ(j[5], json::parse(R"({"name": "mlx5_5", "rate_gbps": 400,
      "numa_node": 1, "state": "ACTIVE", "gpus": [5]})"));
  EXPECT_EQ(j[7]["rate_gbps"], 2.5);
  EXPECT_EQ(j[7]["note"], "ports/1/state: cannot read");
  EXPECT_EQ(NicsJson({}), json::array());
}

TEST(NicProbeTest, EmulatedNodeRegistersItsNicsAndExportsThem) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registration_count("h200-0"); }));
  const json r = server.registrations().front();
  ASSERT_EQ(r["nics"].size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(r["nics"][i]["name"], absl::StrCat("mlx5_", i));
    EXPECT_EQ(r["nics"][i]["gpus"], json::array({i}));
  }

  CapturedLog log;
  TempDir fleet;
  std::unique_ptr<NodeTable> nodes =
      FakeNodes(fleet.path(), {"h200-0", "h200-1"}, log.log());
  ASSERT_NE(nodes, nullptr);
  const std::string text = CollectAgentMetrics(*nodes, {}, absl::Now());
  EXPECT_THAT(text, HasSubstr("# TYPE loom_agent_nic_info gauge"));
  EXPECT_THAT(text, HasSubstr("loom_agent_nic_info{node=\"h200-1\","
                              "nic=\"mlx5_6\",rate_gbps=\"400\","
                              "numa_node=\"1\",state=\"ACTIVE\"} 1"));
}

TEST(NicProbeTest, RealGpusRegisterTheNicsOfSysfs) {
  TempDir sysfs;
  WriteFakeSysfs(sysfs.path(), HgxTopology(2, 400));
  SysfsNicProbe nics(sysfs.path());
  FakeServer server;
  TempDir dir;
  NvmlGpuProbe gpus(LOOM_FAKE_NVML_PATH);  // two H200s
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation.reset();
  options.gpu_probe = &gpus;
  options.nic_probe = &nics;
  options.nvml_library = LOOM_FAKE_NVML_PATH;
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registration_count("h200-0"); }));
  EXPECT_EQ(server.registrations().front()["nics"], json::parse(R"([
      {"name": "mlx5_0", "rate_gbps": 400, "numa_node": 0, "state": "ACTIVE",
       "gpus": [0]},
      {"name": "mlx5_1", "rate_gbps": 400, "numa_node": 0, "state": "ACTIVE",
       "gpus": [1]}])"));
}

}  // namespace
}  // namespace loom
