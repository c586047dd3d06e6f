#include "loom/gateway/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <filesystem>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace loom::gateway {
namespace {

std::string ModeText(mode_t mode) {
  return absl::StrFormat("%04o", static_cast<unsigned>(mode & 07777));
}

absl::Status Errno(int err, const std::string& what) {
  return absl::ErrnoToStatus(err, what);
}

// One file name: no '/', not "." or "..", not empty.
absl::Status CheckName(std::string_view name) {
  if (name.empty() || name == "." || name == ".." ||
      name.find('/') != std::string_view::npos ||
      name.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(name), "' is not a file name in the run directory"));
  }
  return absl::OkStatus();
}

// Whether a directory above the run directory keeps other users from
// replacing what is below it: owned by root or `euid`, and writable by no
// one else unless sticky (then only an entry's owner may rename it).
absl::Status CheckAncestor(const std::string& run_dir, const std::string& at,
                           const struct stat& st, uid_t euid) {
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", run_dir, ": ", at, " is not a directory"));
  }
  if (st.st_uid != 0 && st.st_uid != euid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", run_dir, ": its ancestor ", at, " is owned by uid ",
        st.st_uid, " (neither root nor this gateway's uid ", euid,
        "), who could replace the run directory; use one under directories "
        "that only root or uid ",
        euid, " can change"));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && (st.st_mode & S_ISVTX) == 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", run_dir, ": its ancestor ", at, " (mode ",
        ModeText(st.st_mode),
        ") is writable by other users, who could replace the run directory; "
        "use one under directories that only root or uid ",
        euid, " can change"));
  }
  return absl::OkStatus();
}

// The run directory itself: ours, and ours alone.
absl::Status CheckRunDir(const std::string& run_dir, const struct stat& st,
                         uid_t euid) {
  if (st.st_uid != euid) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", run_dir, " is owned by uid ", st.st_uid,
        ", not by this gateway's uid ", euid,
        ": another user may have made it to plant what HAProxy runs; not "
        "using it (remove it, or use another run directory)"));
  }
  if ((st.st_mode & 07777) != 0700) {
    return absl::FailedPreconditionError(absl::StrCat(
        "run directory ", run_dir, " has mode ", ModeText(st.st_mode),
        "; it must be 0700, so that no other user can read or change what "
        "HAProxy runs (chmod 0700 it, or use another run directory)"));
  }
  return absl::OkStatus();
}

// The directories walked so far, from "/": a descriptor (O_PATH) and a
// name each; the last is the current one.
class Walk {
 public:
  explicit Walk(int root) { fds_.push_back(root); }
  ~Walk() {
    for (int fd : fds_) ::close(fd);
  }
  Walk(const Walk&) = delete;
  Walk& operator=(const Walk&) = delete;

  int top() const { return fds_.back(); }
  bool at_root() const { return names_.empty(); }
  std::string path() const {
    std::string out;
    for (const std::string& n : names_) absl::StrAppend(&out, "/", n);
    return out.empty() ? "/" : out;
  }
  std::string PathOf(const std::string& name) const {
    return at_root() ? absl::StrCat("/", name)
                     : absl::StrCat(path(), "/", name);
  }
  void Push(int fd, std::string name) {
    fds_.push_back(fd);
    names_.push_back(std::move(name));
  }
  void Pop() {
    if (at_root()) return;  // "/.." is "/"
    ::close(fds_.back());
    fds_.pop_back();
    names_.pop_back();
  }
  void ToRoot() {
    while (!at_root()) Pop();
  }

 private:
  std::vector<int> fds_;
  std::vector<std::string> names_;
};

// The most symlinks one path may go through (as the kernel's 40).
constexpr int kMaxSymlinks = 40;

}  // namespace

absl::StatusOr<std::shared_ptr<const RunDir>> RunDir::Open(std::string path,
                                                           bool create) {
  if (path.empty()) {
    return absl::InvalidArgumentError("run directory: no path given");
  }
  if (path.front() != '/') {
    std::error_code ec;
    const std::filesystem::path abs = std::filesystem::absolute(path, ec);
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("run directory ", path, ": ", ec.message()));
    }
    path = abs.string();
  }
  const uid_t euid = ::geteuid();
  const int root = ::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return Errno(errno, "run directory: opening /");
  Walk walk(root);
  struct stat st;
  if (::fstat(root, &st) != 0) return Errno(errno, "run directory: stat /");
  if (absl::Status s = CheckAncestor(path, "/", st, euid); !s.ok()) return s;
  // Component by component from "/", never following a symlink in the
  // kernel: a symlink above the run directory is followed here, and only
  // when root or this uid owns it (its directory is already checked); the
  // run directory itself must not be one.
  std::deque<std::string> todo;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    todo.emplace_back(part);
  }
  int links = 0;
  while (!todo.empty()) {
    const std::string name = std::move(todo.front());
    todo.pop_front();
    if (name == ".") continue;
    if (name == "..") {
      walk.Pop();
      continue;
    }
    const bool last = todo.empty();
    const std::string at = walk.PathOf(name);
    int next =
        ::openat(walk.top(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    bool made = false;
    if (next < 0 && errno == ENOENT && create) {
      if (::mkdirat(walk.top(), name.c_str(), 0700) == 0) {
        made = true;
      } else if (errno != EEXIST) {
        return Errno(errno, absl::StrCat("run directory: making ", at));
      }
      next =
          ::openat(walk.top(), name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
    }
    if (next < 0) {
      if (errno == ENOENT) {
        return absl::NotFoundError(
            absl::StrCat("run directory: ", at, " does not exist"));
      }
      return Errno(errno, absl::StrCat("run directory: opening ", at));
    }
    if (::fstat(next, &st) != 0) {
      const int err = errno;
      ::close(next);
      return Errno(err, absl::StrCat("run directory: stat ", at));
    }
    if (S_ISLNK(st.st_mode)) {
      ::close(next);
      if (last) {
        return absl::FailedPreconditionError(absl::StrCat(
            "run directory ", at,
            " is a symlink; not following it (another user may have planted "
            "it; give the directory itself)"));
      }
      if (st.st_uid != 0 && st.st_uid != euid) {
        return absl::FailedPreconditionError(absl::StrCat(
            "run directory ", path, ": ", at, " is a symlink owned by uid ",
            st.st_uid, " (neither root nor this gateway's uid ", euid,
            "); not following it"));
      }
      if (++links > kMaxSymlinks) {
        return absl::FailedPreconditionError(absl::StrCat(
            "run directory ", path, ": more than ", kMaxSymlinks, " symlinks"));
      }
      char target[PATH_MAX];
      const ssize_t n =
          ::readlinkat(walk.top(), name.c_str(), target, sizeof(target));
      if (n <= 0 || n >= static_cast<ssize_t>(sizeof(target))) {
        return Errno(n < 0 ? errno : ENAMETOOLONG,
                     absl::StrCat("run directory: reading the symlink ", at));
      }
      const absl::string_view to(target, static_cast<size_t>(n));
      std::vector<std::string> parts =
          absl::StrSplit(to, '/', absl::SkipEmpty());
      todo.insert(todo.begin(), parts.begin(), parts.end());
      if (to.front() == '/') walk.ToRoot();
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      ::close(next);
      return absl::FailedPreconditionError(absl::StrCat(
          "run directory ", path, ": ", at, " is not a directory"));
    }
    if (made) {
      // Made 0700 less the umask: 0700 it is.
      const int rd = ::openat(walk.top(), name.c_str(),
                              O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
      const int err = rd < 0 || ::fchmod(rd, 0700) != 0 ? errno : 0;
      if (rd >= 0) ::close(rd);
      if (err != 0 || ::fstat(next, &st) != 0) {
        ::close(next);
        return Errno(err != 0 ? err : errno,
                     absl::StrCat("run directory: chmod ", at));
      }
    }
    if (!last) {
      if (absl::Status s = CheckAncestor(path, at, st, euid); !s.ok()) {
        ::close(next);
        return s;
      }
    }
    walk.Push(next, name);
  }
  if (walk.at_root()) {
    return absl::InvalidArgumentError("run directory: '/' cannot be one");
  }
  const std::string canonical = walk.path();
  // The directory the walk holds, opened for reading (fsync) through it.
  const int fd = ::openat(walk.top(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return Errno(errno, absl::StrCat("run directory: opening ", canonical));
  }
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Errno(err, absl::StrCat("run directory: stat ", canonical));
  }
  if (absl::Status s = CheckRunDir(canonical, st, euid); !s.ok()) {
    ::close(fd);
    return s;
  }
  return std::shared_ptr<const RunDir>(new RunDir(canonical, fd));
}

RunDir::~RunDir() { ::close(fd_); }

std::string RunDir::PathOf(std::string_view name) const {
  return absl::StrCat(path_, "/", std::string(name));
}

absl::Status RunDir::WriteFile(std::string_view name, std::string_view contents,
                               mode_t mode) const {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const std::string target(name);
  const std::string tmp = absl::StrCat(target, ".tmp");
  auto fail = [&](const char* step, int fd, bool unlink, int err) {
    if (fd >= 0) ::close(fd);
    if (unlink) ::unlinkat(fd_, tmp.c_str(), 0);
    return Errno(err, absl::StrCat("cannot write ", PathOf(name), ": ", step));
  };
  // A temporary left by a crash, or anything planted in its place: gone,
  // and never followed.
  if (::unlinkat(fd_, tmp.c_str(), 0) != 0 && errno != ENOENT) {
    return fail("removing the stale temporary file", -1, false, errno);
  }
  const int fd =
      ::openat(fd_, tmp.c_str(),
               O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
  if (fd < 0) return fail("creating the temporary file", -1, false, errno);
  if (::fchmod(fd, mode) != 0) return fail("chmod", fd, true, errno);
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n =
        ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail("write", fd, true, n < 0 ? errno : EIO);
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) return fail("fsync", fd, true, errno);
  if (::close(fd) != 0) return fail("close", -1, true, errno);
  if (::renameat(fd_, tmp.c_str(), fd_, target.c_str()) != 0) {
    return fail("rename", -1, true, errno);
  }
  ::fsync(fd_);
  return absl::OkStatus();
}

absl::StatusOr<int> RunDir::OpenAppend(std::string_view name) const {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const std::string file(name);
  // O_NONBLOCK: a FIFO in its place must not hang the open.
  const int fd = ::openat(fd_, file.c_str(),
                          O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW |
                              O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
                          0600);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      return absl::FailedPreconditionError(absl::StrCat(
          PathOf(name), " is a symlink; not writing through it (remove it)"));
    }
    return Errno(err, absl::StrCat("opening ", PathOf(name)));
  }
  struct stat st;
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = absl::StrCat("stat: ", std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    why = "is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    why = absl::StrCat("is owned by uid ", st.st_uid);
  } else if (st.st_nlink != 1) {
    why = absl::StrCat("has ", st.st_nlink,
                       " hard links (it may be another file)");
  }
  if (why.empty() && (::fchmod(fd, 0600) != 0 ||
                      ::fcntl(fd, F_SETFL, O_WRONLY | O_APPEND) != 0)) {
    why = std::strerror(errno);
  }
  if (!why.empty()) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        PathOf(name), " ", why, "; not writing to it (remove it)"));
  }
  return fd;
}

std::string RunDir::Tail(std::string_view name, size_t max_bytes) const {
  if (!CheckName(name).ok()) return "";
  const std::string file(name);
  const int fd = ::openat(fd_, file.c_str(),
                          O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st;
  std::string out;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    const off_t size = st.st_size;
    off_t at = size > static_cast<off_t>(max_bytes)
                   ? size - static_cast<off_t>(max_bytes)
                   : 0;
    out.resize(static_cast<size_t>(size - at));
    size_t got = 0;
    while (got < out.size()) {
      const ssize_t n = ::pread(fd, out.data() + got, out.size() - got, at);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
      at += n;
    }
    out.resize(got);
  }
  ::close(fd);
  return out;
}

absl::Status RunDir::Remove(std::string_view name) const {
  if (absl::Status s = CheckName(name); !s.ok()) return s;
  const std::string file(name);
  if (::unlinkat(fd_, file.c_str(), 0) != 0 && errno != ENOENT) {
    return Errno(errno, absl::StrCat("removing ", PathOf(name)));
  }
  return absl::OkStatus();
}

bool RunDir::Exists(std::string_view name) const {
  if (!CheckName(name).ok()) return false;
  const std::string file(name);
  struct stat st;
  return ::fstatat(fd_, file.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
}

absl::StatusOr<std::string> DefaultRunDir(uid_t euid, std::string_view name,
                                          std::string_view xdg_runtime_dir,
                                          std::string_view tmpdir) {
  bool plain =
      !name.empty() && name.size() <= 64 && name != "." && name != "..";
  for (char c : name) {
    plain &= c != '/' && static_cast<unsigned char>(c) >= 0x20 && c != 0x7f;
  }
  if (!plain) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the gateway's name '", std::string(name),
        "' cannot name its run directory; give --run-dir (or a plain "
        "--name)"));
  }
  if (euid == 0) return absl::StrCat("/run/loom-gateway/", std::string(name));
  if (!xdg_runtime_dir.empty() && xdg_runtime_dir.front() == '/') {
    return absl::StrCat(std::string(xdg_runtime_dir), "/loom-gateway-",
                        std::string(name));
  }
  const std::string tmp(!tmpdir.empty() && tmpdir.front() == '/' ? tmpdir
                                                                 : "/tmp");
  return absl::StrCat(tmp, "/loom-gateway-", std::string(name));
}

}  // namespace loom::gateway
