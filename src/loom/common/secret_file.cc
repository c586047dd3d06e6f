#include "loom/common/secret_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom {

absl::Status WriteSecretFile(const std::string& path, std::string_view text) {
  const std::string tmp = path + ".tmp";
  auto failed = [&](const char* what) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot write ", path, ": ", what, ": ", std::strerror(err)));
  };
  const int fd =
      open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return failed("open");
  // A left-over temporary file keeps its mode through O_CREAT: set it.
  if (fchmod(fd, 0600) != 0) {
    absl::Status s = failed("chmod");
    close(fd);
    return s;
  }
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status s = failed("write");
      close(fd);
      unlink(tmp.c_str());
      return s;
    }
    done += static_cast<size_t>(n);
  }
  if (fsync(fd) != 0) {
    absl::Status s = failed("fsync");
    close(fd);
    unlink(tmp.c_str());
    return s;
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    absl::Status s = failed("rename");
    unlink(tmp.c_str());
    return s;
  }
  return absl::OkStatus();
}

}  // namespace loom
