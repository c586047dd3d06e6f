#pragma once

// RDMA NICs as the agent reports them (docs/agent.md, "NICs"): found in
// sysfs (`/sys/class/infiniband`) or emulated (`--emulate 8xH200`: an HGX
// node, one NIC per GPU), each paired with the GPUs nearest to it on the
// PCIe tree. The launch step in nic_step.h turns the pairing into a task's
// `NCCL_IB_HCA` and its container's RDMA devices.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/gpu_probe.h"
#include "nlohmann/json.hpp"

namespace loom {

// One RDMA NIC (an InfiniBand or RoCE device, `mlx5_0`), port 1.
struct NicDevice {
  std::string name;      // "mlx5_0"
  double rate_gbps = 0;  // port 1's link rate; 0: not known
  int numa_node = -1;    // -1: not known
  std::string state;     // port 1's state: "ACTIVE", "DOWN", ...; "": unknown
  // The PCIe path: the root bus ("pci0000:17"), each bridge on the way
  // ("0000:17:01.0", ...), the NIC's own address last. Empty: not a PCIe
  // device (or not known).
  std::vector<std::string> pci_path;
  std::string uverbs;     // its verbs device, "uverbs0"; "": not known
  std::vector<int> gpus;  // the GPUs paired with it (indices, ascending)
  std::string note;       // what could not be read; "" when all was
  bool operator==(const NicDevice&) const = default;
};

// One GPU's place on the PCIe tree.
struct GpuPciPlace {
  int index = 0;                      // the node's GPU index
  std::vector<std::string> pci_path;  // as `NicDevice::pci_path`
  int numa_node = -1;
  bool operator==(const GpuPciPlace&) const = default;
};

// What pairing needs: the NICs (sorted by name, digits compared as numbers:
// mlx5_2 before mlx5_10) and the GPUs (by index).
struct NicTopology {
  std::vector<NicDevice> nics;
  std::vector<GpuPciPlace> gpus;
};

// Pairs each GPU with its nearest NIC and records it in that NIC's `gpus`
// (any earlier pairing is cleared). Only NICs whose port is ACTIVE are
// paired. The nearest NIC shares the most PCIe bridges with the GPU (at
// least one: the same switch or root port); without one, a NIC on the
// GPU's NUMA node; else none. Among equally near NICs, the one with the
// fewest GPUs so far, then the first by name: the two GPUs and two NICs
// under one switch of an HGX node get one NIC each.
void PairGpusWithNics(NicTopology& topology);

// Finds the NICs of a node and pairs its GPUs with them.
//
// Thread-safety: implementations are thread-compatible.
class NicProbe {
 public:
  virtual ~NicProbe() = default;

  // The NICs, sorted by name, each with the GPUs of `gpus` (the node's,
  // sorted by index) paired with it. A node without NICs has none (not an
  // error); a NIC whose files cannot be read is reported with what could be
  // read and a note. Errors only when the NICs cannot be listed at all.
  [[nodiscard]] virtual absl::StatusOr<std::vector<NicDevice>> Probe(
      const std::vector<GpuDevice>& gpus) = 0;
};

// The NICs of sysfs under `root` ("/" on a real node; a fake tree in
// tests): each `sys/class/infiniband/<name>` with `ports/1/rate`
// ("400 Gb/sec (4X NDR)"), `ports/1/state` ("4: ACTIVE"),
// `device/numa_node`, the PCIe path its `device` link resolves to, and its
// verbs device (`device/infiniband_verbs/uverbs<N>`). The GPUs' PCIe places
// are the NVIDIA display and 3D controllers of `sys/bus/pci/devices`
// (vendor 0x10de, class 0x0300xx or 0x0302xx) in bus order, the k-th being
// the node's k-th GPU (NVML numbers GPUs in bus order); when their count
// differs from the node's, no GPU is paired, and the probe says why in
// `warning()`.
class SysfsNicProbe : public NicProbe {
 public:
  explicit SysfsNicProbe(std::string root = "/");

  // Never fails: what cannot be read is left out or noted.
  absl::StatusOr<std::vector<NicDevice>> Probe(
      const std::vector<GpuDevice>& gpus) override;
  // Why the last `Probe` paired no GPU although it found NICs; "" if not.
  const std::string& warning() const { return warning_; }

 private:
  const std::string root_;
  std::string warning_;
};

// Reads the NICs and GPUs of sysfs under `root` (as `SysfsNicProbe`), not
// paired.
NicTopology ReadSysfsTopology(const std::string& root);

// The PCIe layout of an HGX node with `gpus` GPUs (8: HGX H100/H200): a
// PCIe switch for each two GPUs, with their two NICs (mlx5_<i> beside GPU
// i), ports ACTIVE at `rate_gbps`; the first half of the switches (GPUs
// 0-3 of 8) on NUMA node 0, the rest on 1. Not paired.
NicTopology HgxTopology(int gpus, double rate_gbps);

// The NICs of an emulated node: for h100 and h200 GPUs (400 Gb/s NDR) and
// a100 (200 Gb/s HDR), `HgxTopology` with a NIC per GPU, paired; other
// models have none.
class EmulatedNicProbe : public NicProbe {
 public:
  explicit EmulatedNicProbe(const GpuEmulation& emulation);

  // Never fails.
  absl::StatusOr<std::vector<NicDevice>> Probe(
      const std::vector<GpuDevice>& gpus) override;

 private:
  const std::string model_;
};

// "400 Gb/sec (4X NDR)" -> 400; "2.5 Gb/sec (1X SDR)" -> 2.5. False for
// text that is not a rate.
bool ParseNicRate(std::string_view text, double* gbps);

// "4: ACTIVE" -> "ACTIVE". False for text that is not a port state.
bool ParseNicState(std::string_view text, std::string* state);

// The NICs as the registration reports them (docs/agent.md, "NICs"):
// `[{"name", "rate_gbps", "numa_node", "state", "gpus"}]`, with `note`
// where there is one.
nlohmann::json NicsJson(const std::vector<NicDevice>& nics);

}  // namespace loom
