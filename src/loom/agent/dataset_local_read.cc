#include "loom/agent/dataset_local_read.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/agent/dataset_cache.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

// The calling thread's file system credentials: the user's while a
// `ThreadReader` opens a file, root's (the agent's) otherwise.
class ThreadReader {
 public:
  explicit ThreadReader(const UserAccount& user) : user_(user) {
    const int n = ::getgroups(0, nullptr);
    if (n > 0) {
      own_groups_.resize(static_cast<size_t>(n));
      own_groups_.resize(
          static_cast<size_t>(std::max(0, ::getgroups(n, own_groups_.data()))));
    }
    own_uid_ = ::geteuid();
    own_gid_ = ::getegid();
  }

  // Opens `path` read-only as the user: the descriptor, or -errno.
  int Open(const std::string& path) {
    if (!Become(user_.uid, user_.gid, user_.groups)) return -EPERM;
    int fd = ::open(path.c_str(),
                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    const int err = errno;
    if (!Become(own_uid_, own_gid_, own_groups_)) {
      // A thread that cannot take its own rights back must not go on.
      std::abort();
    }
    return fd >= 0 ? fd : -err;
  }

 private:
  // Raw system calls: they change this thread's credentials alone.
  static bool Become(uid_t uid, gid_t gid, const std::vector<gid_t>& groups) {
    if (::syscall(SYS_setgroups, groups.size(), groups.data()) != 0) {
      return false;
    }
    ::syscall(SYS_setfsgid, gid);
    ::syscall(SYS_setfsuid, uid);
    // Each returns the previous id; an invalid one reads the current.
    return static_cast<uid_t>(::syscall(SYS_setfsuid, -1)) == uid &&
           static_cast<gid_t>(::syscall(SYS_setfsgid, -1)) == gid;
  }

  const UserAccount& user_;
  uid_t own_uid_;
  gid_t own_gid_;
  std::vector<gid_t> own_groups_;
};

absl::Status ReadError(const UserAccount& user, const std::string& source,
                       const std::string& path, int err) {
  const std::string where = absl::StrCat(source, "/", path);
  if (err == ELOOP) {
    return absl::PermissionDeniedError(absl::StrCat(
        where, " is a symbolic link (datasets copy regular files only)"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "user ", user.name, " cannot read ", where, ": ", std::strerror(err)));
}

// Opens entry `e` as the user and checks what it opened: a regular file of
// its listed size. The descriptor (blocking again) or the error.
absl::StatusOr<int> OpenEntry(ThreadReader& reader, const UserAccount& user,
                              const std::string& source,
                              const DatasetEntry& e) {
  if (!SafeDatasetPath(e.path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listing of ", source, " names '", e.path, "'"));
  }
  const int fd = reader.Open(absl::StrCat(source, "/", e.path));
  if (fd < 0) return ReadError(user, source, e.path, -fd);
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::PermissionDeniedError(absl::StrCat(
        source, "/", e.path, " is not a regular file (datasets copy regular "
        "files only)"));
  }
  if (st.st_size != e.size) {
    ::close(fd);
    return absl::DataLossError(absl::StrCat(
        source, "/", e.path, " has ", st.st_size, " bytes, and its listing ",
        e.size, ": it changed since the listing"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

absl::Status CopyOne(int in, const std::string& target, int64_t size,
                     const std::function<void(int64_t)>& step) {
  std::error_code ec;
  fs::create_directories(fs::path(target).parent_path(), ec);
  if (ec) {
    return absl::ErrnoToStatus(ec.value(),
                               absl::StrCat("mkdir for ", target));
  }
  const std::string part = target + ".part";
  // A fresh file: whatever an interrupted fill left there goes first.
  if (::unlink(part.c_str()) != 0 && errno != ENOENT) {
    return absl::ErrnoToStatus(errno, absl::StrCat("remove ", part));
  }
  const int out = ::open(part.c_str(),
                         O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                         0644);
  if (out < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", part));
  std::vector<char> buf(size_t{1} << 20);
  int64_t done = 0;
  absl::Status status;
  while (done < size) {
    const ssize_t n = ::read(in, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      status = n < 0 ? absl::ErrnoToStatus(errno, "read")
                     : absl::DataLossError(absl::StrCat(
                           "shorter than its listing (", done, " of ", size,
                           " bytes): it changed since the listing"));
      break;
    }
    for (ssize_t off = 0; off < n;) {
      const ssize_t w = ::write(out, buf.data() + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) {
        status = absl::ErrnoToStatus(errno, absl::StrCat("write ", part));
        break;
      }
      off += w;
    }
    if (!status.ok()) break;
    done += n;
    step(n);
  }
  if (::close(out) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("close ", part));
  }
  if (status.ok() && ::rename(part.c_str(), target.c_str()) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("rename ", part));
  }
  if (!status.ok()) ::unlink(part.c_str());
  return status;
}

// Runs `work` on a thread of its own (whose credentials it may change).
absl::Status OnOwnThread(const std::function<absl::Status()>& work) {
  absl::Status out;
  std::thread t([&] { out = work(); });
  t.join();
  return out;
}

}  // namespace

absl::Status CopyLocalSourceAs(const UserAccount& user,
                               const std::string& source,
                               const std::vector<DatasetEntry>& entries,
                               const std::string& dir,
                               const std::function<void(int64_t)>& progress) {
  return OnOwnThread([&]() -> absl::Status {
    ThreadReader reader(user);
    int64_t copied = 0;
    for (const DatasetEntry& e : entries) {
      if (!SafeDatasetPath(e.path)) {
        return absl::InvalidArgumentError(
            absl::StrCat("listing of ", source, " names '", e.path, "'"));
      }
      const std::string target = absl::StrCat(dir, "/", e.path);
      struct stat st;
      if (::lstat(target.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
          st.st_size == e.size) {
        continue;
      }
      absl::StatusOr<int> in = OpenEntry(reader, user, source, e);
      if (!in.ok()) return in.status();
      absl::Status st_copy = CopyOne(*in, target, e.size, [&](int64_t n) {
        copied += n;
        progress(copied);
      });
      ::close(*in);
      if (!st_copy.ok()) {
        return absl::Status(st_copy.code(),
                            absl::StrCat("dataset ", source, ": ", e.path,
                                         ": ", st_copy.message()));
      }
    }
    return absl::OkStatus();
  });
}

absl::Status CheckLocalSourceReadable(
    const UserAccount& user, const std::string& source,
    const std::vector<DatasetEntry>& entries) {
  return OnOwnThread([&]() -> absl::Status {
    ThreadReader reader(user);
    for (const DatasetEntry& e : entries) {
      absl::StatusOr<int> in = OpenEntry(reader, user, source, e);
      if (!in.ok()) return in.status();
      ::close(*in);
    }
    return absl::OkStatus();
  });
}

}  // namespace loom
