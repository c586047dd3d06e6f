#include "loom/agent/task_sandbox.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/task_setup.h"
#include "loom/common/atomic_file.h"

namespace loom::agent_internal {
namespace {

namespace fs = std::filesystem;

bool BadPath(const std::string& path) {
  return path.empty() || path[0] != '/' || path.find('\0') != std::string::npos;
}

// `mkdir -p`; the directories it made, outermost first, in `*made`.
absl::Status MakeDirs(const std::string& task_id, const std::string& path,
                      std::vector<std::string>* made) {
  std::vector<fs::path> missing;
  std::error_code ec;
  for (fs::path p = fs::path(path).lexically_normal();
       !p.empty() && p != p.root_path() && !fs::exists(p, ec);
       p = p.parent_path()) {
    missing.push_back(p);
  }
  for (auto it = missing.rbegin(); it != missing.rend(); ++it) {
    if (::mkdir(it->c_str(), 0755) != 0 && errno != EEXIST) {
      return TaskErrno(task_id, errno, absl::StrCat("mkdir ", it->string()));
    }
    if (made != nullptr) made->push_back(it->string());
  }
  if (!fs::is_directory(path, ec)) {
    return TaskErrno(task_id, ENOTDIR, absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSandbox(const std::string& task_id,
                             const TaskSandbox& sandbox) {
  const std::string prefix = TaskPrefix(task_id);
  auto bad = [&](const std::string& what, const std::string& path) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, what, " \"", path, "\" must be an absolute path"));
  };
  for (const auto& [path, content] : sandbox.files) {
    if (BadPath(path)) return bad("sandbox file", path);
  }
  for (const TaskDir& dir : sandbox.dirs) {
    if (BadPath(dir.path)) return bad("sandbox directory", dir.path);
  }
  for (const TaskMount& m : sandbox.mounts) {
    if (BadPath(m.target)) return bad("mount target", m.target);
    if (m.tree_fd >= 0) continue;
    if (m.fstype.empty() || m.source.find('\0') != std::string::npos ||
        m.fstype.find('\0') != std::string::npos ||
        m.data.find('\0') != std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          prefix, "mount on ", m.target, " needs a source and a type"));
    }
  }
  return absl::OkStatus();
}

absl::Status PrepareSandbox(const std::string& task_id,
                            const TaskSandbox& sandbox) {
  if (::geteuid() != 0) {
    return absl::PermissionDeniedError(
        absl::StrCat(TaskPrefix(task_id),
                     "a container task needs an agent running as root"));
  }
  for (const auto& [path, content] : sandbox.files) {
    if (absl::Status s =
            MakeDirs(task_id, fs::path(path).parent_path(), nullptr);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = WriteFileAtomically(path, content, kPrivateFileMode);
        !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat(TaskPrefix(task_id), s.message()));
    }
  }
  for (const TaskDir& dir : sandbox.dirs) {
    if (dir.empty) {
      std::error_code ec;
      fs::remove_all(dir.path, ec);
      if (ec) {
        return TaskErrno(task_id, ec.value(),
                         absl::StrCat("remove ", dir.path));
      }
    }
    std::vector<std::string> made;
    if (absl::Status s = MakeDirs(task_id, dir.path, &made); !s.ok()) return s;
    // Only the directory itself goes to its owner, and only when made
    // here: parents made on the way stay root's (0755).
    if ((!dir.uid && !dir.gid) || made.empty()) continue;
    const std::string& p = made.back();
    if (::chown(p.c_str(), dir.uid ? *dir.uid : static_cast<uid_t>(-1),
                dir.gid ? *dir.gid : static_cast<gid_t>(-1)) != 0) {
      return TaskErrno(task_id, errno, absl::StrCat("chown ", p));
    }
  }
  for (const TaskMount& m : sandbox.mounts) {
    // A user's target is made by the task's process, without following
    // links (spawn.cc).
    if (m.user_target) continue;
    struct stat st;
    if (m.tree_fd >= 0 && ::fstat(m.tree_fd, &st) != 0) {
      return TaskErrno(task_id, errno,
                       absl::StrCat("stat the tree for ", m.target));
    }
    if (m.tree_fd < 0 || S_ISDIR(st.st_mode)) {
      if (absl::Status s = MakeDirs(task_id, m.target, nullptr); !s.ok()) {
        return s;
      }
      continue;
    }
    // A file's tree is attached on a file.
    if (absl::Status s =
            MakeDirs(task_id, fs::path(m.target).parent_path(), nullptr);
        !s.ok()) {
      return s;
    }
    const int fd = ::open(m.target.c_str(),
                          O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0)
      return TaskErrno(task_id, errno, absl::StrCat("create ", m.target));
    ::close(fd);
  }
  return absl::OkStatus();
}

}  // namespace loom::agent_internal
