#pragma once

// Reading a cluster spec pool's `stack:` (docs/cluster-spec.md). Internal to
// `core`, like yaml_util.h.

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// A pool's `stack` field: {driver: VERSION, cuda: VERSION, loom: VERSION},
// each optional, each a non-empty string as written ("12.4" stays "12.4").
// Unknown keys are errors. Errors are `reader`'s, naming `path`.<key>.
absl::StatusOr<std::map<std::string, std::string>> ParsePoolStack(
    const yaml::Reader& reader, const yaml::Field& field,
    absl::string_view path);

}  // namespace loom::internal
