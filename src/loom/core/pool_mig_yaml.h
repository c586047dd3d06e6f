#pragma once

// Reading a cluster spec pool's `mig:` (docs/cluster-spec.md). Internal to
// `core`, like yaml_util.h.

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "loom/core/cluster.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// A pool's `mig` field: {gpus: N | all, layout: [PROFILE, ...], dynamic:
// BOOL}. `gpus` defaults to all of the node's GPUs; `layout` names NVIDIA
// profiles of `pool`'s GPU model and memory (`MigProfilesFor`), each placed
// at the lowest memory slice it may take after the ones before it; an empty
// layout (or none) is allowed only with `dynamic: true` (the scheduler
// partitions on demand). Errors are `reader`'s, naming `path`.<key>: an
// unknown profile (with the known ones), a layout that does not fit one GPU,
// a GPU model without MIG.
absl::StatusOr<MigPool> ParsePoolMig(const yaml::Reader& reader,
                                     const yaml::Field& field,
                                     absl::string_view path,
                                     const PoolSpec& pool,
                                     const GpuModel& model);

}  // namespace loom::internal
