#pragma once

// Reading a job spec's `dependency:` (docs/job-spec.md). Internal to `core`,
// like yaml_util.h.

#include <string>

#include "absl/status/statusor.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// The `dependency` field: a string in Slurm's syntax (`ParseDependency`),
// returned in its canonical form. Errors are `reader`'s, naming the field:
// "job.yaml:3:13: dependency: 'afterok:x': job ids are numbers".
absl::StatusOr<std::string> ParseDependencyField(const yaml::Reader& reader,
                                                 const yaml::Field& field);

}  // namespace loom::internal
