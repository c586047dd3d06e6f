#include "loom/agent/checkpoint_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/data_dir.h"

namespace loom {

absl::StatusOr<std::string> PrepareCheckpointDir(const std::string& root,
                                                 int64_t job_id,
                                                 std::optional<uid_t> uid,
                                                 std::optional<gid_t> gid) {
  if (job_id < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint directory: bad job id ", job_id));
  }
  if (absl::Status s = EnsureDirectory(root, kAgentDirMode); !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("checkpoint directory: ", s.message()));
  }
  const std::string path = absl::StrCat(root, "/", job_id);
  if (::mkdir(path.c_str(), kPrivateDirMode) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  // Only the agent creates names under `root` (0711), but check anyway:
  // never follow a link, never hand over anything but a directory.
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOTDIR || errno == ELOOP) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, " is not a directory (a symbolic link?)"));
    }
    return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  }
  absl::Status status;
  const uid_t want_uid = uid.value_or(::geteuid());
  const gid_t want_gid = gid.value_or(::getegid());
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("stat ", path));
  } else if ((st.st_uid != want_uid || st.st_gid != want_gid) &&
             ::fchown(fd, want_uid, want_gid) != 0) {
    status = absl::ErrnoToStatus(
        errno, absl::StrCat("chown ", path, " to ", want_uid, ":", want_gid));
  } else if ((st.st_mode & 07777) != kPrivateDirMode &&
             ::fchmod(fd, kPrivateDirMode) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("chmod ", path));
  }
  ::close(fd);
  if (!status.ok()) return status;
  return path;
}

absl::StatusOr<std::string> DefaultCheckpointDir(
    const std::string& node_dir, int64_t job_id,
    const std::map<std::string, std::string>& env,
    std::optional<std::pair<uid_t, gid_t>> owner) {
  if (node_dir.empty() || job_id < 1 || env.contains("LOOM_CHECKPOINT_DIR")) {
    return std::string();
  }
  absl::StatusOr<std::string> dir = PrepareCheckpointDir(
      absl::StrCat(node_dir, "/checkpoints"), job_id,
      owner ? std::optional<uid_t>(owner->first) : std::nullopt,
      owner ? std::optional<gid_t>(owner->second) : std::nullopt);
  if (dir.ok()) return dir;
  return absl::Status(
      dir.status().code(),
      absl::StrCat("no checkpoint directory: ", dir.status().message()));
}

}  // namespace loom
