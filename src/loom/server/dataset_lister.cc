#include "loom/server/dataset_lister.h"

#include <unistd.h>

#include <optional>
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
    const std::string& source, const std::string& user,
    absl::Duration timeout) {
  RcloneOptions options{rclone_, config_};
  std::optional<UserAccount> account;
  if (!source.empty() && source[0] == '/' && ::geteuid() == 0) {
    if (user.empty()) {
      return absl::PermissionDeniedError(
          "a local source is read with its job's user's rights, and the job "
          "names no user");
    }
    absl::StatusOr<UserAccount> found = LookUpSystemUser(user);
    if (absl::IsNotFound(found.status())) {
      return absl::PermissionDeniedError(absl::StrCat(
          "a local source is read with its job's user's rights, and the "
          "server's host has no user '",
          user, "'"));
    }
    if (!found.ok()) return absl::UnavailableError(found.status().message());
    if (found->uid != 0) {
      account = *std::move(found);
      options.as = &*account;
    }
  }
  absl::StatusOr<std::string> out = RcloneListJson(options, source, timeout);
  // Listed as its user, a path that is missing and one the user may not
  // see fail alike (rclone says "directory not found" for both): the user
  // learns no more than `ls` would tell them.
  if (!out.ok() && options.as != nullptr &&
      out.status().code() == absl::StatusCode::kUnavailable) {
    return absl::PermissionDeniedError(absl::StrCat(
        "user ", user, " cannot list it: ",
        RcloneErrorText(std::string(out.status().message()))));
  }
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
