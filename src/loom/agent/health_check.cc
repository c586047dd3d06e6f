#include "loom/agent/health_check.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "loom/common/units.h"

extern char** environ;

namespace loom {
namespace {

constexpr size_t kMaxOutput = 64 * 1024;
constexpr size_t kMaxMessage = 200;

std::string FirstLine(const std::string& output) {
  for (absl::string_view line : absl::StrSplit(output, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    std::string out(line.data(), std::min(line.size(), kMaxMessage));
    return out;
  }
  return "";
}

}  // namespace

std::vector<std::string> CheckDataDir(const std::string& dir,
                                      int64_t min_free_bytes) {
  std::vector<std::string> problems;
  struct stat st;
  if (stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    problems.push_back(absl::StrCat("data dir ", dir, " is not a directory",
                                    errno != 0 ? ": " : "",
                                    errno != 0 ? std::strerror(errno) : ""));
    return problems;
  }
  const std::string probe = absl::StrCat(dir, "/.health-probe");
  const int fd =
      open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0 || write(fd, "ok\n", 3) != 3) {
    problems.push_back(absl::StrCat(
        "data dir ", dir, " is not writable: ", std::strerror(errno)));
  }
  if (fd >= 0) close(fd);
  unlink(probe.c_str());
  struct statvfs vfs;
  if (statvfs(dir.c_str(), &vfs) == 0) {
    const int64_t free_bytes =
        static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
    if (free_bytes < min_free_bytes) {
      problems.push_back(absl::StrCat(
          "data disk full: ", FormatBytes(free_bytes), " free under ", dir,
          " (at least ", FormatBytes(min_free_bytes), " needed)"));
    }
  } else {
    problems.push_back(
        absl::StrCat("data dir ", dir, ": statvfs: ", std::strerror(errno)));
  }
  return problems;
}

absl::Status RunHealthCommand(const std::string& command,
                              absl::Duration timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("health check: pipe: ", std::strerror(errno)));
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  const char* argv[] = {"/bin/sh", "-c", command.c_str(), nullptr};
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr,
                             const_cast<char**>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return absl::InternalError(
        absl::StrCat("health check: cannot run /bin/sh: ", std::strerror(rc)));
  }
  std::string output;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  for (;;) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int ready =
        poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 1000)));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) continue;
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF: every writer is gone
    if (output.size() < kMaxOutput) output.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(-pid, SIGKILL);
  int status = 0;
  // The shell has closed its output; it exits promptly (or was killed).
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string line = FirstLine(output);
  auto failed = [&](std::string how) {
    return absl::FailedPreconditionError(
        absl::StrCat("health check command ", how,
                     line.empty() ? "" : absl::StrCat(": ", line)));
  };
  if (timed_out) {
    return failed(
        absl::StrCat("timed out after ", absl::FormatDuration(timeout)));
  }
  if (WIFSIGNALED(status)) {
    return failed(absl::StrCat("killed by signal ", WTERMSIG(status)));
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    return failed(absl::StrCat("failed (exit code ", WEXITSTATUS(status), ")"));
  }
  return absl::OkStatus();
}

std::vector<std::string> CheckGpus(GpuProbe& probe, int expected) {
  std::vector<std::string> problems;
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe.Probe();
  if (!gpus.ok()) {
    problems.push_back(
        absl::StrCat("GPU check failed: ", gpus.status().message()));
    return problems;
  }
  if (static_cast<int>(gpus->size()) < expected) {
    problems.push_back(absl::StrCat("GPUs missing: NVML sees ", gpus->size(),
                                    " of ", expected));
  }
  for (const GpuDevice& gpu : *gpus) {
    if (gpu.ecc_uncorrected > 0) {
      problems.push_back(absl::StrCat("GPU ", gpu.index, " (", gpu.uuid,
                                      "): ", gpu.ecc_uncorrected,
                                      " uncorrected ECC errors"));
    }
  }
  return problems;
}

}  // namespace loom
