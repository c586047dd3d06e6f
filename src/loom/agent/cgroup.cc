#include "loom/agent/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom {
namespace {

constexpr long kCgroupSuperMagic = 0x27e0eb;
constexpr long kCgroup2SuperMagic = 0x63677270;

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool IsCgroupFs(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return false;
  return static_cast<long>(fs.f_type) == kCgroupSuperMagic ||
         static_cast<long>(fs.f_type) == kCgroup2SuperMagic;
}

absl::Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return absl::ErrnoToStatus(errno, absl::StrCat("mkdir ", path));
  }
  return absl::OkStatus();
}

absl::Status WriteControlFile(const std::string& path,
                              const std::string& value) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  ssize_t n;
  do {
    n = ::write(fd, value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  ::close(fd);
  if (n < 0) {
    return absl::ErrnoToStatus(err,
                               absl::StrCat("write ", value, " to ", path));
  }
  if (static_cast<size_t>(n) != value.size()) {
    return absl::InternalError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

// The agent's own cgroup path in the hierarchy of `controller` ("" for the
// hierarchy root), from a /proc/self/cgroup style file.
std::string OwnCgroup(const std::string& self_cgroup_file,
                      const std::string& controller) {
  if (self_cgroup_file.empty()) return "";
  std::ifstream in(self_cgroup_file);
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> parts =
        absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (parts.size() != 3) continue;
    for (absl::string_view c : absl::StrSplit(parts[1], ',')) {
      if (c == controller) {
        std::string path = parts[2];
        while (!path.empty() && path.back() == '/') path.pop_back();
        return path;
      }
    }
  }
  return "";
}

absl::Status RemoveDirs(const std::vector<std::string>& dirs) {
  absl::Status result;
  for (const std::string& dir : dirs) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) continue;
    const int err = errno;
    if ((err == ENOTEMPTY || err == EEXIST) && !IsCgroupFs(dir)) {
      // A plain directory tree standing in for cgroupfs (tests): its control
      // files are ordinary files.
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      if (!ec) continue;
    }
    absl::Status s =
        err == EBUSY ? absl::FailedPreconditionError(absl::StrCat(
                           "cgroup ", dir, " still holds processes"))
                     : absl::ErrnoToStatus(err, absl::StrCat("rmdir ", dir));
    if (result.ok()) result = s;
  }
  return result;
}

}  // namespace

absl::StatusOr<CgroupPlacement> NoCgroupManager::Prepare(
    const std::string& task_id, const TaskLimits& limits) {
  CgroupPlacement placement;
  placement.limits_applied = limits.empty();
  if (!limits.empty()) {
    placement.note = "cgroup limits not applied: cgroups are disabled";
  }
  return placement;
}

absl::Status NoCgroupManager::Remove(const CgroupPlacement& placement) {
  return absl::OkStatus();
}

CgroupV1Manager::CgroupV1Manager(std::string root, std::string self_cgroup_file)
    : root_(std::move(root)), self_cgroup_file_(std::move(self_cgroup_file)) {}

std::string CgroupV1Manager::ParentDir(const std::string& controller) const {
  return absl::StrCat(root_, "/", controller,
                      OwnCgroup(self_cgroup_file_, controller), "/loom");
}

absl::StatusOr<std::string> CgroupV1Manager::SetUp(
    const std::string& controller, const std::string& task_id,
    const std::string& limit_file,
    const std::vector<std::pair<std::string, std::string>>& files) const {
  const std::string parent = ParentDir(controller);
  const std::string base = parent.substr(0, parent.size() - 5);  // "/loom"
  if (!IsDirectory(base)) {
    return absl::UnavailableError(
        absl::StrCat("no ", controller, " hierarchy at ", base));
  }
  if (::access(base.c_str(), W_OK) != 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat(base, " is not writable"));
  }
  if (!Exists(absl::StrCat(base, "/", limit_file))) {
    return absl::UnavailableError(absl::StrCat(base, " has no ", limit_file));
  }
  if (absl::Status s = MakeDir(parent); !s.ok()) return s;
  const std::string dir = absl::StrCat(parent, "/", task_id);
  if (absl::Status s = MakeDir(dir); !s.ok()) return s;
  for (const auto& [name, value] : files) {
    absl::Status s = WriteControlFile(absl::StrCat(dir, "/", name), value);
    if (!s.ok()) {
      (void)RemoveDirs({dir});
      return s;
    }
  }
  return dir;
}

absl::StatusOr<CgroupPlacement> CgroupV1Manager::Prepare(
    const std::string& task_id, const TaskLimits& limits) {
  if (limits.memory_bytes && *limits.memory_bytes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task_id, ": memory limit must be positive, got ",
                     *limits.memory_bytes));
  }
  if (limits.cpu_millis && *limits.cpu_millis <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("task ", task_id, ": cpu limit must be positive, got ",
                     *limits.cpu_millis, "m"));
  }
  CgroupPlacement placement;
  std::vector<std::string> applied;
  std::vector<std::string> missing;
  if (limits.memory_bytes) {
    const std::string bytes = absl::StrCat(*limits.memory_bytes);
    std::vector<std::pair<std::string, std::string>> files = {
        {"memory.limit_in_bytes", bytes}};
    // memory+swap: only where the kernel accounts swap.
    const std::string base = ParentDir("memory");
    if (Exists(absl::StrCat(base.substr(0, base.size() - 5),
                            "/memory.memsw.limit_in_bytes"))) {
      files.emplace_back("memory.memsw.limit_in_bytes", bytes);
    }
    absl::StatusOr<std::string> dir =
        SetUp("memory", task_id, "memory.limit_in_bytes", files);
    if (dir.ok()) {
      placement.dirs.push_back(*dir);
      placement.procs_files.push_back(absl::StrCat(*dir, "/cgroup.procs"));
      applied.push_back(absl::StrCat("memory ", bytes, " bytes in ", *dir));
    } else {
      missing.push_back(absl::StrCat("memory (", dir.status().message(), ")"));
    }
  }
  if (limits.cpu_millis) {
    // The kernel refuses quotas under 1 ms.
    const int64_t quota =
        std::max<int64_t>(1000, *limits.cpu_millis * kCpuPeriodUs / 1000);
    absl::StatusOr<std::string> dir =
        SetUp("cpu", task_id, "cpu.cfs_quota_us",
              {{"cpu.cfs_period_us", absl::StrCat(kCpuPeriodUs)},
               {"cpu.cfs_quota_us", absl::StrCat(quota)}});
    if (dir.ok()) {
      placement.dirs.push_back(*dir);
      placement.procs_files.push_back(absl::StrCat(*dir, "/cgroup.procs"));
      applied.push_back(
          absl::StrCat("cpu ", *limits.cpu_millis, "m in ", *dir));
    } else {
      missing.push_back(absl::StrCat("cpu (", dir.status().message(), ")"));
    }
  }
  placement.limits_applied = missing.empty();
  std::vector<std::string> parts;
  if (!applied.empty()) {
    parts.push_back(
        absl::StrCat("cgroup v1 limits: ", absl::StrJoin(applied, ", ")));
  }
  if (!missing.empty()) {
    parts.push_back(absl::StrCat("cgroup limits not applied: ",
                                 absl::StrJoin(missing, ", ")));
  }
  placement.note = absl::StrJoin(parts, "; ");
  return placement;
}

absl::Status CgroupV1Manager::Remove(const CgroupPlacement& placement) {
  return RemoveDirs(placement.dirs);
}

}  // namespace loom
