#include "loom/agent/mount_source.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif

namespace loom {
namespace {

// The components of `path`: none is "", "." or "..".
absl::StatusOr<std::vector<std::string>> Components(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("mount source '", path, "' is not an absolute path"));
  }
  std::vector<std::string> parts;
  for (absl::string_view p : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (p == "." || p == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          "mount source '", path, "' has a '.' or '..' component"));
    }
    parts.emplace_back(p);
  }
  return parts;
}

// `path` by openat2, no symbolic link followed (magic links of /proc
// neither). -1 with errno; ENOSYS where the kernel lacks openat2.
int OpenWithOpenat2(const std::string& path) {
  open_how how{};
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(
      ::syscall(SYS_openat2, AT_FDCWD, path.c_str(), &how, sizeof(how)));
}

// `parts` from "/", one component at a time: each opened O_PATH|O_NOFOLLOW
// in the one before, a link refused (ELOOP). -1 with errno.
int OpenByWalk(const std::vector<std::string>& parts) {
  int cur = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (size_t i = 0; cur >= 0 && i < parts.size(); ++i) {
    const int next =
        ::openat(cur, parts[i].c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    const int err = errno;
    ::close(cur);
    if (next < 0) {
      errno = err;
      return -1;
    }
    struct stat st;
    int bad = 0;
    if (::fstat(next, &st) != 0) {
      bad = errno;
    } else if (S_ISLNK(st.st_mode)) {
      bad = ELOOP;
    } else if (i + 1 < parts.size() && !S_ISDIR(st.st_mode)) {
      bad = ENOTDIR;
    }
    if (bad != 0) {
      ::close(next);
      errno = bad;
      return -1;
    }
    cur = next;
  }
  return cur;
}

// Runs `open` on a thread of its own whose file system ids and groups are
// `user`'s (raw system calls: they change the calling thread only, where
// glibc's wrappers would change every thread of the agent). Returns what
// `open` returned, with its errno in `*err`.
int OpenAsUser(const PathUser& user, const std::function<int()>& open,
               int* err) {
  int fd = -1;
  std::thread worker([&] {
    if (::syscall(SYS_setgroups, user.groups.size(), user.groups.data()) != 0) {
      *err = errno;
      return;
    }
    ::syscall(SYS_setfsgid, user.gid);
    ::syscall(SYS_setfsuid, user.uid);
    // setfsuid and setfsgid say nothing of a failure: ask again.
    if (static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) != user.gid ||
        static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) != user.uid) {
      *err = EPERM;
      return;
    }
    fd = open();
    *err = errno;
  });
  worker.join();
  return fd;
}

// The first prefix of `parts` that is a symbolic link, for the message
// only ("" when none is, now).
std::string FirstLink(const std::vector<std::string>& parts) {
  std::string prefix;
  for (const std::string& p : parts) {
    absl::StrAppend(&prefix, "/", p);
    struct stat st;
    if (::lstat(prefix.c_str(), &st) != 0) return "";
    if (S_ISLNK(st.st_mode)) return prefix;
  }
  return "";
}

}  // namespace

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) ::close(fd_);
}

absl::StatusOr<MountSource> OpenMountSource(const std::string& path,
                                            const std::optional<PathUser>& user,
                                            bool use_openat2) {
  absl::StatusOr<std::vector<std::string>> parts = Components(path);
  if (!parts.ok()) return parts.status();
  const auto resolve = [&]() -> int {
    if (use_openat2) {
      const int fd = OpenWithOpenat2(path);
      if (fd >= 0 || errno != ENOSYS) return fd;
    }
    return OpenByWalk(*parts);
  };
  int err = 0;
  OwnedFd fd(user ? OpenAsUser(*user, resolve, &err) : resolve());
  if (!user) err = errno;
  if (fd.get() < 0) {
    switch (err) {
      case ELOOP: {
        const std::string link = FirstLink(*parts);
        return absl::FailedPreconditionError(
            absl::StrCat(path, " is reached through a symbolic link",
                         link.empty() ? "" : absl::StrCat(" (", link, ")"),
                         ": a mount source is never followed through one"));
      }
      case EACCES:
      case EPERM:
        return absl::PermissionDeniedError(absl::StrCat(
            path, ": ",
            user ? absl::StrCat("user ", user->name, " (uid ", user->uid, ")")
                 : std::string("the agent"),
            " may not reach it (", std::strerror(err), ")"));
      case ENOENT:
        return absl::NotFoundError(absl::StrCat(path, " does not exist"));
      case ENOTDIR:
        return absl::FailedPreconditionError(
            absl::StrCat(path, ": a component on the way is not a directory"));
      default:
        return absl::ErrnoToStatus(err, absl::StrCat("open ", path));
    }
  }
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  }
  if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path,
                     " is neither a directory nor a regular file (a device, a "
                     "socket or a fifo is not mounted)"));
  }
  MountSource out;
  out.fd = std::move(fd);
  out.directory = S_ISDIR(st.st_mode);
  return out;
}

absl::StatusOr<OwnedFd> CloneMountTree(const MountSource& source,
                                       const std::string& path) {
  const int fd = static_cast<int>(
      ::syscall(SYS_open_tree, source.fd.get(), "",
                OPEN_TREE_CLONE | O_CLOEXEC | AT_EMPTY_PATH | AT_RECURSIVE));
  if (fd >= 0) {
    // Above 0..2, which a task's shim and child rearrange.
    OwnedFd tree(fd);
    if (fd > STDERR_FILENO) return tree;
    OwnedFd moved(::fcntl(fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1));
    if (moved.get() < 0) {
      return absl::ErrnoToStatus(errno, absl::StrCat("dup the tree of ", path));
    }
    return moved;
  }
  if (errno == ENOSYS) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        ": this node's kernel cannot bind a directory it holds open "
        "(open_tree, Linux 5.2): container mounts need a newer kernel"));
  }
  return absl::ErrnoToStatus(errno, absl::StrCat("open_tree ", path));
}

}  // namespace loom
