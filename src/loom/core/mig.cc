#include "loom/core/mig.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

// NVIDIA's profile geometry for GPUs of 7 compute and 8 memory slices (the
// MIG user guide's "Supported MIG Profiles"; the same on A100, H100 and
// H200): name prefix, compute slices, memory slices, instances, starts. The
// memory of a profile is its share of the GPU's, named as NVIDIA rounds it.
struct Geometry {
  const char* prefix;
  int compute, memory, instances;
  std::vector<int> starts;
};
const std::vector<Geometry>& Geometries() {
  static const std::vector<Geometry> g = {
      {"1g", 1, 1, 7, {0, 1, 2, 3, 4, 5, 6}},
      {"1g", 1, 2, 4, {0, 2, 4, 6}},
      {"2g", 2, 2, 3, {0, 2, 4}},
      {"3g", 3, 4, 2, {0, 4}},
      {"4g", 4, 4, 1, {0}},
      {"7g", 7, 8, 1, {0}},
  };
  return g;
}

// The memory part of the names, per geometry row, of each product.
struct Product {
  const char* model;
  int memory_gb;              // as the product is named: 141, 80, 40
  std::vector<int> names_gb;  // per row of `Geometries()`
};
const std::vector<Product>& Products() {
  static const std::vector<Product> p = {
      {"h200", 141, {18, 35, 35, 71, 71, 141}},
      {"h100", 80, {10, 20, 20, 40, 40, 80}},
      {"a100", 80, {10, 20, 20, 40, 40, 80}},
      {"a100", 40, {5, 10, 10, 20, 20, 40}},
  };
  return p;
}

}  // namespace

std::vector<MigProfile> MigProfilesFor(std::string_view model,
                                       int64_t gpu_memory_bytes) {
  // The product whose named size is nearest the GPU's memory, within 15%
  // (an H200 reports 141 GiB or 143 GB, an A100 80 GB 79.6 GiB).
  const Product* best = nullptr;
  double best_diff = 0.15;
  for (const Product& p : Products()) {
    if (p.model != model) continue;
    const double named = static_cast<double>(p.memory_gb) * 1e9;
    const double diff =
        std::abs(static_cast<double>(gpu_memory_bytes) - named) / named;
    if (diff <= best_diff) {
      best = &p;
      best_diff = diff;
    }
  }
  std::vector<MigProfile> out;
  if (best == nullptr) return out;
  const std::vector<Geometry>& rows = Geometries();
  for (size_t i = 0; i < rows.size(); ++i) {
    MigProfile m;
    m.name = absl::StrCat(rows[i].prefix, ".", best->names_gb[i], "gb");
    m.compute_slices = rows[i].compute;
    m.memory_slices = rows[i].memory;
    m.memory_bytes = gpu_memory_bytes / kMigMemorySlices * rows[i].memory;
    m.max_instances = rows[i].instances;
    m.starts = rows[i].starts;
    out.push_back(std::move(m));
  }
  return out;
}

const MigProfile* FindMigProfile(const std::vector<MigProfile>& profiles,
                                 std::string_view name) {
  for (const MigProfile& p : profiles) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

uint32_t MigMemoryMask(const std::vector<MigProfile>& profiles,
                       const std::vector<MigInstance>& layout) {
  uint32_t mask = 0;
  for (const MigInstance& in : layout) {
    if (in.profile < 0 || in.profile >= static_cast<int>(profiles.size())) {
      continue;
    }
    const int size = profiles[in.profile].memory_slices;
    for (int s = in.start; s < in.start + size && s < kMigMemorySlices; ++s) {
      if (s >= 0) mask |= uint32_t{1} << s;
    }
  }
  return mask;
}

absl::Status ValidateMigLayout(const std::vector<MigProfile>& profiles,
                               const std::vector<MigInstance>& layout) {
  uint32_t taken = 0;
  int compute = 0;
  for (size_t i = 0; i < layout.size(); ++i) {
    const MigInstance& in = layout[i];
    const std::string at = absl::StrCat("instance ", i);
    if (in.profile < 0 || in.profile >= static_cast<int>(profiles.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ": no profile ", in.profile));
    }
    const MigProfile& p = profiles[in.profile];
    bool allowed = false;
    for (int s : p.starts) allowed |= s == in.start;
    if (!allowed) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, " (", p.name, "): may not start at memory slice ", in.start));
    }
    uint32_t mine = 0;
    for (int s = in.start; s < in.start + p.memory_slices; ++s) {
      mine |= uint32_t{1} << s;
    }
    if (mine & taken) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, " (", p.name, " at ", in.start,
                       "): its memory slices overlap another instance's"));
    }
    taken |= mine;
    compute += p.compute_slices;
    if (compute > kMigComputeSlices) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, " (", p.name, "): more than ", kMigComputeSlices,
                       " compute slices in all"));
    }
  }
  return absl::OkStatus();
}

std::optional<int> FindMigStart(const std::vector<MigProfile>& profiles,
                                const std::vector<MigInstance>& layout,
                                int profile) {
  if (profile < 0 || profile >= static_cast<int>(profiles.size())) {
    return std::nullopt;
  }
  int compute = 0;
  for (const MigInstance& in : layout) {
    if (in.profile >= 0 && in.profile < static_cast<int>(profiles.size())) {
      compute += profiles[in.profile].compute_slices;
    }
  }
  const MigProfile& p = profiles[profile];
  if (compute + p.compute_slices > kMigComputeSlices) return std::nullopt;
  const uint32_t taken = MigMemoryMask(profiles, layout);
  for (int start : p.starts) {
    uint32_t mine = 0;
    for (int s = start; s < start + p.memory_slices; ++s) {
      mine |= uint32_t{1} << s;
    }
    if ((mine & taken) == 0) return start;
  }
  return std::nullopt;
}

}  // namespace loom
