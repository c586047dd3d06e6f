#pragma once

// MIG (Multi-Instance GPU) on the agent (issue 22, docs/agent.md "MIG"):
// making a GPU's layout of GPU instances what the server asks for, and
// reading it for the node's inventory. `NvmlMigControl` drives NVML (loaded
// at run time, like `NvmlGpuProbe`); `EmulatedMigControl` keeps the same
// state in memory for `--emulate` nodes and records the NVML calls it stands
// for. The geometry (profiles, starts) is loom's (core/mig.h).

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/gpu_probe.h"
#include "loom/core/mig.h"
#include "nlohmann/json.hpp"

namespace loom {

// A GPU's layout as the server sends it: (profile name, first memory slice)
// per GPU instance, e.g. {{"1g.18gb", 0}, {"3g.71gb", 4}}.
using MigLayout = std::vector<std::pair<std::string, int>>;

// One GPU instance that exists on a GPU, with the compute instance in it.
struct MigInstanceInfo {
  std::string profile;  // loom's name ("1g.18gb"); "nvml-profile-N" if none
  int start = 0;        // first memory slice
  std::string uuid;     // "MIG-..." (what CUDA_VISIBLE_DEVICES names)
  int gi_id = -1;       // the GPU instance id NVML gave it (DCGM's GPU_I_ID)
  bool operator==(const MigInstanceInfo&) const = default;
};

// What a GPU says about MIG, read-only (the node's inventory).
struct MigState {
  bool capable = false;                    // the GPU supports MIG
  bool enabled = false;                    // MIG mode now
  bool pending = false;                    // MIG mode after the next GPU reset
  std::vector<MigInstanceInfo> instances;  // sorted by start
};

// Whether a change of MIG mode was asked for and waits: NVML activates a
// mode change only on an idle GPU (another process holding it open makes it
// wait, `NVML_ERROR_IN_USE`), and some platforms only at a GPU reset
// (`NVML_ERROR_RESET_REQUIRED`). Until then the GPU keeps its mode now.
inline bool MigModeWaits(const MigState& state) {
  return state.capable && state.enabled != state.pending;
}

// `{"capable", "mode": "enabled"|"disabled", "pending": ..., "instances":
// [{"profile", "start", "uuid"}]}`.
nlohmann::json MigStateJson(const MigState& state);

// Makes and reads the MIG layouts of one node's GPUs (indices as NVML's).
//
// Thread-safety: implementations are thread-safe; calls on one control are
// serialised.
class MigControl {
 public:
  virtual ~MigControl() = default;

  // Makes GPU `gpu` have exactly `layout` (a valid layout of loom's
  // profiles for the GPU: `ValidateMigLayout`), each GPU instance with one
  // compute instance of its full size, and returns its instances. When the
  // layout already exists, nothing is changed. Otherwise MIG mode is
  // enabled if it is off, the instances that are not in `layout` are
  // destroyed (their compute instances first), and then the missing ones
  // are created at their placements; instances in both are kept, with what
  // runs in them. Errors: `InvalidArgument` for a profile the GPU lacks or a
  // bad layout, `FailedPrecondition` when MIG mode cannot be enabled now,
  // `Unavailable` without NVML, `Internal` for a failed NVML call; each
  // names the GPU and the call.
  [[nodiscard]] virtual absl::StatusOr<std::vector<MigInstanceInfo>> Ensure(
      int gpu, const MigLayout& layout) = 0;

  // The instances GPU `gpu` has (none while MIG mode is off). Changes
  // nothing.
  [[nodiscard]] virtual absl::StatusOr<std::vector<MigInstanceInfo>> List(
      int gpu) = 0;

  // Whether GPU `gpu` is MIG-capable, its mode now and after a reset, and
  // its instances. Read-only: never changes the mode.
  [[nodiscard]] virtual absl::StatusOr<MigState> Describe(int gpu) = 0;

  // Turns MIG mode off on GPU `gpu`, for a task that uses it whole or as a
  // share: its instances are destroyed (compute instances first), then the
  // mode is set. Returns the state after, which may say that the change
  // waits (`MigModeWaits`). Nothing changes when the mode is off and no
  // change waits; a GPU that is not MIG-capable is left as it is. Errors as
  // `Ensure`'s.
  [[nodiscard]] virtual absl::StatusOr<MigState> Disable(int gpu) = 0;

  // Asks again for the mode that a waiting change wants
  // (`nvmlDeviceSetMigMode` with the pending mode), as NVML says to once the
  // GPU is idle, and returns the state after. Nothing when no change waits.
  [[nodiscard]] virtual absl::StatusOr<MigState> Settle(int gpu) = 0;
};

// NVML's GPU instance profile id (`NVML_GPU_INSTANCE_PROFILE_*`) of a loom
// profile, from its compute and memory slices: 1g of 1 memory slice: 0
// (1_SLICE), 1g of 2: 9 (1_SLICE_REV2), 2g: 1, 3g: 2, 4g: 3, 7g: 4; -1 for
// another shape. `MigComputeProfileId`: the compute instance profile
// (`NVML_COMPUTE_INSTANCE_PROFILE_*`) of all of a GPU instance's compute
// slices: 1: 0, 2: 1, 3: 2, 4: 3, 7: 4; -1 otherwise.
int NvmlGpuInstanceProfileId(const MigProfile& profile);
int NvmlComputeInstanceProfileId(int compute_slices);

// MIG through NVML: `dlopen`s `library` on first use and keeps it loaded
// and initialised (`nvmlInit_v2`) until destroyed. Calls
// nvmlDeviceGetHandleByIndex_v2, nvmlDeviceGetMigMode, nvmlDeviceSetMigMode,
// nvmlDeviceGetGpuInstanceProfileInfo, nvmlDeviceGetGpuInstances,
// nvmlGpuInstanceGetInfo, nvmlGpuInstanceGetComputeInstances,
// nvmlComputeInstanceDestroy, nvmlGpuInstanceDestroy,
// nvmlDeviceCreateGpuInstanceWithPlacement,
// nvmlGpuInstanceGetComputeInstanceProfileInfo,
// nvmlGpuInstanceCreateComputeInstance, nvmlDeviceGetMaxMigDeviceCount,
// nvmlDeviceGetMigDeviceHandleByIndex, nvmlDeviceGetGpuInstanceId and
// nvmlDeviceGetUUID. `gpus` (the probe's) give each GPU's model and memory,
// hence its profiles (`MigProfilesFor`).
class NvmlMigControl : public MigControl {
 public:
  explicit NvmlMigControl(std::vector<GpuDevice> gpus,
                          std::string library = "libnvidia-ml.so.1");
  ~NvmlMigControl() override;
  NvmlMigControl(const NvmlMigControl&) = delete;
  NvmlMigControl& operator=(const NvmlMigControl&) = delete;

  absl::StatusOr<std::vector<MigInstanceInfo>> Ensure(
      int gpu, const MigLayout& layout) override;
  absl::StatusOr<std::vector<MigInstanceInfo>> List(int gpu) override;
  absl::StatusOr<MigState> Describe(int gpu) override;
  absl::StatusOr<MigState> Disable(int gpu) override;
  absl::StatusOr<MigState> Settle(int gpu) override;

 private:
  struct Api;
  struct ModeNow;
  absl::Status Load() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Loads NVML and reads GPU `gpu`'s handle and its current and pending
  // MIG modes.
  absl::StatusOr<ModeNow> ReadMode(int gpu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::vector<GpuDevice> gpus_;
  const std::string library_;
  absl::Mutex mu_;
  std::unique_ptr<Api> api_ ABSL_GUARDED_BY(mu_);  // null until loaded
};

}  // namespace loom
