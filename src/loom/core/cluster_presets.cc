// The built-in presets and reading a cluster spec by preset name or path.

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

// A built-in cluster: its YAML goes through `ParseClusterSpec` like any file.
struct Preset {
  absl::string_view name;
  absl::string_view summary;
  absl::string_view yaml;
};

constexpr Preset kPresets[] = {
    {"small",
     "28 nodes, 224 GPUs: 18 nodes of 8x H200-141GB plus 10 of 8x A100-80GB "
     "on one leaf/spine fabric",
     R"yaml(
name: small
pools:
  - {name: h200, nodes: 18, gpu: {model: h200, count: 8, memory: 141Gi},
     cpus: 192, memory: 2Ti, nvme: 15Ti, nics: 8}
  - {name: a100, nodes: 10, gpu: {model: a100, count: 8, memory: 80Gi},
     cpus: 96, memory: 1Ti, nvme: 8Ti, nics: 8}
network: {nodes_per_leaf: 16, leaves_per_spine: 8}
)yaml"},
    {"large",
     "2,000 nodes of 8x H200 (16,000 GPUs) on a 3-tier fat-tree: 125 leaves, "
     "16 spines, one core",
     R"yaml(
name: large
pools:
  - {name: h200, nodes: 2000, gpu: {model: h200, count: 8, memory: 141Gi},
     cpus: 192, memory: 2Ti, nvme: 15Ti, nics: 8}
network: {nodes_per_leaf: 16, leaves_per_spine: 8}
)yaml"},
};

const Preset* FindPreset(std::string_view name) {
  const absl::string_view wanted(name.data(), name.size());
  for (const Preset& p : kPresets) {
    if (p.name == wanted) return &p;
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> ClusterPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  return names;
}

std::string ClusterPresetSummary(std::string_view name) {
  const Preset* p = FindPreset(name);
  return p == nullptr ? std::string() : std::string(p->summary);
}

absl::StatusOr<Cluster> ClusterPreset(std::string_view name) {
  const Preset* p = FindPreset(name);
  const std::string name_text(name);
  if (p == nullptr) {
    return absl::NotFoundError(absl::StrCat(
        "no cluster preset '", name_text,
        "' (presets: ", absl::StrJoin(ClusterPresetNames(), ", "), ")"));
  }
  absl::StatusOr<Cluster> cluster =
      ParseClusterSpec(std::string(p->yaml), absl::StrCat("preset:", p->name));
  if (!cluster.ok()) {
    return absl::InternalError(
        absl::StrCat("built-in preset '", name_text,
                     "' does not parse: ", cluster.status().message()));
  }
  return cluster;
}

absl::StatusOr<ClusterSpecText> ReadClusterSpec(std::string_view name_or_path) {
  if (name_or_path.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no cluster given; name a preset (",
        absl::StrJoin(ClusterPresetNames(), ", "), ") or a cluster spec file"));
  }
  if (const Preset* p = FindPreset(name_or_path); p != nullptr) {
    return ClusterSpecText{std::string(p->yaml),
                           absl::StrCat("preset:", p->name)};
  }

  const std::string path(name_or_path);
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat(
        "cluster '", path, "' is neither a preset (",
        absl::StrJoin(ClusterPresetNames(), ", "), ") nor an existing file"));
  }
  if (std::filesystem::is_directory(status)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, not a cluster spec file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int error = errno;
    return absl::ErrnoToStatus(
        error, absl::StrCat(path, ": cannot read the cluster spec"));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    return absl::DataLossError(
        absl::StrCat(path, ": reading the cluster spec failed"));
  }
  return ClusterSpecText{text.str(), path};
}

absl::StatusOr<Cluster> LoadCluster(std::string_view name_or_path) {
  absl::StatusOr<ClusterSpecText> spec = ReadClusterSpec(name_or_path);
  if (!spec.ok()) return spec.status();
  if (spec->source.rfind("preset:", 0) == 0) {
    return ClusterPreset(name_or_path);
  }
  return ParseClusterSpec(spec->text, spec->source);
}

}  // namespace loom
