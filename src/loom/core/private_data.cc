#include "absl/strings/str_cat.h"
#include "loom/core/private_data_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom::internal {

absl::StatusOr<PrivateData> ParsePrivateData(const yaml::Reader& reader,
                                             const yaml::Field& field) {
  absl::StatusOr<std::vector<YAML::Node>> items =
      reader.ReadList(field.value, field.key, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  PrivateData p;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string path = yaml::ElementPath(field.key, i);
    absl::StatusOr<std::string> name = reader.ReadString(item, path);
    if (!name.ok()) return name.status();
    bool* flag = *name == "jobs"    ? &p.jobs
                 : *name == "usage" ? &p.usage
                                    : nullptr;
    if (flag == nullptr) {
      return reader.Error(item, path,
                          absl::StrCat("'", *name,
                                       "' is not one of jobs, usage (what "
                                       "plain users see only of their own)"));
    }
    if (*flag) {
      return reader.Error(item, path,
                          absl::StrCat("'", *name, "' is listed twice"));
    }
    *flag = true;
  }
  return p;
}

std::vector<std::string> PrivateDataNames(const PrivateData& p) {
  std::vector<std::string> out;
  if (p.jobs) out.push_back("jobs");
  if (p.usage) out.push_back("usage");
  return out;
}

}  // namespace loom::internal
