#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/cluster.h"

namespace loom {

// Parses a cluster spec (YAML, documented in docs/cluster-spec.md) into a
// `Cluster`. `source` names the file in error messages, which read
// "<source>:<line>:<column>: <field path>: <reason>", for example
// "cluster.yaml:4:18: pools[1].gpu.count: must be between 1 and 16".
// Unknown fields are errors.
absl::StatusOr<Cluster> ParseClusterSpec(std::string_view yaml,
                                         std::string_view source);

// The names of the built-in presets ("small", "large").
std::vector<std::string> ClusterPresetNames();

// A one-line description of a preset, for `--help`.
std::string ClusterPresetSummary(std::string_view name);

// Returns the built-in preset `name`, or NotFound.
absl::StatusOr<Cluster> ClusterPreset(std::string_view name);

// A cluster spec's text and where it came from ("preset:small" or the
// path), the `source` that `ParseClusterSpec` names in errors.
struct ClusterSpecText {
  std::string text;
  std::string source;
};

// Reads what a user passes as `--cluster` or `-f`: a preset's YAML, else
// the file at that path (NotFound, InvalidArgument for a directory, or the
// read error, naming it).
absl::StatusOr<ClusterSpecText> ReadClusterSpec(std::string_view name_or_path);

// Resolves what a user passes as `--cluster`: a preset name, else a path to
// a YAML file that is read and parsed.
absl::StatusOr<Cluster> LoadCluster(std::string_view name_or_path);

}  // namespace loom
