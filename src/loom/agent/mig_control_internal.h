#pragma once

// What the MIG controls share (mig_control.cc, emulated_mig_control.cc): a
// layout's profiles resolved on one GPU, and instances in order. Internal
// to the agent's MIG code.

#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/mig_control.h"
#include "loom/core/mig.h"

namespace loom::mig_internal {

struct Resolved {
  const MigProfile* profile;
  int start;
};

// The profiles of `layout` on a GPU with `profiles`; `InvalidArgument`
// naming the GPU for an unknown name or a layout that cannot exist.
absl::StatusOr<std::vector<Resolved>> ResolveLayout(
    int gpu, const std::vector<MigProfile>& profiles, const MigLayout& layout);

// Sorts instances by their first memory slice.
void SortByStart(std::vector<MigInstanceInfo>& v);

}  // namespace loom::mig_internal
