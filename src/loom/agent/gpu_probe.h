#pragma once

// GPU and host discovery for `loom agent`: real GPUs through NVML (loaded at
// run time, so one build runs with and without an NVIDIA driver), or emulated
// ones (`--emulate 8xH200`) for tests, laptops and the fleet emulator.

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// One GPU as the agent reports it to the server.
struct GpuDevice {
  int index = 0;      // NVML index (what CUDA_VISIBLE_DEVICES names)
  std::string model;  // lower-case model: "h200", "a100", ...
  std::string name;   // the product name NVML gives: "NVIDIA H200"
  std::string uuid;   // "GPU-..."
  // The device's minor number: the host's /dev/nvidia<minor>
  // (nvmlDeviceGetMinorNumber; the index for emulated GPUs); -1 when not
  // known.
  int minor = -1;
  int64_t memory_bytes = 0;  // total framebuffer memory
  // Uncorrected ECC errors since the driver loaded (NVML's volatile
  // counter); -1 when not known (emulated, no ECC, or an old driver).
  int64_t ecc_uncorrected = -1;
  // Telemetry when probed (NVML; for `GET /metrics`); -1 where not known.
  double utilization_percent = -1;  // nvmlDeviceGetUtilizationRates .gpu
  int64_t memory_used_bytes = -1;
  double temperature_c = -1;  // nvmlDeviceGetTemperature (GPU sensor)
  double power_watts = -1;    // nvmlDeviceGetPowerUsage
  double sm_clock_mhz = -1;   // nvmlDeviceGetClockInfo (SM)
};

// The GPU software of a host, as NVML reports it: the driver's version
// ("550.54.15") and the CUDA version it supports ("12.4"). Empty where not
// known.
struct GpuSoftware {
  std::string driver;
  std::string cuda;
};

// "12.4" for NVML's CUDA driver version 12040.
std::string CudaVersionText(int version);

// Finds the GPUs of this host.
//
// Thread-safety: implementations are thread-compatible; `Probe` may be called
// more than once.
class GpuProbe {
 public:
  virtual ~GpuProbe() = default;

  // Lists the GPUs, sorted by index. `Unavailable` when this host offers no
  // way to see GPUs (no NVML library, no driver), with a message that says
  // so; other errors when a query fails.
  [[nodiscard]] virtual absl::StatusOr<std::vector<GpuDevice>> Probe() = 0;

  // The file of the driver library the last successful `Probe` loaded (an
  // absolute path, as the dynamic loader found it): the driver's user-space
  // files are next to it (gpu_driver_files.h). "" where there is none.
  virtual std::string LoadedLibrary() const { return ""; }

  // The driver's versions the last successful `Probe` found.
  virtual GpuSoftware Software() const { return {}; }
};

// Real GPUs through NVML: `dlopen`s `library` (default
// "libnvidia-ml.so.1", found through the dynamic loader's search path) and
// calls `nvmlInit_v2`, `nvmlDeviceGetCount_v2`,
// `nvmlDeviceGetHandleByIndex_v2`, `nvmlDeviceGetName`, `nvmlDeviceGetUUID`,
// `nvmlDeviceGetMemoryInfo` and `nvmlShutdown`, and where the library has it
// `nvmlDeviceGetMinorNumber`, `nvmlDeviceGetTotalEccErrors` (uncorrected,
// volatile) and the telemetry calls (`nvmlDeviceGetUtilizationRates`,
// `nvmlDeviceGetTemperature`, `nvmlDeviceGetPowerUsage`,
// `nvmlDeviceGetClockInfo`). The library is loaded for each `Probe` and
// closed again; `LoadedLibrary` says which file it was.
class NvmlGpuProbe : public GpuProbe {
 public:
  explicit NvmlGpuProbe(std::string library = "libnvidia-ml.so.1");

  // `Unavailable` when the library cannot be loaded, lacks a function, or
  // `nvmlInit_v2` fails (driver not loaded); `Internal` when a device query
  // fails.
  absl::StatusOr<std::vector<GpuDevice>> Probe() override;
  std::string LoadedLibrary() const override { return loaded_; }
  // `nvmlSystemGetDriverVersion` and `nvmlSystemGetCudaDriverVersion_v2`
  // (empty where the library lacks them).
  GpuSoftware Software() const override { return software_; }

 private:
  const std::string library_;
  std::string loaded_;
  GpuSoftware software_;
};

// Watches NVML's Xid critical-error events (`nvmlEventSetCreate`,
// `nvmlDeviceRegisterEvents`, `nvmlEventSetWait_v2`) on a thread of its own
// and keeps the last Xid of each GPU (DCGM's DCGM_FI_DEV_XID_ERRORS).
//
// Thread-safety: thread-safe.
class NvmlXidWatcher {
 public:
  explicit NvmlXidWatcher(std::string library = "libnvidia-ml.so.1");
  ~NvmlXidWatcher();
  NvmlXidWatcher(const NvmlXidWatcher&) = delete;
  NvmlXidWatcher& operator=(const NvmlXidWatcher&) = delete;

  // Loads NVML, registers every GPU for Xid events and starts the thread.
  // `Unavailable` when NVML or its event API is missing or refuses.
  absl::Status Start();
  // Stops the thread and unloads NVML. Idempotent.
  void Stop();
  // GPU index -> the last Xid seen since `Start`.
  std::map<int, int64_t> LastXids() const;

 private:
  struct State;
  const std::string library_;
  std::unique_ptr<State> state_;
};

// Xids that say the GPU itself needs attention (not the application's
// fault): 48 (double-bit ECC), 62, 63, 64 (row remapping), 74 (NVLink), 79
// (fallen off the bus), 92, 94, 95 (ECC), 119, 120 (GSP).
bool IsHardwareXid(int64_t xid);

// What `--emulate COUNTxMODEL[:MEMORY]` asks for, with the node size that
// goes with the model (overridable by `--emulate-cpus`/`--emulate-memory`).
struct GpuEmulation {
  int count = 0;
  std::string model;  // lower case
  int64_t gpu_memory_bytes = 0;
  int cpus = 0;              // 0: the host's
  int64_t memory_bytes = 0;  // 0: the host's
  // The driver and CUDA versions the node reports (`--emulate-driver`,
  // `--emulate-cuda`), for labels and drift (docs/agent.md).
  std::string driver_version = "550.54.15";
  std::string cuda_version = "12.4";
  // Where `driver_version` and `cuda_version` were read from
  // (`--emulate-driver @FILE`, emulated_stack.h), read again whenever the
  // node's stack is (after a maintenance command); "": a literal value.
  std::string driver_file;
  std::string cuda_file;
  // Where emulated MIG records the NVML calls it stands for
  // (`--emulate-mig-log`, emulated_mig_control.h); "": nowhere.
  std::string mig_log;
};

// Parses "8xH200", "8xa100", "4xL4:24Gi" (count 1..1024; the model is lower
// cased). The two node types of DESIGN.md section 1 get their GPU memory and
// node size (h200: 141Gi, 192 cores, 2Ti; a100: 80Gi, 96 cores, 1Ti); h100
// (80Gi) and l40s (48Gi) get their GPU memory; other models need ":MEMORY".
// Where no node size is known, the host's CPU count and memory are used
// (cpus and memory_bytes stay 0). `InvalidArgument` naming the text
// otherwise.
absl::StatusOr<GpuEmulation> ParseGpuEmulation(std::string_view text);

// Emulated GPUs for one node. UUIDs are derived from `node_name` and the
// index ("GPU-" and a UUID-shaped hash), so they stay the same across
// restarts and differ between the nodes of a fleet.
class EmulatedGpuProbe : public GpuProbe {
 public:
  EmulatedGpuProbe(GpuEmulation emulation, std::string node_name);

  // Never fails.
  absl::StatusOr<std::vector<GpuDevice>> Probe() override;
  GpuSoftware Software() const override {
    return {emulation_.driver_version, emulation_.cuda_version};
  }

 private:
  const GpuEmulation emulation_;
  const std::string node_name_;
};

// Maps an NVML product name to loom's model name: "NVIDIA H200" -> "h200",
// "NVIDIA A100-SXM4-80GB" -> "a100", "NVIDIA H100 80GB HBM3" -> "h100",
// "Tesla V100-SXM2-32GB" -> "v100", "NVIDIA GeForce RTX 4090" -> "rtx4090".
// The vendor/brand words (NVIDIA, Tesla, GeForce, Quadro) are dropped and the
// first word is kept, cut at the first '-'; "RTX"/"TITAN" keep the word after
// them. Returns "unknown" for an empty name.
std::string GpuModelFromName(std::string_view name);

// The host as the agent reports it.
struct HostInfo {
  std::string hostname;
  int cpus = 0;              // online CPUs (sysconf)
  int64_t memory_bytes = 0;  // MemTotal of `meminfo_path`
  std::string kernel;        // uname's release ("6.1.0-18-amd64"); "" unknown
};

// Reads the hostname, the kernel release, the online CPU count and
// `MemTotal` from
// `meminfo_path`. `Internal` when one of them cannot be read.
absl::StatusOr<HostInfo> ProbeHost(
    const std::string& meminfo_path = "/proc/meminfo");

}  // namespace loom
