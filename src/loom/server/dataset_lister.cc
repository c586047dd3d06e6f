#include "loom/server/dataset_lister.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/rclone.h"

namespace loom {

DatasetListing SummarizeListing(const std::string& source,
                                const std::vector<DatasetEntry>& entries) {
  DatasetListing l;
  l.version = DatasetVersion(source, entries);
  l.files = static_cast<int64_t>(entries.size());
  for (const DatasetEntry& e : entries) l.bytes += e.size;
  return l;
}

absl::StatusOr<std::vector<DatasetEntry>> RcloneDatasetLister::List(
    const std::string& source, absl::Duration timeout) {
  absl::StatusOr<std::string> out =
      RcloneListJson({rclone_, config_}, source, timeout);
  if (!out.ok()) {
    return absl::Status(out.status().code(),
                        RcloneErrorText(std::string(out.status().message())));
  }
  absl::StatusOr<std::vector<DatasetEntry>> entries = ParseRcloneLsjson(*out);
  if (!entries.ok()) {
    return absl::InternalError(
        absl::StrCat("rclone lsjson: ", entries.status().message()));
  }
  return entries;
}

}  // namespace loom
