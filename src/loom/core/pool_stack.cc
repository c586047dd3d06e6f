#include "loom/core/pool_stack_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom::internal {

absl::StatusOr<std::map<std::string, std::string>> ParsePoolStack(
    const yaml::Reader& reader, const yaml::Field& field,
    absl::string_view path) {
  absl::StatusOr<yaml::MapNode> map = reader.ReadMap(
      field.value, std::string(path), {"driver", "cuda", "loom"});
  if (!map.ok()) return map.status();
  std::map<std::string, std::string> stack;
  for (const yaml::Field& f : map->fields) {
    absl::StatusOr<std::string> value =
        reader.ReadString(f.value, yaml::ChildPath(path, f.key));
    if (!value.ok()) return value.status();
    stack[f.key] = *std::move(value);
  }
  return stack;
}

}  // namespace loom::internal
