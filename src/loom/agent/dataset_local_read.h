#pragma once

// Reading a dataset whose source is a local (or NFS) path with the rights
// of the job's user (docs/datasets.md "Local sources and mount points",
// docs/security.md): the agent runs as root, and a local source is a path a
// user named, so every file of it is opened as that user, and only the
// bytes go into the cache, which root alone writes. On NFS with
// root_squash this is also what lets the agent read the user's files.
//
// The user's rights are taken by the calling thread alone, for each open
// (the thread's fsuid, fsgid and groups, through the raw system calls,
// which change one thread's credentials; glibc's wrappers would change
// every thread's): each call runs on a thread of its own, so no other
// work of the agent ever runs with them.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "loom/common/user_account.h"
#include "loom/core/dataset_spec.h"

namespace loom {

// Copies `entries` (paths relative to `source`, as its listing gives them)
// into `dir` (root's), each opened as `reader` without following a link at
// its last component (rclone's listing skips links too) and refused unless
// it is a regular file of its listed size; written as `<path>.part`
// (0644, root's, never through a link) and renamed. A file already in
// `dir` with its listed size is skipped. `progress` gets the bytes copied
// so far. Errors: PermissionDenied naming the user and the file it may not
// read; DataLoss for a file that changed since its listing; the errno of a
// failed write otherwise.
absl::Status CopyLocalSourceAs(const UserAccount& reader,
                               const std::string& source,
                               const std::vector<DatasetEntry>& entries,
                               const std::string& dir,
                               const std::function<void(int64_t)>& progress);

// Whether `reader` may read every file of `entries` under `source` (each
// opened as that user, as `CopyLocalSourceAs` does, and closed): for a
// version already cached, or copied from a peer, before a task of that
// user sees it. PermissionDenied naming the first file it may not read.
absl::Status CheckLocalSourceReadable(const UserAccount& reader,
                                      const std::string& source,
                                      const std::vector<DatasetEntry>& entries);

}  // namespace loom
