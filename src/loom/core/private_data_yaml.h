#pragma once

// Reading and writing a cluster spec's `private_data:` (docs/cluster-spec.md,
// "private_data"). Internal to `core`, like yaml_util.h.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// A cluster spec's `private_data` field: a list of `jobs` and `usage`, each
// at most once (an empty list: nothing private). Errors are `reader`'s,
// naming "private_data[i]".
absl::StatusOr<PrivateData> ParsePrivateData(const yaml::Reader& reader,
                                             const yaml::Field& field);

// The names of what `p` makes private, in the spec's order ("jobs",
// "usage"): what `ParsePrivateData` reads back to `p`.
std::vector<std::string> PrivateDataNames(const PrivateData& p);

}  // namespace loom::internal
