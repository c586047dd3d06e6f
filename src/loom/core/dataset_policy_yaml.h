#pragma once

// Reading a cluster spec's `datasets:` (dataset_policy.h). Internal to
// `core`, like container_spec_yaml.h: yaml-cpp is a private dependency of
// `loom_core`, so no public header may include this one.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/dataset_policy.h"
#include "loom/core/yaml_util.h"

namespace loom::internal {

// {local_roots: [DIR, ...], mount_roots: [DIR, ...]}. Errors name the file,
// line and field ("datasets.mount_roots[1]: ...").
absl::StatusOr<DatasetPolicy> ParseDatasetPolicy(const yaml::Reader& reader,
                                                 const yaml::Field& field);

// A list of absolute host directories at `path` (`field`'s value): each
// normalised, none "/" (which would allow everything), none twice. `what`
// says in an error what the list allows ("lets jobs mount every host
// path").
absl::StatusOr<std::vector<std::string>> ReadDirectoryList(
    const yaml::Reader& reader, const yaml::Field& field,
    const std::string& path, const std::string& what);

}  // namespace loom::internal
