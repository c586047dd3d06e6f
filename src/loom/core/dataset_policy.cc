#include "loom/core/dataset_policy.h"

#include <algorithm>
#include <array>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/container_spec.h"
#include "loom/core/dataset_policy_yaml.h"

namespace loom {
namespace {

constexpr std::array<std::string_view, 16> kSystemDirectories = {
    "/bin",  "/boot",   "/dev",  "/etc", "/lib", "/lib32", "/lib64", "/libx32",
    "/proc", "/root",   "/run",  "/sbin", "/sys", "/usr",  "/var",  "/snap"};

bool UnderAny(std::string_view path, const std::vector<std::string>& dirs) {
  return std::any_of(dirs.begin(), dirs.end(), [&](const std::string& d) {
    return PathIsUnder(path, d);
  });
}

std::string Roots(const std::vector<std::string>& dirs) {
  return dirs.empty() ? std::string("none") : absl::StrJoin(dirs, ", ");
}

}  // namespace

bool IsSystemDirectory(std::string_view path) {
  if (path.empty() || path == "/") return true;
  return std::any_of(
      kSystemDirectories.begin(), kSystemDirectories.end(),
      [&](std::string_view d) { return PathIsUnder(path, d); });
}

absl::Status CheckJobDatasets(const DatasetPolicy& policy,
                              const std::vector<DatasetSpec>& data) {
  for (size_t i = 0; i < data.size(); ++i) {
    const DatasetSpec& d = data[i];
    const std::string path = absl::StrCat("data[", i, "]");
    if (!d.source.empty() && d.source[0] == '/' &&
        !UnderAny(d.source, policy.local_roots)) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".source: '", d.source,
          "' is a local path, and the cluster lets jobs read local "
          "directories only under its datasets.local_roots (",
          Roots(policy.local_roots),
          "); use a remote of the cluster's rclone config, or ask an "
          "operator"));
    }
    if (IsSystemDirectory(d.mount)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ".mount: '", d.mount,
                       "' is a system directory of the node; mount datasets "
                       "under ",
                       Roots(policy.mount_roots)));
    }
    if (!UnderAny(d.mount, policy.mount_roots) ||
        std::find(policy.mount_roots.begin(), policy.mount_roots.end(),
                  d.mount) != policy.mount_roots.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ".mount: '", d.mount,
          "' is not under a directory the cluster lets datasets be mounted "
          "in (datasets.mount_roots: ",
          Roots(policy.mount_roots), ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom

namespace loom::internal {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;

absl::StatusOr<std::vector<std::string>> ReadDirectoryList(
    const yaml::Reader& r, const Field& f, const std::string& path,
    const std::string& what) {
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(f.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  std::vector<std::string> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    const YAML::Mark mark = item.Mark().line >= 0 ? item.Mark() : f.value.Mark();
    if (item.IsNull()) {
      return r.Error(mark, item_path,
                     "has no value (write an absolute host directory)");
    }
    if (!item.IsScalar()) {
      return r.Error(item, item_path,
                     absl::StrCat("must be a string, got ", KindOf(item)));
    }
    const std::string text = yaml::ScalarText(item);
    if (text.find('\0') != std::string::npos) {
      return r.Error(item, item_path, "must not contain NUL characters");
    }
    absl::StatusOr<std::string> dir = NormalizeAbsolutePath(text);
    if (!dir.ok()) return r.Error(item, item_path, dir.status().message());
    if (*dir == "/") {
      return r.Error(item, item_path,
                     absl::StrCat("must not be '/': it would let jobs ", what,
                                  "; list the directories jobs may use"));
    }
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k] == *dir) {
        return r.Error(item, item_path,
                       absl::StrCat("'", *dir, "' is already listed as ",
                                    ElementPath(path, k)));
      }
    }
    out.push_back(*std::move(dir));
  }
  return out;
}

absl::StatusOr<DatasetPolicy> ParseDatasetPolicy(const yaml::Reader& r,
                                                 const Field& field) {
  absl::StatusOr<MapNode> map =
      r.ReadMap(field.value, field.key, {"local_roots", "mount_roots"});
  if (!map.ok()) return map.status();
  DatasetPolicy policy;
  if (const Field* f = map->Find("local_roots"); f != nullptr) {
    absl::StatusOr<std::vector<std::string>> dirs = ReadDirectoryList(
        r, *f, ChildPath(map->path, "local_roots"), "read every host file");
    if (!dirs.ok()) return dirs.status();
    policy.local_roots = *std::move(dirs);
  }
  if (const Field* f = map->Find("mount_roots"); f != nullptr) {
    const std::string path = ChildPath(map->path, "mount_roots");
    absl::StatusOr<std::vector<std::string>> dirs =
        ReadDirectoryList(r, *f, path, "mount datasets over the whole host");
    if (!dirs.ok()) return dirs.status();
    for (size_t i = 0; i < dirs->size(); ++i) {
      if (IsSystemDirectory((*dirs)[i])) {
        return r.Error(f->value, ElementPath(path, i),
                       absl::StrCat("'", (*dirs)[i],
                                    "' is a system directory of the nodes; "
                                    "datasets are never mounted there"));
      }
    }
    policy.mount_roots = *std::move(dirs);
  }
  return policy;
}

}  // namespace loom::internal
