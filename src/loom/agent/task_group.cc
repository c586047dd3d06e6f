#include "loom/agent/task_group.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <fstream>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "loom/agent/task_files.h"
#include "loom/common/fnv.h"

namespace loom {
namespace {

constexpr long kCgroup2SuperMagic = 0x63677270;

bool IsCgroup2(const std::string& path) {
  struct statfs fs;
  return ::statfs(path.c_str(), &fs) == 0 &&
         static_cast<long>(fs.f_type) == kCgroup2SuperMagic;
}

// The `0::PATH` entry of a /proc/self/cgroup style file ("" when none).
std::string OwnUnifiedCgroup(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    while (!path.empty() && path.back() == '/') path.pop_back();
    return path;
  }
  return "";
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

bool WriteSmall(const std::string& path, std::string_view value) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const ssize_t n = ::write(fd, value.data(), value.size());
  ::close(fd);
  return n == static_cast<ssize_t>(value.size());
}

std::vector<pid_t> Procs(const std::string& dir) {
  std::vector<pid_t> out;
  absl::StatusOr<std::string> text =
      agent_internal::ReadWholeFile(absl::StrCat(dir, "/cgroup.procs"));
  if (!text.ok()) return out;
  for (absl::string_view word :
       absl::StrSplit(*text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    pid_t pid = 0;
    if (absl::SimpleAtoi(word, &pid) && pid > 0) out.push_back(pid);
  }
  return out;
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string NoGroupsNote(const absl::Status& why) {
  return absl::StrCat(
      "tasks are in process groups only, not in cgroup v2 groups: ",
      why.message());
}

absl::StatusOr<std::unique_ptr<TaskGroups>> TaskGroups::Create(
    const std::string& state_dir, TaskGroupsOptions options) {
  std::string hierarchy = options.hierarchy;
  if (hierarchy.empty()) {
    if (IsCgroup2("/sys/fs/cgroup")) {
      hierarchy = "/sys/fs/cgroup";
    } else if (IsCgroup2("/sys/fs/cgroup/unified")) {
      hierarchy = "/sys/fs/cgroup/unified";
    } else {
      return absl::UnavailableError(
          "no cgroup v2 (unified) hierarchy at /sys/fs/cgroup or "
          "/sys/fs/cgroup/unified");
    }
  }
  const std::string own =
      absl::StrCat(hierarchy, OwnUnifiedCgroup(options.self_cgroup_file));
  if (::access(own.c_str(), W_OK) != 0) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cgroup v2: ", own, " is not writable"));
  }
  const std::string base = absl::StrCat(own, "/loom-tasks");
  if (absl::Status s = MakeDir(base); !s.ok()) {
    return absl::Status(s.code(), absl::StrCat("cgroup v2: ", s.message()));
  }
  return std::unique_ptr<TaskGroups>(new TaskGroups(
      hierarchy,
      absl::StrCat(base, "/", absl::StrFormat("%016x", Fnv1a64(state_dir)))));
}

absl::StatusOr<std::string> TaskGroups::Make(const std::string& task_id) const {
  const std::string dir = absl::StrCat(parent_, "/", task_id);
  // The parent comes and goes with the tasks (`RemoveParentIfUnused`): a
  // concurrent removal shows as ENOENT, and another try makes it again.
  absl::Status made;
  for (int attempt = 0; attempt < 3; ++attempt) {
    made = MakeDir(parent_);
    if (made.ok()) made = MakeDir(dir);
    if (!absl::IsNotFound(made)) break;
  }
  if (!made.ok()) return made;
  if (!Empty(dir)) {
    return absl::AlreadyExistsError(
        absl::StrCat("cgroup ", dir, " still holds processes"));
  }
  return dir;
}

size_t TaskGroups::Kill(const std::string& dir) {
  std::vector<pid_t> pids = Procs(dir);
  if (pids.empty()) return 0;
  const size_t held = pids.size();
  if (WriteSmall(absl::StrCat(dir, "/cgroup.kill"), "1")) return held;
  // Older kernels: freeze, kill each, thaw (a frozen process dies once
  // thawed), until the group is empty or a few rounds have passed.
  const std::string freeze = absl::StrCat(dir, "/cgroup.freeze");
  const bool can_freeze = Exists(freeze) && WriteSmall(freeze, "1");
  for (int round = 0; round < 20 && !pids.empty(); ++round) {
    for (pid_t pid : pids) ::kill(pid, SIGKILL);
    pids = Procs(dir);
  }
  if (can_freeze) WriteSmall(freeze, "0");
  return held;
}

void TaskGroups::RemoveParentIfUnused() const {
  (void)::rmdir(parent_.c_str());  // EBUSY while it has groups: fine
}

bool TaskGroups::Empty(const std::string& dir) { return Procs(dir).empty(); }

absl::Status TaskGroups::Remove(const std::string& dir) {
  // Child groups first: a container runtime's, left by a runtime killed
  // before it removed it.
  if (DIR* d = ::opendir(dir.c_str()); d != nullptr) {
    std::vector<std::string> children;
    while (const dirent* e = ::readdir(d)) {
      if (e->d_type == DT_DIR && std::string_view(e->d_name) != "." &&
          std::string_view(e->d_name) != "..") {
        children.push_back(absl::StrCat(dir, "/", e->d_name));
      }
    }
    ::closedir(d);
    for (const std::string& child : children) {
      if (absl::Status s = Remove(child); !s.ok()) return s;
    }
  }
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return absl::OkStatus();
  if (errno == EBUSY) {
    return absl::FailedPreconditionError(
        absl::StrCat("cgroup ", dir, " still holds processes"));
  }
  return absl::ErrnoToStatus(errno, absl::StrCat("rmdir ", dir));
}

}  // namespace loom
