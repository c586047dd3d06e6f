#pragma once

#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/mig_control.h"

namespace loom {

// MIG of emulated GPUs, in memory: the same rules as `NvmlMigControl`
// (a GPU whose model and memory `MigProfilesFor` knows is capable; MIG mode
// starts off), UUIDs derived from the node's name, the GPU, the profile and
// the start (the same instance gets the same UUID again, also after an
// agent restart). When `log_path` is not empty, each NVML call that would
// change the GPU is appended to it as one line, in the format of the test
// stand-in NVML library's `LOOM_FAKE_NVML_LOG`, with ` node=NAME` at the
// end (`nvmlDeviceCreateGpuInstanceWithPlacement gpu=0 profile=0 start=2
// size=1 node=h200-0`). The state does not survive the agent.
class EmulatedMigControl : public MigControl {
 public:
  EmulatedMigControl(std::string node_name, std::vector<GpuDevice> gpus,
                     std::string log_path = "");

  absl::StatusOr<std::vector<MigInstanceInfo>> Ensure(
      int gpu, const MigLayout& layout) override;
  absl::StatusOr<std::vector<MigInstanceInfo>> List(int gpu) override;
  absl::StatusOr<MigState> Describe(int gpu) override;
  absl::StatusOr<MigState> Disable(int gpu) override;
  absl::StatusOr<MigState> Settle(int gpu) override;

  // Injected faults (`POST /v1/faults`, fault_injector.h). `Hold`: another
  // process holds GPU `gpu` open (or not), so that a change of MIG mode
  // waits, as NVML's does (`NVML_ERROR_IN_USE`). `Reset`: the GPU is reset
  // (`nvidia-smi -r`): a waiting mode takes effect, its instances are gone,
  // and nothing holds it any more. InvalidArgument for a GPU the node lacks.
  absl::Status Hold(int gpu, bool held);
  absl::Status Reset(int gpu);

 private:
  struct Instance {
    int id = 0;  // the GPU instance id
    MigInstanceInfo info;
  };
  struct Gpu {
    std::vector<MigProfile> profiles;
    bool enabled = false;  // MIG mode now
    bool pending = false;  // the mode asked for (== enabled: none waits)
    bool held = false;     // held open by another process (a fault)
    std::vector<Instance> instances;
  };
  // Asks for MIG mode `on`: it takes effect unless the GPU is held.
  void SetMode(int gpu, Gpu& g, bool on) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MigState StateOf(const Gpu& g) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `InvalidArgument` for an index the node lacks.
  absl::StatusOr<Gpu*> Find(int gpu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(const std::string& line) const;

  const std::string node_name_;
  const std::string log_path_;
  absl::Mutex mu_;
  std::vector<Gpu> gpus_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
