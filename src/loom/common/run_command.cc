#include "loom/common/run_command.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom {

absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         size_t max_output) {
  return RunForOutputAs(argv, timeout, max_output, nullptr);
}

absl::StatusOr<std::string> RunForOutputAs(const std::vector<std::string>& argv,
                                           absl::Duration timeout,
                                           size_t max_output,
                                           const UserAccount* as) {
  if (argv.empty()) return absl::InvalidArgumentError("no command");
  std::vector<char*> args;
  for (const std::string& a : argv)
    args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  if (pipe2(err, O_CLOEXEC) != 0) {
    close(out[0]);
    close(out[1]);
    return absl::InternalError("pipe failed");
  }
  const pid_t pid = fork();
  if (pid < 0) {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    // Async-signal-safe calls only.
    const int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    setpgid(0, 0);
    if (as != nullptr) {
      // Raw system calls: glibc's wrappers synchronise credentials across
      // threads, which a forked child of a threaded process must not do.
      if (syscall(SYS_setgroups, as->groups.size(), as->groups.data()) != 0 ||
          syscall(SYS_setgid, as->gid) != 0 ||
          syscall(SYS_setuid, as->uid) != 0) {
        constexpr char kMessage[] = "loom: cannot switch to the user\n";
        (void)!write(2, kMessage, sizeof(kMessage) - 1);
        _exit(126);
      }
    }
    execvp(args[0], args.data());
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  std::string stdout_text, stderr_text;
  bool too_much = false;
  const absl::Time deadline = absl::Now() + timeout;
  bool timed_out = false;
  int open_fds = 2;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  while (open_fds > 0) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      timed_out = true;
      break;
    }
    const int ms = static_cast<int>(
        std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int r = poll(fds, 2, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) break;
    for (pollfd& p : fds) {
      if (p.fd < 0 || p.revents == 0) continue;
      char buf[65536];
      const ssize_t n = read(p.fd, buf, sizeof buf);
      if (n <= 0) {
        if (n < 0 && errno == EINTR) continue;
        close(p.fd);
        p.fd = -1;
        --open_fds;
        continue;
      }
      std::string& text = p.fd == out[0] ? stdout_text : stderr_text;
      const size_t cap = p.fd == out[0] ? max_output : 64 * 1024;
      if (text.size() + n > cap) {
        if (p.fd == out[0]) too_much = true;
        text.append(buf, cap - std::min(cap, text.size()));
      } else {
        text.append(buf, n);
      }
    }
    if (too_much) break;
  }
  for (pollfd& p : fds) {
    if (p.fd >= 0) close(p.fd);
  }
  if (timed_out || too_much) kill(-pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (timed_out) {
    return absl::DeadlineExceededError(absl::StrCat(
        argv[0], " did not finish in ", absl::FormatDuration(timeout)));
  }
  if (too_much) {
    return absl::ResourceExhaustedError(
        absl::StrCat(argv[0], " wrote more than ", max_output, " bytes"));
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    // The last non-empty line of stderr says why.
    std::string last;
    for (absl::string_view line : absl::StrSplit(stderr_text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (!line.empty()) last = std::string(line);
    }
    if (last.size() > 400) last.resize(400);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127 && last.empty()) {
      last = absl::StrCat("cannot run ", argv[0]);
    }
    return absl::UnavailableError(
        last.empty() ? absl::StrCat(argv[0], " failed") : last);
  }
  return stdout_text;
}

}  // namespace loom
