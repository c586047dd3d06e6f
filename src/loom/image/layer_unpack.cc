#include "loom/image/layer_unpack.h"

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/image/absl_view.h"

namespace loom::image {
namespace {

constexpr std::string_view kWhiteout = ".wh.";
constexpr std::string_view kOpaque = ".wh..wh..opq";

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd_, o.fd_);
    return *this;
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_;
};

absl::Status Errno(std::string_view what, std::string_view path) {
  return absl::InternalError(
      absl::StrCat(Av(what), " ", Av(path), ": ", std::strerror(errno)));
}

// `raw` as components below the root: "./a//b/" -> "a/b", "./" -> "".
// InvalidArgument for an absolute path or a ".." component.
absl::StatusOr<std::string> CleanPath(std::string_view raw,
                                      std::string_view what) {
  if (raw.starts_with("/")) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(what), " \"", Av(raw), "\" is an absolute path"));
  }
  std::vector<absl::string_view> parts;
  for (absl::string_view p : absl::StrSplit(Av(raw), '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(Av(what), " \"", Av(raw), "\" climbs out with \"..\""));
    }
    parts.push_back(p);
  }
  return absl::StrJoin(parts, "/");
}

// `rel` (a CleanPath) resolved as if `root` were "/": symlinks on the way
// stay inside.
Fd OpenInRoot(int root, const std::string& rel, uint64_t flags) {
  open_how how{};
  how.flags = flags | O_CLOEXEC;
  how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
  const std::string path = rel.empty() ? "." : rel;
  return Fd(static_cast<int>(
      syscall(SYS_openat2, root, path.c_str(), &how, sizeof(how))));
}

// `target`, a link's target found in the directory `base` (a path under
// the root), as a path under the root: ".." stops at the root, as it does
// for the kernel's RESOLVE_IN_ROOT.
std::string LexicalInRoot(std::string_view base, std::string_view target) {
  std::vector<absl::string_view> parts;
  if (!target.starts_with("/")) {
    parts = absl::StrSplit(Av(base), '/', absl::SkipEmpty());
  }
  for (absl::string_view p :
       absl::StrSplit(Av(target), '/', absl::SkipEmpty())) {
    if (p == ".") continue;
    if (p == "..") {
      if (!parts.empty()) parts.pop_back();
      continue;
    }
    parts.push_back(p);
  }
  return absl::StrJoin(parts, "/");
}

// The directory `rel` inside `root`, made (0755, as tar does for missing
// parents) where missing, also where a link on the way leads to nothing
// yet.
absl::StatusOr<Fd> OpenDirInRoot(int root, const std::string& rel,
                                 int depth = 0) {
  Fd fd = OpenInRoot(root, rel, O_PATH | O_DIRECTORY);
  if (fd.ok()) return fd;
  if (errno != ENOENT) return Errno("cannot open directory", rel);
  if (depth > 16) {
    errno = ELOOP;
    return Errno("cannot open directory", rel);
  }
  fd = OpenInRoot(root, "", O_PATH | O_DIRECTORY);
  std::string prefix;
  std::string parent;
  for (absl::string_view part : absl::StrSplit(rel, '/')) {
    parent = prefix;
    prefix =
        prefix.empty() ? std::string(part) : absl::StrCat(prefix, "/", part);
    Fd next = OpenInRoot(root, prefix, O_PATH | O_DIRECTORY);
    if (!next.ok()) {
      if (errno != ENOENT) return Errno("cannot open directory", prefix);
      const std::string name(part);
      char target[4096];
      const ssize_t n =
          readlinkat(fd.get(), name.c_str(), target, sizeof(target) - 1);
      if (n >= 0) {  // a link to what does not exist yet: make that
        absl::StatusOr<Fd> made = OpenDirInRoot(
            root, LexicalInRoot(parent, std::string_view(target, n)),
            depth + 1);
        if (!made.ok()) return made.status();
      } else if (mkdirat(fd.get(), name.c_str(), 0755) != 0) {
        return Errno("cannot make directory", prefix);
      }
      next = OpenInRoot(root, prefix, O_PATH | O_DIRECTORY);
      if (!next.ok()) return Errno("cannot open directory", prefix);
    }
    fd = std::move(next);
  }
  return fd;
}

// Removes `name` in `dir` and, for a directory, all under it. OK if absent.
absl::Status RemoveAt(int dir, const std::string& name) {
  struct stat st;
  if (fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return errno == ENOENT ? absl::OkStatus() : Errno("cannot stat", name);
  }
  if (S_ISDIR(st.st_mode)) {
    Fd sub(openat(dir, name.c_str(),
                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub.ok()) return Errno("cannot open", name);
    fchmod(sub.get(), (st.st_mode & 07777) | 0700);
    DIR* d = fdopendir(dup(sub.get()));
    if (d == nullptr) return Errno("cannot read", name);
    std::vector<std::string> children;
    while (dirent* e = readdir(d)) {
      const std::string_view n = e->d_name;
      if (n != "." && n != "..") children.emplace_back(n);
    }
    closedir(d);
    for (const std::string& child : children) {
      if (absl::Status s = RemoveAt(sub.get(), child); !s.ok()) return s;
    }
    if (unlinkat(dir, name.c_str(), AT_REMOVEDIR) != 0) {
      return Errno("cannot remove", name);
    }
    return absl::OkStatus();
  }
  if (unlinkat(dir, name.c_str(), 0) != 0) return Errno("cannot remove", name);
  return absl::OkStatus();
}

// What an opaque whiteout in `dir_path` does: removes the directory's
// entries, except those this layer wrote (`written`).
absl::Status ClearDirectory(int dir, const std::string& dir_path,
                            const std::set<std::string>& written) {
  Fd readable(openat(dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!readable.ok()) return Errno("cannot open", dir_path);
  DIR* d = fdopendir(dup(readable.get()));
  if (d == nullptr) return Errno("cannot read", dir_path);
  std::vector<std::string> doomed;
  while (dirent* e = readdir(d)) {
    const std::string_view n = e->d_name;
    if (n == "." || n == "..") continue;
    const std::string path =
        dir_path.empty() ? std::string(n) : absl::StrCat(dir_path, "/", Av(n));
    if (!written.contains(path)) doomed.emplace_back(n);
  }
  closedir(d);
  for (const std::string& name : doomed) {
    if (absl::Status s = RemoveAt(readable.get(), name); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Mode bits kept: permissions and sticky, not setuid/setgid.
mode_t SafeMode(mode_t mode) { return mode & 01777; }

class LayerWriter {
 public:
  LayerWriter(archive* a, int root, std::string layer)
      : a_(a), root_(root), layer_(std::move(layer)) {}

  absl::Status Entry(archive_entry* e) {
    const char* raw = archive_entry_pathname(e);
    if (raw == nullptr) return Bad("an entry without a path");
    absl::StatusOr<std::string> path = CleanPath(raw, "entry");
    if (!path.ok()) return Bad(path.status().message());
    if (path->empty()) return absl::OkStatus();  // the root itself
    const size_t slash = path->rfind('/');
    const std::string parent =
        slash == std::string::npos ? "" : path->substr(0, slash);
    const std::string name = path->substr(slash + 1);
    absl::StatusOr<Fd> dir = OpenDirInRoot(root_, parent);
    if (!dir.ok()) return Bad(dir.status().message());
    if (name == kOpaque) return ClearDirectory(dir->get(), parent, written_);
    if (name.starts_with(kWhiteout)) {
      const std::string hidden = name.substr(kWhiteout.size());
      if (hidden.empty() || hidden == "." || hidden == "..") {
        return Bad(absl::StrCat("whiteout \"", *path, "\" names no entry"));
      }
      return RemoveAt(dir->get(), hidden);
    }
    written_.insert(*path);
    const int fd = dir->get();
    const mode_t type = archive_entry_filetype(e);
    if (const char* target = archive_entry_hardlink(e)) {
      return HardLink(fd, name, target);
    }
    struct stat st;
    const bool exists =
        fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
    if (type == AE_IFDIR) {
      if (exists && !S_ISDIR(st.st_mode)) {
        if (absl::Status s = RemoveAt(fd, name); !s.ok()) return s;
      }
      if ((!exists || !S_ISDIR(st.st_mode)) &&
          mkdirat(fd, name.c_str(), 0700) != 0) {
        return Errno("cannot make directory", *path);
      }
      Fd d(openat(fd, name.c_str(),
                  O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      if (!d.ok()) return Errno("cannot open", *path);
      fchmod(d.get(), SafeMode(archive_entry_perm(e)) | 0700);
      return absl::OkStatus();
    }
    if (exists) {
      if (absl::Status s = RemoveAt(fd, name); !s.ok()) return s;
    }
    switch (type) {
      case AE_IFREG:
        return RegularFile(fd, name, *path, e);
      case AE_IFLNK: {
        const char* target = archive_entry_symlink(e);
        if (target == nullptr || symlinkat(target, fd, name.c_str()) != 0) {
          return Errno("cannot make symlink", *path);
        }
        const timespec times[2] = {{archive_entry_mtime(e), 0},
                                   {archive_entry_mtime(e), 0}};
        utimensat(fd, name.c_str(), times, AT_SYMLINK_NOFOLLOW);
        return absl::OkStatus();
      }
      case AE_IFIFO:
        if (mkfifoat(fd, name.c_str(), SafeMode(archive_entry_perm(e))) != 0) {
          return Errno("cannot make fifo", *path);
        }
        return absl::OkStatus();
      default:  // device nodes, sockets: not in a task's image
        written_.erase(*path);
        return absl::OkStatus();
    }
  }

 private:
  absl::Status Bad(absl::string_view why) const {
    return absl::InvalidArgumentError(
        absl::StrCat("layer ", layer_, ": ", why));
  }

  absl::Status HardLink(int dir, const std::string& name, const char* raw) {
    absl::StatusOr<std::string> target = CleanPath(raw, "hard link target");
    if (!target.ok()) return Bad(target.status().message());
    const size_t slash = target->rfind('/');
    const std::string parent =
        slash == std::string::npos ? "" : target->substr(0, slash);
    Fd tdir = OpenInRoot(root_, parent, O_PATH | O_DIRECTORY);
    if (!tdir.ok()) return Errno("cannot find hard link target", *target);
    if (absl::Status s = RemoveAt(dir, name); !s.ok()) return s;
    if (linkat(tdir.get(), target->substr(slash + 1).c_str(), dir, name.c_str(),
               0) != 0) {
      return Errno("cannot make hard link to", *target);
    }
    return absl::OkStatus();
  }

  absl::Status RegularFile(int dir, const std::string& name,
                           const std::string& path, archive_entry* e) {
    Fd f(openat(dir, name.c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
    if (!f.ok()) return Errno("cannot create", path);
    const void* buf;
    size_t size;
    la_int64_t offset;
    for (;;) {
      const int r = archive_read_data_block(a_, &buf, &size, &offset);
      if (r == ARCHIVE_EOF) break;
      if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
        return Bad(
            absl::StrCat("cannot read ", path, ": ", archive_error_string(a_)));
      }
      const char* p = static_cast<const char*>(buf);
      while (size > 0) {
        const ssize_t n = pwrite(f.get(), p, size, offset);
        if (n < 0) return Errno("cannot write", path);
        p += n;
        size -= static_cast<size_t>(n);
        offset += n;
      }
    }
    if (ftruncate(f.get(), archive_entry_size(e)) != 0) {
      return Errno("cannot size", path);
    }
    fchmod(f.get(), SafeMode(archive_entry_perm(e)));
    const timespec times[2] = {{archive_entry_mtime(e), 0},
                               {archive_entry_mtime(e), 0}};
    futimens(f.get(), times);
    return absl::OkStatus();
  }

  archive* const a_;
  const int root_;
  const std::string layer_;
  std::set<std::string> written_;  // this layer's paths
};

}  // namespace

absl::Status ApplyLayer(const std::string& layer_path,
                        const std::string& rootfs) {
  Fd root(open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root.ok()) return Errno("cannot open", rootfs);
  std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(),
                                                &archive_read_free);
  archive_read_support_filter_all(a.get());
  archive_read_support_format_tar(a.get());
  archive_read_support_format_gnutar(a.get());
  if (archive_read_open_filename(a.get(), layer_path.c_str(), 1 << 16) !=
      ARCHIVE_OK) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layer ", layer_path, ": ", archive_error_string(a.get())));
  }
  LayerWriter writer(a.get(), root.get(), layer_path);
  for (;;) {
    archive_entry* e;
    const int r = archive_read_next_header(a.get(), &e);
    if (r == ARCHIVE_EOF) return absl::OkStatus();
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN) {
      return absl::InvalidArgumentError(absl::StrCat(
          "layer ", layer_path, ": ", archive_error_string(a.get())));
    }
    if (absl::Status s = writer.Entry(e); !s.ok()) return s;
  }
}

absl::StatusOr<int64_t> SealTree(const std::string& root) {
  namespace fs = std::filesystem;
  std::error_code ec;
  int64_t bytes = 0;
  const auto seal = [&](const std::string& path) {
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) return;
    bytes += static_cast<int64_t>(st.st_blocks) * 512;
    if (!S_ISLNK(st.st_mode)) chmod(path.c_str(), st.st_mode & 07777 & ~0222);
  };
  // Children first: a directory loses its write bit after what is in it.
  std::vector<std::string> dirs = {root};
  for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->is_directory(ec) && !it->is_symlink(ec)) {
      dirs.push_back(it->path().string());
    } else {
      seal(it->path().string());
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot seal ", root, ": ", ec.message()));
  }
  for (auto d = dirs.rbegin(); d != dirs.rend(); ++d) seal(*d);
  return bytes;
}

absl::Status RemoveTree(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return absl::OkStatus();
  if (fs::is_directory(fs::symlink_status(path, ec))) {
    // Sealed directories: write bits back first (root needs none, others do).
    chmod(path.c_str(), 0700);
    for (fs::recursive_directory_iterator it(path, ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) {
        chmod(it->path().c_str(), 0700);
      }
    }
  }
  ec.clear();
  fs::remove_all(path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot remove ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace loom::image
