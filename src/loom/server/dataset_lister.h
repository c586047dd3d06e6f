#pragma once

// Listing a dataset's source to find its version (docs/datasets.md): the
// `DatasetLister` interface, `RcloneDatasetLister` (`rclone lsjson -R` with
// the operator's rclone config) and the pure pieces around it.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/common/run_command.h"
#include "loom/core/dataset_spec.h"

namespace loom {

// What the server knows of one dataset of a job's run.
struct DatasetListing {
  std::string version;  // `DatasetVersion` of the listing
  int64_t files = 0;
  int64_t bytes = 0;
};

// Lists a source (REMOTE:PATH or an absolute path) for the job of Unix
// user `user` (empty: not named). Implementations are thread-safe; `List`
// may block up to `timeout` and is never called under the controller's
// lock. An unreachable or failing store is Unavailable (DeadlineExceeded
// when it did not answer in time) with what the store said; a listing that
// cannot be read is Internal; a local source its user may not list (or a
// user the host does not have) is PermissionDenied.
class DatasetLister {
 public:
  virtual ~DatasetLister() = default;
  virtual absl::StatusOr<std::vector<DatasetEntry>> List(
      const std::string& source, const std::string& user,
      absl::Duration timeout) = 0;
};

// Runs `rclone lsjson` (`RcloneListJson`: recursive, files only, with the
// remote's md5 or sha1 where it gives one) with the operator's config
// (rclone's default when `config` is empty). A local source, on a server
// that runs as root, is listed as its job's user (no config): a user never
// learns through the server what only root may list.
class RcloneDatasetLister : public DatasetLister {
 public:
  explicit RcloneDatasetLister(std::string config,
                               std::string rclone = "rclone")
      : config_(std::move(config)), rclone_(std::move(rclone)) {}
  absl::StatusOr<std::vector<DatasetEntry>> List(
      const std::string& source, const std::string& user,
      absl::Duration timeout) override;

 private:
  const std::string config_;
  const std::string rclone_;
};

// The version, file count and bytes of a listing of `source`.
DatasetListing SummarizeListing(const std::string& source,
                                const std::vector<DatasetEntry>& entries);

}  // namespace loom
