#include "loom/server/dataset_lister.h"

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace loom {

DatasetListing SummarizeListing(const std::vector<DatasetEntry>& entries) {
  DatasetListing l;
  l.version = DatasetVersion(entries);
  l.files = static_cast<int64_t>(entries.size());
  for (const DatasetEntry& e : entries) l.bytes += e.size;
  return l;
}

absl::StatusOr<std::vector<DatasetEntry>> RcloneDatasetLister::List(
    const std::string& source, absl::Duration timeout) {
  std::vector<std::string> argv = {rclone_,
                                   "lsjson",
                                   "-R",
                                   "--files-only",
                                   "--retries",
                                   "1",
                                   "--low-level-retries",
                                   "1",
                                   "--contimeout",
                                   "5s"};
  if (!config_.empty()) {
    argv.push_back("--config");
    argv.push_back(config_);
  }
  argv.push_back("--");
  argv.push_back(source);
  absl::StatusOr<std::string> out =
      RunForOutput(argv, timeout, size_t{256} << 20);
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
