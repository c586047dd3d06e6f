#include "loom/gateway/child_process.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom::gateway {
namespace {

// Prepared before fork: after it the child makes only async-signal-safe
// calls.
struct ExecPlan {
  std::vector<std::string> args;
  std::vector<char*> argv;
  explicit ExecPlan(const std::vector<std::string>& a) : args(a) {
    for (std::string& s : args) argv.push_back(s.data());
    argv.push_back(nullptr);
  }
};

// In the child: fds 0..2 set up, everything above closed, exec.
[[noreturn]] void ExecChild(const ExecPlan& plan, int out_fd,
                            const SpawnOptions* options) {
  if (options != nullptr) {
    if (options->terminate_with_parent) ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (options->new_process_group) ::setpgid(0, 0);
  }
  const int null_fd = ::open("/dev/null", O_RDONLY);
  if (null_fd >= 0) ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  ::syscall(SYS_close_range, 3U, ~0U, 0U);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::execv(plan.argv[0], plan.argv.data());
  const char* why = std::strerror(errno);
  const char prefix[] = "exec failed: ";
  (void)!::write(2, prefix, sizeof(prefix) - 1);
  (void)!::write(2, why, std::strlen(why));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

}  // namespace

absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv,
                            const SpawnOptions& options) {
  if (argv.empty()) return absl::InvalidArgumentError("spawn: empty argv");
  if (options.output_fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("spawn ", argv[0], ": no descriptor for its output"));
  }
  const ExecPlan plan(argv);
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(plan, options.output_fd, &options);
  const int fork_errno = errno;
  if (pid < 0) {
    return absl::InternalError(
        absl::StrCat("spawn ", argv[0], ": fork: ", std::strerror(fork_errno)));
  }
  if (options.new_process_group) ::setpgid(pid, pid);  // no race with exec
  return pid;
}

std::optional<int> WaitForExit(pid_t pid, absl::Duration timeout, bool reap) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Duration pause = absl::Milliseconds(1);
  for (;;) {
    siginfo_t info{};
    const int r = ::waitid(P_PID, static_cast<id_t>(pid), &info,
                           WEXITED | WNOHANG | (reap ? 0 : WNOWAIT));
    if (r == 0 && info.si_pid == pid) {
      // Rebuild the classic wait status from the siginfo.
      return info.si_code == CLD_EXITED ? (info.si_status & 0xff) << 8
                                        : (info.si_status & 0x7f);
    }
    if (r < 0 && errno != EINTR) return 0;  // not our child (any more)
    if (absl::Now() >= deadline) return std::nullopt;
    absl::SleepFor(std::min(pause, deadline - absl::Now()));
    pause = std::min(pause * 2, absl::Milliseconds(50));
  }
}

std::string DescribeWaitStatus(int s) {
  if (WIFEXITED(s)) return absl::StrCat("exited with status ", WEXITSTATUS(s));
  if (WIFSIGNALED(s)) return absl::StrCat("killed by signal ", WTERMSIG(s));
  return absl::StrCat("ended with wait status ", s);
}

bool CommandResult::succeeded() const {
  return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0;
}

absl::StatusOr<CommandResult> RunCommand(const std::vector<std::string>& argv,
                                         absl::Duration timeout) {
  if (argv.empty()) return absl::InvalidArgumentError("run: empty argv");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return absl::InternalError(
        absl::StrCat("run ", argv[0], ": pipe: ", std::strerror(errno)));
  }
  const ExecPlan plan(argv);
  const pid_t pid = ::fork();
  if (pid == 0) ExecChild(plan, fds[1], nullptr);
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return absl::InternalError(absl::StrCat("run ", argv[0], ": fork failed"));
  }
  CommandResult result;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  char buf[4096];
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000))) <= 0) {
      continue;
    }
    const ssize_t n = ::read(fds[0], buf, sizeof(buf));
    if (n > 0) {
      if (result.output.size() < (1 << 20)) {
        result.output.append(buf, static_cast<size_t>(n));
      }
    } else if (n == 0 || errno != EINTR) {
      break;
    }
  }
  ::close(fds[0]);
  if (timed_out) ::kill(pid, SIGKILL);
  std::optional<int> status = WaitForExit(pid, absl::Seconds(5));
  if (!status.has_value()) {
    ::kill(pid, SIGKILL);
    status = WaitForExit(pid, absl::Seconds(5));
  }
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("run ", argv[0], ": still running after ",
                     absl::FormatDuration(timeout), "; killed"));
  }
  result.wait_status = status.value_or(0);
  return result;
}

}  // namespace loom::gateway
