#include "loom/batch/step_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

extern char** environ;

namespace loom::batch {
namespace {

// Writes a message from the child after fork: no allocation.
void ChildSay(const char* a, const char* b, const char* c) {
  for (const char* s : {a, b, c, "\n"}) {
    const size_t n = std::strlen(s);
    if (n > 0 && ::write(STDERR_FILENO, s, n) < 0) return;
  }
}

}  // namespace

StepRunner::StepRunner(OutputFn on_output, EndFn on_end)
    : on_output_(std::move(on_output)), on_end_(std::move(on_end)) {}

StepRunner::~StepRunner() {
  for (Task& t : tasks_) {
    if (!t.exited) {
      ::kill(t.pid, SIGKILL);
      ::waitpid(t.pid, nullptr, 0);
    }
    ClosePipes(t);
  }
}

void StepRunner::ClosePipes(Task& t) {
  if (t.out >= 0) ::close(t.out);
  if (t.err >= 0) ::close(t.err);
  t.out = t.err = -1;
}

absl::Status StepRunner::Start(const StepTaskSpec& spec) {
  if (spec.argv.empty()) return absl::InvalidArgumentError("no command");
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  // Everything the child needs, made before the fork.
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> argv_strings = spec.argv;
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);

  // Every signal stays blocked from the fork until the child has put the
  // handlers back to their defaults: one sent to the task at once (srun's
  // Ctrl-C, a cancel) must not run this process's handler in the child and
  // be lost there.
  sigset_t all, old_mask;
  sigfillset(&all);
  ::pthread_sigmask(SIG_SETMASK, &all, &old_mask);
  const pid_t pid = ::fork();
  const int fork_errno = errno;
  if (pid != 0) ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  if (pid < 0) {
    const int e = fork_errno;
    for (int fd : {out[0], out[1], err[0], err[1], devnull}) {
      if (fd >= 0) ::close(fd);
    }
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(e)));
  }
  if (pid == 0) {
    // The child: signals back to their defaults, then unblocked; the pipes
    // as 1 and 2.
    for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGCHLD, SIGHUP, SIGQUIT}) {
      ::signal(s, SIG_DFL);
    }
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) {
      const int e = errno;
      ChildSay("srun: cannot enter ", spec.cwd.c_str(), "");
      ChildSay("srun: ", std::strerror(e), "");
      ::_exit(1);
    }
    environ = envp.data();
    ::execvp(argv[0], argv.data());
    const int e = errno;
    ChildSay("srun: cannot execute ", argv[0], "");
    ChildSay("srun: ", std::strerror(e), "");
    ::_exit(e == ENOENT ? 127 : 126);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (devnull >= 0) ::close(devnull);
  for (int fd : {out[0], err[0]}) {
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  }
  Task t;
  t.step = spec.step;
  t.procid = spec.procid;
  t.pid = pid;
  t.out = out[0];
  t.err = err[0];
  tasks_.push_back(t);
  return absl::OkStatus();
}

void StepRunner::AddPollFds(std::vector<pollfd>& fds) const {
  for (const Task& t : tasks_) {
    if (t.out >= 0) fds.push_back({t.out, POLLIN, 0});
    if (t.err >= 0) fds.push_back({t.err, POLLIN, 0});
  }
}

void StepRunner::ReadPipe(Task& t, int* fd, uint8_t stream) {
  char buf[65536];
  while (*fd >= 0) {
    const ssize_t n = ::read(*fd, buf, sizeof(buf));
    if (n > 0) {
      on_output_(OutputChunk{t.step, t.procid, stream,
                             std::string(buf, static_cast<size_t>(n))});
      if (static_cast<size_t>(n) < sizeof(buf)) return;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    ::close(*fd);
    *fd = -1;
  }
}

void StepRunner::OnPoll(const std::vector<pollfd>& fds) {
  for (const pollfd& p : fds) {
    if ((p.revents & (POLLIN | POLLHUP | POLLERR)) == 0) continue;
    for (Task& t : tasks_) {
      if (t.out == p.fd) ReadPipe(t, &t.out, 1);
      if (t.err == p.fd) ReadPipe(t, &t.err, 2);
    }
  }
}

void StepRunner::Reap() {
  const int64_t now = MonotonicMs();
  for (Task& t : tasks_) {
    if (t.exited) continue;
    int status = 0;
    const pid_t r = ::waitpid(t.pid, &status, WNOHANG);
    if (r != t.pid) continue;
    t.exited = true;
    t.exited_at_ms = now;
    if (WIFSIGNALED(status)) {
      t.signal = WTERMSIG(status);
    } else {
      t.exit_code = WEXITSTATUS(status);
    }
  }
  for (size_t i = 0; i < tasks_.size();) {
    Task& t = tasks_[i];
    const bool drained = t.out < 0 && t.err < 0;
    if (t.exited && (drained || now - t.exited_at_ms > 2000)) {
      // What is left in the pipes (a grandchild may hold them open).
      ReadPipe(t, &t.out, 1);
      ReadPipe(t, &t.err, 2);
      ClosePipes(t);
      const TaskEnd end{t.step, t.procid, t.exit_code, t.signal};
      tasks_.erase(tasks_.begin() + static_cast<std::ptrdiff_t>(i));
      on_end_(end);
      continue;
    }
    ++i;
  }
}

void StepRunner::Signal(uint32_t step, int signal) {
  for (const Task& t : tasks_) {
    if (t.step == step && !t.exited) ::kill(t.pid, signal);
  }
}

void StepRunner::SignalAll(int signal) {
  for (const Task& t : tasks_) {
    if (!t.exited) ::kill(t.pid, signal);
  }
}

bool StepRunner::Runs(uint32_t step) const {
  for (const Task& t : tasks_) {
    if (t.step == step) return true;
  }
  return false;
}

}  // namespace loom::batch
