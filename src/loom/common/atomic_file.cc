#include "loom/common/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents, mode_t mode) {
  const std::string tmp = path + ".tmp";
  // Fails with errno's status, after closing `fd` (when >= 0) and removing
  // the temporary file (when `unlink`).
  auto fail = [&](const char* step, int fd, bool unlink, int err) {
    if (fd >= 0) ::close(fd);
    if (unlink) ::unlink(tmp.c_str());
    return absl::ErrnoToStatus(err,
                               absl::StrCat("cannot write ", path, ": ", step));
  };
  const int fd =
      ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return fail("open", -1, false, errno);
  // O_CREAT leaves a left-over temporary file's mode as it was: set it.
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
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    return fail("rename", -1, true, errno);
  }
  // Make the rename itself durable.
  const size_t slash = path.rfind('/');
  const std::string dir =
      slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::Status WriteSecretFile(const std::string& path, std::string_view text) {
  return WriteFileAtomically(path, text, 0600);
}

}  // namespace loom
