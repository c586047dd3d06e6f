#pragma once

// The host side of a job's `container.mounts` (docs/images.md, "Mounts"):
// the agent, as root, opens each source once, the way the task's user
// would reach it and without following a symbolic link, checks what it
// opened, and binds that, never the path again. A source swapped for a link
// while the image is pulled changes nothing: the task gets what was
// checked.
//
// Thread-safe: each call works on descriptors of its own (the user's rights
// are taken on a thread of its own, which ends with the call).

#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// A descriptor, closed with the object.
class OwnedFd {
 public:
  OwnedFd() = default;
  explicit OwnedFd(int fd) : fd_(fd) {}
  OwnedFd(OwnedFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  OwnedFd& operator=(OwnedFd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  ~OwnedFd();

  int get() const { return fd_; }

 private:
  int fd_ = -1;
};

// Whose rights a path is resolved with: a task's user and the groups its
// processes get.
struct PathUser {
  std::string name;  // for messages
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary
};

// What `OpenMountSource` opened.
struct MountSource {
  OwnedFd fd;  // O_PATH
  bool directory = false;
};

// Opens `path` (absolute, normalised: no "." or ".." components) with
// O_PATH, resolving every component without following a symbolic link
// (openat2 RESOLVE_NO_SYMLINKS; where the kernel lacks openat2, or
// `use_openat2` is false, one component at a time with O_NOFOLLOW), with
// the rights of `user` when set (its file system uid and gid and its
// groups, so that a directory it may not search stops the walk as it would
// stop the user), else with the caller's. The result must be a directory or
// a regular file. Errors name the path:
//   FailedPrecondition: a symbolic link on the way ("/data/a/x is a
//     symbolic link"), or something that is neither a directory nor a
//     regular file;
//   PermissionDenied: `user` may not reach it;
//   NotFound: it does not exist; others: the errno of what failed.
[[nodiscard]] absl::StatusOr<MountSource> OpenMountSource(
    const std::string& path, const std::optional<PathUser>& user,
    bool use_openat2 = true);

// A detached copy of the mounts at the opened `source` and below
// (open_tree(2) OPEN_TREE_CLONE | AT_RECURSIVE), close-on-exec: what a
// task's process attaches in its own mount namespace (`TaskMount::tree_fd`).
// A copy is attached once: a task of several processes needs one each.
// FailedPrecondition naming `path` where the kernel has no open_tree
// (Linux before 5.2).
[[nodiscard]] absl::StatusOr<OwnedFd> CloneMountTree(const MountSource& source,
                                                     const std::string& path);

}  // namespace loom
