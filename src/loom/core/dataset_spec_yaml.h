#pragma once

// Reading and writing a job spec's `data:` (docs/datasets.md). Internal to
// `core`, like container_spec_yaml.h.

#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/dataset_spec.h"
#include "loom/core/yaml_util.h"
#include "nlohmann/json.hpp"

namespace loom::internal {

// A job spec's `data` field: a list of {source, mount}. Errors are
// `reader`'s, naming "data[i].<field>".
absl::StatusOr<std::vector<DatasetSpec>> ParseDataField(
    const yaml::Reader& reader, const yaml::Field& field);

// The canonical JSON of the list, which `ParseDataField` reads back.
nlohmann::ordered_json DatasetSpecsJson(const std::vector<DatasetSpec>& data);

}  // namespace loom::internal
