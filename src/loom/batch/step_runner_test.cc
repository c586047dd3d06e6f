#include "loom/batch/step_runner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace loom::batch {
namespace {

using ::testing::HasSubstr;

int64_t RunnerTestNowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A temporary directory, removed with what it holds.
class RunnerTestTempDir {
 public:
  RunnerTestTempDir() {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "loom-runner-test-XXXXXX")
            .string();
    if (::mkdtemp(tmpl.data()) != nullptr) {
      path_ = std::filesystem::canonical(tmpl).string();
    }
    EXPECT_FALSE(path_.empty());
  }
  ~RunnerTestTempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

StepTaskSpec RunnerTestSpec(uint32_t step, uint32_t procid,
                            std::vector<std::string> argv) {
  StepTaskSpec s;
  s.step = step;
  s.procid = procid;
  s.argv = std::move(argv);
  s.env = {{"PATH", "/usr/bin:/bin"}};
  return s;
}

StepTaskSpec RunnerTestShell(uint32_t step, uint32_t procid,
                             const std::string& script) {
  return RunnerTestSpec(step, procid, {"/bin/sh", "-c", script});
}

class StepRunnerTest : public ::testing::Test {
 protected:
  using Key = std::tuple<uint32_t, uint32_t, int>;  // step, procid, stream

  ~StepRunnerTest() override {
    // Nothing a test started may outlive it.
    runner_.SignalAll(SIGKILL);
    Drive([&] { return runner_.empty(); }, 5000);
  }

  // Polls and reaps until `done` holds or `timeout_ms` passes.
  bool Drive(const std::function<bool()>& done, int timeout_ms = 10000) {
    const int64_t end = RunnerTestNowMs() + timeout_ms;
    while (!done()) {
      if (RunnerTestNowMs() > end) return false;
      std::vector<pollfd> fds;
      runner_.AddPollFds(fds);
      const int rc = ::poll(fds.data(), fds.size(), 10);
      if (rc < 0 && errno != EINTR) {
        ADD_FAILURE() << "poll: " << std::strerror(errno);
        return false;
      }
      if (rc > 0) runner_.OnPoll(fds);
      runner_.Reap();
    }
    return true;
  }

  bool Ended(uint32_t step, uint32_t procid) const {
    for (const TaskEnd& e : ends_) {
      if (e.step == step && e.procid == procid) return true;
    }
    return false;
  }

  const TaskEnd* EndOf(uint32_t step, uint32_t procid) const {
    for (const TaskEnd& e : ends_) {
      if (e.step == step && e.procid == procid) return &e;
    }
    return nullptr;
  }

  std::string Out(uint32_t step, uint32_t procid, int stream) const {
    auto it = output_.find({step, procid, stream});
    return it == output_.end() ? "" : it->second;
  }

  // Runs one task to its end.
  TaskEnd RunOne(const StepTaskSpec& spec) {
    absl::Status st = runner_.Start(spec);
    EXPECT_TRUE(st.ok()) << st;
    EXPECT_TRUE(Drive([&] { return Ended(spec.step, spec.procid); }))
        << "task did not end";
    const TaskEnd* e = EndOf(spec.step, spec.procid);
    return e == nullptr ? TaskEnd{} : *e;
  }

  std::vector<OutputChunk> chunks_;
  std::map<Key, std::string> output_;
  std::vector<TaskEnd> ends_;
  // The output each task had handed on when its end came.
  std::map<Key, std::string> output_at_end_;
  StepRunner runner_{[this](OutputChunk c) {
                       output_[{c.step, c.procid, c.stream}] += c.bytes;
                       chunks_.push_back(std::move(c));
                     },
                     [this](const TaskEnd& e) {
                       for (int stream : {1, 2}) {
                         output_at_end_[{e.step, e.procid, stream}] =
                             Out(e.step, e.procid, stream);
                       }
                       ends_.push_back(e);
                     }};
};

TEST_F(StepRunnerTest, OutputStreamsAndExitCode) {
  ASSERT_TRUE(
      runner_.Start(RunnerTestShell(4, 2, "echo out; echo err >&2; exit 3"))
          .ok());
  EXPECT_FALSE(runner_.empty());
  EXPECT_TRUE(runner_.Runs(4));
  EXPECT_FALSE(runner_.Runs(5));
  std::vector<pollfd> fds;
  runner_.AddPollFds(fds);
  EXPECT_EQ(fds.size(), 2u);  // stdout and stderr
  ASSERT_TRUE(Drive([&] { return !ends_.empty(); }));

  ASSERT_EQ(ends_.size(), 1u);
  EXPECT_EQ(ends_[0].step, 4u);
  EXPECT_EQ(ends_[0].procid, 2u);
  EXPECT_EQ(ends_[0].exit_code, 3);
  EXPECT_EQ(ends_[0].signal, 0);
  ASSERT_FALSE(chunks_.empty());
  for (const OutputChunk& c : chunks_) {
    EXPECT_EQ(c.step, 4u);
    EXPECT_EQ(c.procid, 2u);
    EXPECT_TRUE(c.stream == 1 || c.stream == 2) << int{c.stream};
    EXPECT_FALSE(c.bytes.empty());
  }
  EXPECT_EQ(Out(4, 2, 1), "out\n");
  EXPECT_EQ(Out(4, 2, 2), "err\n");
  // The end came after all of the output.
  EXPECT_EQ((output_at_end_[{4, 2, 1}]), "out\n");
  EXPECT_EQ((output_at_end_[{4, 2, 2}]), "err\n");
  EXPECT_TRUE(runner_.empty());
  EXPECT_FALSE(runner_.Runs(4));
  fds.clear();
  runner_.AddPollFds(fds);
  EXPECT_TRUE(fds.empty());
}

TEST_F(StepRunnerTest, EndAfterLargeOutput) {
  // Far more than a pipe holds, on both streams.
  TaskEnd e = RunOne(RunnerTestShell(
      1, 0, "head -c 300000 /dev/zero; head -c 200000 /dev/zero >&2"));
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Out(1, 0, 1), std::string(300000, '\0'));
  EXPECT_EQ(Out(1, 0, 2).size(), 200000u);
  EXPECT_EQ((output_at_end_[{1, 0, 1}].size()), 300000u);
  EXPECT_EQ((output_at_end_[{1, 0, 2}].size()), 200000u);
}

TEST_F(StepRunnerTest, SeveralTasksKeepTheirOutputApart) {
  for (uint32_t procid = 0; procid < 4; ++procid) {
    StepTaskSpec spec = RunnerTestShell(
        7, procid, "echo task $TASK; echo warn $TASK >&2; exit $TASK");
    spec.env["TASK"] = std::to_string(procid);
    ASSERT_TRUE(runner_.Start(spec).ok());
  }
  ASSERT_TRUE(Drive([&] { return ends_.size() == 4; }));
  for (uint32_t procid = 0; procid < 4; ++procid) {
    const std::string n = std::to_string(procid);
    EXPECT_EQ(Out(7, procid, 1), "task " + n + "\n");
    EXPECT_EQ(Out(7, procid, 2), "warn " + n + "\n");
    const TaskEnd* e = EndOf(7, procid);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->exit_code, static_cast<int>(procid));
  }
  EXPECT_TRUE(runner_.empty());
}

TEST_F(StepRunnerTest, SignalReportsTheSignal) {
  ASSERT_TRUE(runner_.Start(RunnerTestSpec(1, 0, {"/bin/sleep", "30"})).ok());
  ASSERT_TRUE(runner_.Start(RunnerTestSpec(1, 1, {"/bin/sleep", "30"})).ok());
  ASSERT_TRUE(runner_.Start(RunnerTestSpec(2, 0, {"/bin/sleep", "30"})).ok());
  // Nothing ends on its own.
  EXPECT_FALSE(Drive([&] { return !ends_.empty(); }, 50));
  runner_.Signal(1, SIGTERM);
  ASSERT_TRUE(Drive([&] { return Ended(1, 0) && Ended(1, 1); }, 5000));
  for (uint32_t procid : {0u, 1u}) {
    const TaskEnd* e = EndOf(1, procid);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->signal, SIGTERM);
    EXPECT_EQ(e->exit_code, 0);
  }
  // Only step 1 was signalled.
  EXPECT_FALSE(Ended(2, 0));
  EXPECT_TRUE(runner_.Runs(2));
  EXPECT_FALSE(runner_.Runs(1));
  EXPECT_FALSE(runner_.empty());
  runner_.Signal(1, SIGKILL);  // a step that has ended: nothing happens
  EXPECT_FALSE(Drive([&] { return Ended(2, 0); }, 50));
  runner_.Signal(2, SIGKILL);
  ASSERT_TRUE(Drive([&] { return Ended(2, 0); }, 5000));
  EXPECT_EQ(EndOf(2, 0)->signal, SIGKILL);
  EXPECT_TRUE(runner_.empty());
}

TEST_F(StepRunnerTest, SignalAll) {
  for (uint32_t step = 1; step <= 3; ++step) {
    ASSERT_TRUE(
        runner_.Start(RunnerTestSpec(step, 0, {"/bin/sleep", "30"})).ok());
  }
  runner_.SignalAll(SIGINT);
  ASSERT_TRUE(Drive([&] { return ends_.size() == 3; }, 5000));
  for (const TaskEnd& e : ends_) EXPECT_EQ(e.signal, SIGINT);
  EXPECT_TRUE(runner_.empty());
}

TEST_F(StepRunnerTest, TaskCatchingTheSignalReportsItsExit) {
  // A task that handles SIGTERM and exits 143 itself: an exit, not a
  // signal.
  ASSERT_TRUE(
      runner_
          .Start(RunnerTestShell(1, 0,
                                 "trap 'echo bye; exit 143' TERM; echo ready; "
                                 "while :; do sleep 0.05; done"))
          .ok());
  ASSERT_TRUE(Drive([&] { return Out(1, 0, 1) == "ready\n"; }, 5000));
  runner_.Signal(1, SIGTERM);
  ASSERT_TRUE(Drive([&] { return Ended(1, 0); }, 5000));
  EXPECT_EQ(EndOf(1, 0)->exit_code, 143);
  EXPECT_EQ(EndOf(1, 0)->signal, 0);
  EXPECT_EQ(Out(1, 0, 1), "ready\nbye\n");
}

void RunnerTestIgnore(int) {}

// The runner's own process catches SIGTERM (as the batch head and the step
// hosts do): a task signalled at once after its start must still die of
// it, not run the parent's handler between its fork and its exec.
TEST_F(StepRunnerTest, SignalRightAfterStartIsNotLost) {
  struct sigaction sa {};
  sa.sa_handler = RunnerTestIgnore;
  sigemptyset(&sa.sa_mask);
  struct sigaction old_term {};
  ASSERT_EQ(::sigaction(SIGTERM, &sa, &old_term), 0);
  int lost = 0;
  for (uint32_t step = 0; step < 40; ++step) {
    ASSERT_TRUE(
        runner_.Start(RunnerTestSpec(step, 0, {"/bin/sleep", "30"})).ok());
    runner_.Signal(step, SIGTERM);
    if (!Drive([&] { return Ended(step, 0); }, 3000)) {
      ++lost;
      runner_.Signal(step, SIGKILL);
      ASSERT_TRUE(Drive([&] { return Ended(step, 0); }, 5000));
    }
    EXPECT_EQ(EndOf(step, 0)->signal, SIGTERM) << "step " << step;
    if (lost > 0) break;
  }
  ::sigaction(SIGTERM, &old_term, nullptr);
  EXPECT_EQ(lost, 0);
}

// The signal set of /proc/self/status's line `name` ("SigBlk", "SigIgn")
// in `status`, or ~0 when there is none.
uint64_t RunnerTestSigSet(const std::string& status, const std::string& name) {
  const size_t at = status.find(name + ":\t");
  uint64_t set = ~uint64_t{0};
  if (at == std::string::npos) return set;
  const size_t from = at + name.size() + 2;
  const std::string hex = status.substr(from, status.find('\n', from) - from);
  if (!absl::SimpleHexAtoi(hex, &set)) return ~uint64_t{0};
  return set;
}

bool RunnerTestHas(uint64_t set, int signal) {
  return (set >> (signal - 1)) & 1;
}

TEST_F(StepRunnerTest, ParentsSignalMaskAndIgnoredSignalsAreNotInherited) {
  sigset_t term, old_mask;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  ASSERT_EQ(::sigprocmask(SIG_BLOCK, &term, &old_mask), 0);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  struct sigaction old_int {
  }, old_pipe{};
  ASSERT_EQ(::sigaction(SIGINT, &ign, &old_int), 0);
  ASSERT_EQ(::sigaction(SIGPIPE, &ign, &old_pipe), 0);
  const absl::Status a =
      runner_.Start(RunnerTestSpec(1, 0, {"/bin/sleep", "30"}));
  const absl::Status b =
      runner_.Start(RunnerTestSpec(2, 0, {"/bin/sleep", "30"}));
  const absl::Status c = runner_.Start(RunnerTestSpec(
      3, 0, {"grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"}));
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  runner_.Signal(1, SIGTERM);
  runner_.Signal(2, SIGINT);
  ASSERT_TRUE(Drive([&] { return ends_.size() == 3; }, 5000));
  EXPECT_EQ(EndOf(1, 0)->signal, SIGTERM);
  EXPECT_EQ(EndOf(2, 0)->signal, SIGINT);
  EXPECT_EQ(EndOf(3, 0)->exit_code, 0);
  const std::string status = Out(3, 0, 1);
  const uint64_t blocked = RunnerTestSigSet(status, "SigBlk");
  const uint64_t ignored = RunnerTestSigSet(status, "SigIgn");
  EXPECT_EQ(blocked, 0u) << status;
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP, SIGQUIT}) {
    EXPECT_FALSE(RunnerTestHas(ignored, s)) << "signal " << s << "\n" << status;
  }
}

TEST_F(StepRunnerTest, MissingProgramExits127WithAMessage) {
  TaskEnd e = RunOne(RunnerTestSpec(3, 5, {"/nonexistent/loom-no-such-prog"}));
  EXPECT_EQ(e.step, 3u);
  EXPECT_EQ(e.procid, 5u);
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_EQ(e.signal, 0);
  EXPECT_THAT(Out(3, 5, 2),
              HasSubstr("cannot execute /nonexistent/loom-no-such-prog"));
  EXPECT_THAT(Out(3, 5, 2), HasSubstr("No such file or directory"));
  EXPECT_EQ(Out(3, 5, 1), "");
  // Looked up on the task's PATH.
  e = RunOne(RunnerTestSpec(4, 0, {"loom-no-such-prog-on-path"}));
  EXPECT_EQ(e.exit_code, 127);
  EXPECT_THAT(Out(4, 0, 2), HasSubstr("loom-no-such-prog-on-path"));
}

TEST_F(StepRunnerTest, NonExecutableExits126) {
  RunnerTestTempDir dir;
  const std::string file = dir.path() + "/not-executable";
  std::ofstream(file) << "#!/bin/sh\necho hi\n";
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  TaskEnd e = RunOne(RunnerTestSpec(1, 0, {file}));
  EXPECT_EQ(e.exit_code, 126);
  EXPECT_THAT(Out(1, 0, 2), HasSubstr("cannot execute " + file));
}

TEST_F(StepRunnerTest, EnvironmentIsTheTasksOnly) {
  ASSERT_EQ(::setenv("LOOM_RUNNER_TEST_LEAK", "leaked", 1), 0);
  StepTaskSpec spec = RunnerTestShell(
      1, 0, "echo \"FOO=$FOO\"; echo \"LEAK=${LOOM_RUNNER_TEST_LEAK-unset}\"");
  spec.env["FOO"] = "bar baz=1";
  TaskEnd e = RunOne(spec);
  ::unsetenv("LOOM_RUNNER_TEST_LEAK");
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Out(1, 0, 1), "FOO=bar baz=1\nLEAK=unset\n");
}

TEST_F(StepRunnerTest, ProgramFoundOnTheTasksPath) {
  RunnerTestTempDir dir;
  const std::string prog = dir.path() + "/loom-runner-test-hello";
  std::ofstream(prog) << "#!/bin/sh\necho hello from \"$0\"\n";
  ASSERT_EQ(::chmod(prog.c_str(), 0755), 0);
  StepTaskSpec spec = RunnerTestSpec(1, 0, {"loom-runner-test-hello"});
  spec.env["PATH"] = dir.path() + ":/usr/bin:/bin";
  TaskEnd e = RunOne(spec);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Out(1, 0, 1), "hello from " + prog + "\n");
}

TEST_F(StepRunnerTest, WorkingDirectory) {
  RunnerTestTempDir dir;
  StepTaskSpec spec = RunnerTestShell(1, 0, "pwd");
  spec.cwd = dir.path();
  TaskEnd e = RunOne(spec);
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Out(1, 0, 1), dir.path() + "\n");

  // Without one, the runner's.
  e = RunOne(RunnerTestShell(2, 0, "pwd"));
  EXPECT_EQ(
      Out(2, 0, 1),
      std::filesystem::canonical(std::filesystem::current_path()).string() +
          "\n");

  // One that does not exist: the task fails and says why.
  spec = RunnerTestShell(3, 0, "echo should not run");
  spec.cwd = dir.path() + "/missing";
  e = RunOne(spec);
  EXPECT_EQ(e.exit_code, 1);
  EXPECT_EQ(Out(3, 0, 1), "");
  EXPECT_EQ(Out(3, 0, 2), "srun: cannot enter " + spec.cwd +
                              "\nsrun: No such file or directory\n");
}

TEST_F(StepRunnerTest, StdinIsEmpty) {
  // cat would wait forever on an inherited terminal or pipe.
  TaskEnd e = RunOne(RunnerTestSpec(1, 0, {"/bin/cat"}));
  EXPECT_EQ(e.exit_code, 0);
  EXPECT_EQ(Out(1, 0, 1), "");
}

TEST_F(StepRunnerTest, NoCommandIsAnError) {
  absl::Status st = runner_.Start(RunnerTestSpec(1, 0, {}));
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(runner_.empty());
}

TEST_F(StepRunnerTest, EndCallbackMayStartTheNextTask) {
  // The head starts follow-up work from its callbacks; the runner must
  // cope with tasks added while it reports.
  StepRunner chained(
      [this](OutputChunk c) {
        output_[{c.step, c.procid, c.stream}] += c.bytes;
      },
      [&](const TaskEnd& e) {
        ends_.push_back(e);
        if (e.step < 3) {
          EXPECT_TRUE(
              chained.Start(RunnerTestShell(e.step + 1, 0, "echo next")).ok());
        }
      });
  ASSERT_TRUE(chained.Start(RunnerTestShell(1, 0, "echo first")).ok());
  const int64_t end = RunnerTestNowMs() + 10000;
  while (!(ends_.size() == 3 && chained.empty()) && RunnerTestNowMs() < end) {
    std::vector<pollfd> fds;
    chained.AddPollFds(fds);
    if (::poll(fds.data(), fds.size(), 10) > 0) chained.OnPoll(fds);
    chained.Reap();
  }
  ASSERT_EQ(ends_.size(), 3u);
  EXPECT_TRUE(chained.empty());
  EXPECT_EQ(Out(1, 0, 1), "first\n");
  EXPECT_EQ(Out(2, 0, 1), "next\n");
  EXPECT_EQ(Out(3, 0, 1), "next\n");
}

TEST_F(StepRunnerTest, DestructorKillsWhatStillRuns) {
  pid_t pid = 0;
  {
    std::string out;
    StepRunner scoped([&](OutputChunk c) { out += c.bytes; },
                      [](const TaskEnd&) {});
    ASSERT_TRUE(
        scoped.Start(RunnerTestShell(1, 0, "echo $$; exec sleep 30")).ok());
    const int64_t end = RunnerTestNowMs() + 5000;
    while (out.find('\n') == std::string::npos && RunnerTestNowMs() < end) {
      std::vector<pollfd> fds;
      scoped.AddPollFds(fds);
      if (::poll(fds.data(), fds.size(), 10) > 0) scoped.OnPoll(fds);
    }
    ASSERT_TRUE(absl::SimpleAtoi(out.substr(0, out.find('\n')), &pid)) << out;
    ASSERT_EQ(::kill(pid, 0), 0);
  }
  // Killed and reaped: no such process any more.
  errno = 0;
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

}  // namespace
}  // namespace loom::batch
