#include "loom/agent/task_setup.h"

#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_sandbox.h"

namespace loom::agent_internal {

std::string TaskPrefix(const std::string& task_id) {
  return absl::StrCat("task ", task_id, ": ");
}

absl::Status TaskErrno(const std::string& task_id, int err,
                       const std::string& what) {
  return absl::ErrnoToStatus(err, absl::StrCat(TaskPrefix(task_id), what));
}

absl::Status ValidateSpec(const TaskSpec& spec) {
  if (!ValidTaskId(spec.task_id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("task id \"", spec.task_id,
                     "\" is invalid: it must be 1 to 200 of [A-Za-z0-9._-]"));
  }
  const std::string prefix = TaskPrefix(spec.task_id);
  if (spec.argv.empty() || spec.argv[0].empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "argv is empty: nothing to run"));
  }
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "an argument contains a NUL byte"));
    }
  }
  for (const auto& [key, value] : spec.env) {
    if (key.empty() || key.find('=') != std::string::npos ||
        key.find('\0') != std::string::npos ||
        value.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "invalid environment variable name \"", key, "\""));
    }
  }
  if (spec.limits.memory_bytes && *spec.limits.memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "memory limit must be positive"));
  }
  if (spec.limits.cpu_millis && *spec.limits.cpu_millis <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "cpu limit must be positive"));
  }
  std::vector<const std::string*> paths = {&spec.working_dir, &spec.stdout_path,
                                           &spec.stderr_path};
  for (const std::string& dir : spec.create_dirs) paths.push_back(&dir);
  for (const std::string* path : paths) {
    if (path->find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "a path contains a NUL byte"));
    }
  }
  if (spec.sandbox) return ValidateSandbox(spec.task_id, *spec.sandbox);
  return absl::OkStatus();
}

int AboveStdio(int fd) {
  if (fd < 0 || fd >= 3) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int err = errno;
  ::close(fd);
  errno = err;
  return moved;
}

// Opens a task's output file for appending, creating it if missing. A file
// created for a task that runs as another user is given to that user (mode
// 0600: only the user and root read it); an existing one is left as it is.
absl::Status OpenOutput(const std::string& task_id, const std::string& path,
                        const Identity& identity, ScopedFd& fd) {
  const std::string& target = path.empty() ? std::string("/dev/null") : path;
  constexpr int kFlags = O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC;
  int raw = -1;
  if (identity.change && !path.empty()) {
    raw = ::open(target.c_str(), kFlags | O_EXCL | O_NOFOLLOW, 0600);
    if (raw >= 0) {
      (void)::fchown(raw, identity.uid, identity.gid);
    } else if (errno == EEXIST) {
      raw = ::open(target.c_str(), kFlags, kPrivateFileMode);
    }
  } else {
    raw = ::open(target.c_str(), kFlags, kPrivateFileMode);
  }
  if (raw < 0) return TaskErrno(task_id, errno, absl::StrCat("open ", target));
  raw = AboveStdio(raw);
  if (raw < 0) return TaskErrno(task_id, errno, "fcntl");
  fd.Reset(raw);
  return absl::OkStatus();
}

std::vector<std::string> ExecCandidates(const std::string& program,
                                        const std::string& path) {
  if (program.find('/') != std::string::npos) return {program};
  std::vector<std::string> out;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    // An empty entry is the current directory, as for execvp.
    out.push_back(dir.empty() ? program
                              : absl::StrCat(std::string(dir), "/", program));
  }
  return out;
}

absl::StatusOr<Identity> ResolveIdentity(const TaskSpec& spec) {
  Identity id;
  const bool uid_change = spec.uid && *spec.uid != ::geteuid();
  const bool gid_change = spec.gid && *spec.gid != ::getegid();
  if (!uid_change && !gid_change) return id;
  const std::string prefix = TaskPrefix(spec.task_id);
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError(absl::StrCat(
        prefix, "cannot run as uid ", spec.uid ? *spec.uid : ::geteuid(),
        " gid ", spec.gid ? *spec.gid : ::getegid(),
        ": the agent is not running as root"));
  }
  id.change = true;
  id.uid = spec.uid ? *spec.uid : ::geteuid();
  long size = ::sysconf(_SC_GETPW_R_SIZE_MAX);
  std::vector<char> buf(size > 0 ? static_cast<size_t>(size) : 16384);
  struct passwd pw;
  struct passwd* found = nullptr;
  int rc;
  while ((rc = ::getpwuid_r(id.uid, &pw, buf.data(), buf.size(), &found)) ==
         ERANGE) {
    buf.resize(buf.size() * 2);
  }
  if (spec.gid) {
    id.gid = *spec.gid;
  } else if (found != nullptr) {
    id.gid = found->pw_gid;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        prefix, "uid ", id.uid, " has no passwd entry; set a gid"));
  }
  if (found != nullptr && spec.uid) {
    int n = 32;
    std::vector<gid_t> groups(n);
    while (::getgrouplist(found->pw_name, id.gid, groups.data(), &n) < 0) {
      groups.resize(static_cast<size_t>(n) + 32);
      n = static_cast<int>(groups.size());
    }
    groups.resize(static_cast<size_t>(n));
    id.groups = std::move(groups);
  } else {
    id.groups = {id.gid};
  }
  return id;
}

}  // namespace loom::agent_internal
