#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/pool_mig_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom::internal {

absl::StatusOr<MigPool> ParsePoolMig(const yaml::Reader& reader,
                                     const yaml::Field& field,
                                     absl::string_view path,
                                     const PoolSpec& pool,
                                     const GpuModel& model) {
  absl::StatusOr<yaml::MapNode> map = reader.ReadMap(
      field.value, std::string(path), {"gpus", "layout", "dynamic"});
  if (!map.ok()) return map.status();
  const std::vector<MigProfile> profiles =
      MigProfilesFor(model.name, pool.gpu_memory_bytes);
  if (profiles.empty()) {
    return reader.Error(
        field.value, path,
        absl::StrCat("GPU model ", model.name, " with ", pool.gpu_memory_bytes,
                     " bytes of memory has no MIG "
                     "profiles (MIG: h200 141GB, h100 80GB, a100 80GB or "
                     "40GB)"));
  }
  MigPool mig;
  mig.gpus = pool.gpus_per_node;
  if (const yaml::Field* f = map->Find("gpus"); f != nullptr) {
    const std::string at = yaml::ChildPath(path, "gpus");
    if (!(f->value.IsScalar() && f->value.Scalar() == "all")) {
      absl::StatusOr<int64_t> n =
          reader.ReadInt(f->value, at, 0, pool.gpus_per_node);
      if (!n.ok()) return n.status();
      mig.gpus = static_cast<int>(*n);
    }
  }
  if (const yaml::Field* f = map->Find("dynamic"); f != nullptr) {
    absl::StatusOr<bool> b =
        reader.ReadBool(f->value, yaml::ChildPath(path, "dynamic"));
    if (!b.ok()) return b.status();
    mig.dynamic = *b;
  }
  if (const yaml::Field* f = map->Find("layout"); f != nullptr) {
    const std::string at = yaml::ChildPath(path, "layout");
    absl::StatusOr<std::vector<YAML::Node>> items =
        reader.ReadList(f->value, at, /*allow_empty=*/true);
    if (!items.ok()) return items.status();
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string item_path = yaml::ElementPath(at, i);
      absl::StatusOr<std::string> name =
          reader.ReadString((*items)[i], item_path);
      if (!name.ok()) return name.status();
      int index = -1;
      for (size_t p = 0; p < profiles.size(); ++p) {
        if (profiles[p].name == *name) index = static_cast<int>(p);
      }
      if (index < 0) {
        std::vector<std::string> known;
        for (const MigProfile& p : profiles) known.push_back(p.name);
        return reader.Error(
            (*items)[i], item_path,
            absl::StrCat("unknown MIG profile '", *name, "' for ", model.name,
                         " (known: ", absl::StrJoin(known, ", "), ")"));
      }
      std::optional<int> start = FindMigStart(profiles, mig.layout, index);
      if (!start.has_value()) {
        return reader.Error(
            (*items)[i], item_path,
            absl::StrCat("'", *name, "' does not fit on the GPU after the ", i,
                         " instance(s) before it (7 compute and 8 memory "
                         "slices in all)"));
      }
      mig.layout.push_back({index, *start});
    }
  }
  if (mig.layout.empty() && mig.gpus > 0 && !mig.dynamic) {
    return reader.Error(field.value, path,
                        "needs a layout, or dynamic: true to let the "
                        "scheduler partition GPUs on demand");
  }
  return mig;
}

}  // namespace loom::internal
