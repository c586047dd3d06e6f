#pragma once

// Reading and writing the container parts of the specs: a job spec's
// `container:` and a cluster spec's `containers:`. Internal to `core`, like
// yaml_util.h (yaml-cpp and nlohmann_json are private dependencies of
// `loom_core`, so no public header may include this one).

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/core/container_spec.h"
#include "loom/core/yaml_util.h"
#include "nlohmann/json.hpp"

namespace loom::internal {

// A job spec's `container` field (its key is the field path). Errors are
// `reader`'s, naming "container.<field>".
absl::StatusOr<ContainerSpec> ParseContainerField(const yaml::Reader& reader,
                                                  const yaml::Field& field);

// The canonical JSON of a container spec, which `ParseContainerField` reads
// back to an equal spec.
nlohmann::ordered_json ContainerSpecJson(const ContainerSpec& spec);

// A cluster spec's `containers` field: {allowed_mounts: [DIR, ...],
// allowed_registries: [HOST[:PORT], ...]}.
absl::StatusOr<ContainerPolicy> ParseContainerPolicy(const yaml::Reader& reader,
                                                     const yaml::Field& field);

}  // namespace loom::internal
