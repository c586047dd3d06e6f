#pragma once

// MIG (Multi-Instance GPU) geometry (issue 22, docs/scheduling.md "GPU
// partitions"): the GPU instance profiles NVIDIA defines for a GPU model,
// with its names, sizes, instance counts and placement rules, and the checks
// and searches on one GPU's layout that the scheduler and the agent share.
// Pure: no I/O.
//
// A MIG-capable GPU (A100, H100, H200) has 7 compute slices and 8 memory
// slices. A GPU instance of a profile takes `memory_slices` consecutive
// memory slices starting at one of the profile's allowed `starts` (NVML's
// `nvmlDeviceGetGpuInstancePossiblePlacements`, `start` and `size`), and
// `compute_slices` of the 7; instances never share a memory slice.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace loom {

inline constexpr int kMigMemorySlices = 8;
inline constexpr int kMigComputeSlices = 7;

struct MigProfile {
  std::string name;        // NVIDIA's: "1g.18gb", "3g.71gb", ...
  int compute_slices = 0;  // the "Ng" of the name: 1, 2, 3, 4 or 7
  int memory_slices = 0;   // of 8: 1, 2, 4 or 8
  int64_t memory_bytes = 0;
  int max_instances = 0;    // on one GPU, alone
  std::vector<int> starts;  // allowed first memory slices
};

// The profiles of a GPU model by its memory: "h200" with 141 GB, "a100"
// with 80 GB or 40 GB, "h100" with 80 GB; `model` as the cluster spec names
// it (lower case). Empty for a model that is not MIG-capable (or whose
// memory does not match a known product).
std::vector<MigProfile> MigProfilesFor(std::string_view model,
                                       int64_t gpu_memory_bytes);

// The profile named `name` in `profiles`, or null.
const MigProfile* FindMigProfile(const std::vector<MigProfile>& profiles,
                                 std::string_view name);

// One GPU instance on a GPU: its profile (an index into the GPU's
// profiles) and its first memory slice.
struct MigInstance {
  int profile = 0;
  int start = 0;
  bool operator==(const MigInstance&) const = default;
};

// OK when `layout` can exist on one GPU: known profiles, allowed starts,
// no memory slice taken twice, at most 7 compute slices in all. Otherwise
// InvalidArgument naming the instance and the rule.
absl::Status ValidateMigLayout(const std::vector<MigProfile>& profiles,
                               const std::vector<MigInstance>& layout);

// Where one more instance of `profile` fits on a GPU with `layout` (a valid
// one): the lowest allowed start whose memory slices are free, if the
// compute slices suffice; nullopt when it does not fit.
std::optional<int> FindMigStart(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout,
                                int profile);

// A bit per memory slice that `layout` takes (bit i: slice i).
uint32_t MigMemoryMask(const std::vector<MigProfile>& profiles,
                       const std::vector<MigInstance>& layout);

}  // namespace loom
