// Tests of the agent's task launcher with real processes in temporary
// directories. Shell snippets print "ready" once their traps are installed;
// tests wait for it before they send signals.

#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_files.h"
#include "loom/agent/task_group.h"
#include "loom/agent/task_launcher.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "loom_agent_XXXXXX");
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

bool WaitUntil(const std::function<bool()>& done,
               absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

bool WaitForText(const std::string& path, const std::string& text) {
  return WaitUntil([&] { return absl::StrContains(ReadFile(path), text); });
}

// Polls until `task_id` has an event; other events are dropped.
std::optional<TaskEvent> WaitForEvent(
    TaskLauncher& launcher, const std::string& task_id,
    absl::Duration timeout = absl::Seconds(5)) {
  std::optional<TaskEvent> found;
  WaitUntil(
      [&] {
        for (TaskEvent& e : launcher.Poll()) {
          if (e.task_id == task_id) found = std::move(e);
        }
        return found.has_value();
      },
      timeout);
  return found;
}

std::optional<TaskInfo> InfoOf(const TaskLauncher& launcher,
                               const std::string& task_id) {
  for (const TaskInfo& info : launcher.List()) {
    if (info.task_id == task_id) return info;
  }
  return std::nullopt;
}

// Pids whose parent is `parent` (zombies included).
std::set<pid_t> ChildrenOf(pid_t parent) {
  std::set<pid_t> out;
  for (const auto& entry : fs::directory_iterator("/proc")) {
    pid_t pid;
    if (!absl::SimpleAtoi(entry.path().filename().string(), &pid)) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    const size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields =
        absl::StrSplit(stat.substr(close + 2), ' ');
    pid_t ppid;
    if (fields.size() > 1 && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      out.insert(pid);
    }
  }
  return out;
}

bool GroupIsEmpty(pid_t pgid) {
  return ::kill(-pgid, 0) != 0 && errno == ESRCH;
}

bool ProcessIsGone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& entry : fs::directory_iterator(dir)) {
    out.insert(entry.path().filename().string());
  }
  return out;
}

class TaskLauncherTest : public ::testing::Test {
 protected:
  std::string state_dir() const { return tmp_ / "state"; }

  std::unique_ptr<ShimTaskLauncher> NewLauncher(
      CgroupManager* cgroups = nullptr) {
    ShimTaskLauncherOptions options;
    options.state_dir = state_dir();
    options.cgroups = cgroups;
    options.now = clock_.AsFunction();
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> launcher =
        ShimTaskLauncher::Create(std::move(options));
    EXPECT_TRUE(launcher.ok()) << launcher.status();
    return launcher.ok() ? *std::move(launcher) : nullptr;
  }

  // `/bin/sh -c script` with a minimal environment.
  TaskSpec Shell(const std::string& task_id, const std::string& script) {
    TaskSpec spec;
    spec.task_id = task_id;
    spec.argv = {"/bin/sh", "-c", script};
    spec.env = {
        {"PATH", "/usr/bin:/bin"}, {"HOME", tmp_.path()}, {"LANG", "C"}};
    spec.working_dir = tmp_ / "work";
    spec.stdout_path = Out(task_id);
    spec.stderr_path = Err(task_id);
    return spec;
  }
  std::string Out(const std::string& task_id) const {
    return tmp_ / (task_id + ".out");
  }
  std::string Err(const std::string& task_id) const {
    return tmp_ / (task_id + ".err");
  }

  // Stops a task that a test left running and forgets it.
  void Cleanup(TaskLauncher& launcher, const std::string& task_id) {
    (void)launcher.Stop(task_id, SIGKILL, absl::ZeroDuration());
    WaitForEvent(launcher, task_id);
    (void)launcher.Forget(task_id);
  }

  TempDir tmp_;
  FakeClock clock_;
};

TEST_F(TaskLauncherTest, ReportsExitCodeAndAppendsOutputToFiles) {
  auto launcher = NewLauncher();
  WriteFile(Out("42.1"), "old\n");
  absl::StatusOr<TaskHandle> handle =
      launcher->Launch(Shell("42.1", "echo out; echo err >&2; exit 3"));
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_GT(handle->pid, 0);
  EXPECT_EQ(handle->pgid, handle->pid);
  EXPECT_GT(handle->shim_pid, 0);
  EXPECT_NE(handle->shim_pid, handle->pid);
  EXPECT_GT(handle->start_time_ticks, 0u);

  std::optional<TaskEvent> event = WaitForEvent(*launcher, "42.1");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kExited);
  EXPECT_EQ(event->exit_code, 3);
  EXPECT_EQ(event->term_signal, 0);
  EXPECT_LT(absl::AbsDuration(event->ended_at - absl::Now()), absl::Minutes(1));
  EXPECT_EQ(ReadFile(Out("42.1")), "old\nout\n");
  EXPECT_EQ(ReadFile(Err("42.1")), "err\n");

  // Reported once; kept (and the id taken) until forgotten.
  EXPECT_TRUE(launcher->Poll().empty());
  std::optional<TaskInfo> info = InfoOf(*launcher, "42.1");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, TaskInfo::State::kExited);
  EXPECT_EQ(info->exit_code, 3);
  EXPECT_TRUE(fs::exists(state_dir() + "/42.1.exit"));
  ASSERT_TRUE(launcher->Forget("42.1").ok());
  EXPECT_TRUE(FilesIn(state_dir()).empty());
  EXPECT_TRUE(launcher->List().empty());
  EXPECT_EQ(launcher->Forget("42.1").code(), absl::StatusCode::kNotFound);
}

TEST_F(TaskLauncherTest, EnvironmentIsExactlyThePassedMap) {
  ASSERT_EQ(::setenv("LOOM_AGENT_ONLY", "secret", 1), 0);
  auto launcher = NewLauncher();
  TaskSpec spec = Shell("1.0", "");
  spec.argv = {"env"};  // found through the task's PATH
  spec.env = {{"PATH", "/usr/bin:/bin"},   {"HOME", "/nonexistent"},
              {"LANG", "C.UTF-8"},         {"CUDA_VISIBLE_DEVICES", "0,1"},
              {"MASTER_ADDR", "10.0.0.1"}, {"RANK", "3"},
              {"SPACEY", "a b=c"}};
  ASSERT_TRUE(launcher->Launch(spec).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "1.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(Out("1.0")), '\n', absl::SkipEmpty());
  std::vector<std::string> expected;
  for (const auto& [k, v] : spec.env) expected.push_back(k + "=" + v);
  EXPECT_THAT(lines, UnorderedElementsAreArray(expected));
  ::unsetenv("LOOM_AGENT_ONLY");
}

TEST_F(TaskLauncherTest, PathHomeAndLangComeFromTheAgentWhenMissing) {
  ASSERT_EQ(::setenv("LOOM_AGENT_ONLY", "secret", 1), 0);
  ASSERT_EQ(::setenv("LANG", "C.UTF-8", 1), 0);
  ASSERT_NE(std::getenv("PATH"), nullptr);
  auto launcher = NewLauncher();
  TaskSpec spec = Shell("1.1", "");
  spec.argv = {"/usr/bin/env"};
  spec.env = {{"RANK", "0"}};
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_TRUE(WaitForEvent(*launcher, "1.1").has_value());
  std::vector<std::string> lines =
      absl::StrSplit(ReadFile(Out("1.1")), '\n', absl::SkipEmpty());
  std::vector<std::string> expected = {"RANK=0"};
  for (const char* name : {"PATH", "HOME", "LANG"}) {
    if (const char* v = std::getenv(name)) {
      expected.push_back(absl::StrCat(name, "=", v));
    }
  }
  EXPECT_THAT(lines, UnorderedElementsAreArray(expected));
  ::unsetenv("LOOM_AGENT_ONLY");
}

TEST_F(TaskLauncherTest, CreatesAndUsesTheWorkingDirectory) {
  auto launcher = NewLauncher();
  TaskSpec spec = Shell("2.0", "");
  spec.argv = {"/bin/pwd", "-P"};
  spec.working_dir = tmp_ / "a/b/c";
  ASSERT_TRUE(launcher->Launch(spec).ok());
  ASSERT_TRUE(WaitForEvent(*launcher, "2.0").has_value());
  EXPECT_EQ(ReadFile(Out("2.0")),
            fs::canonical(tmp_ / "a/b/c").string() + "\n");
}

TEST_F(TaskLauncherTest, ExecFailureIsAClearErrorAndLeavesNothingBehind) {
  auto launcher = NewLauncher();
  const std::set<pid_t> children_before = ChildrenOf(::getpid());
  TaskSpec spec = Shell("7.0", "");
  spec.argv = {"loom-no-such-binary", "--help"};
  absl::StatusOr<TaskHandle> handle = launcher->Launch(spec);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(handle.status().message()),
              HasSubstr("task 7.0: exec loom-no-such-binary: No such file or "
                        "directory"));
  // The shim was reaped, nothing is recorded, the id is free again.
  EXPECT_EQ(ChildrenOf(::getpid()), children_before);
  EXPECT_TRUE(FilesIn(state_dir()).empty());
  EXPECT_TRUE(launcher->List().empty());
  EXPECT_TRUE(launcher->Poll().empty());

  // A file that exists but may not be executed.
  WriteFile(tmp_ / "work/script.sh", "#!/bin/sh\nexit 0\n");
  spec.argv = {"./script.sh"};
  handle = launcher->Launch(spec);
  ASSERT_FALSE(handle.ok());
  EXPECT_EQ(handle.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(handle.status().message()),
              HasSubstr("exec ./script.sh: Permission denied"));

  ::chmod((tmp_ / "work/script.sh").c_str(), 0755);
  handle = launcher->Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "7.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
}

TEST_F(TaskLauncherTest, RejectsInvalidSpecs) {
  auto launcher = NewLauncher();
  for (const std::string id : {"", "../x", "a/b", "..", "job 1"}) {
    TaskSpec spec = Shell(id, "exit 0");
    EXPECT_EQ(launcher->Launch(spec).status().code(),
              absl::StatusCode::kInvalidArgument)
        << id;
  }
  TaskSpec spec = Shell("3.0", "exit 0");
  spec.argv.clear();
  absl::Status status = launcher->Launch(spec).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("task 3.0"));
  spec = Shell("3.0", "exit 0");
  spec.env["A=B"] = "c";
  EXPECT_EQ(launcher->Launch(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  spec = Shell("3.0", "exit 0");
  spec.limits.memory_bytes = -1;
  CgroupV1Manager cgroups(tmp_ / "nocgroup", "");
  auto with_cgroups = NewLauncher(&cgroups);
  EXPECT_EQ(with_cgroups->Launch(spec).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(FilesIn(state_dir()).empty());
}

TEST_F(TaskLauncherTest, StopSendsSigkillToATaskIgnoringSigtermAfterGrace) {
  auto launcher = NewLauncher();
  ASSERT_TRUE(launcher
                  ->Launch(Shell("4.0",
                                 "trap '' TERM; echo ready; "
                                 "while :; do sleep 0.05; done"))
                  .ok());
  ASSERT_TRUE(WaitForText(Out("4.0"), "ready"));
  ASSERT_TRUE(launcher->Stop("4.0", SIGTERM, absl::Seconds(10)).ok());
  // SIGTERM is ignored; the grace has not passed on the injected clock.
  for (int i = 0; i < 20; ++i) {
    EXPECT_TRUE(launcher->Poll().empty());
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::optional<TaskInfo> info = InfoOf(*launcher, "4.0");
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, TaskInfo::State::kRunning);
  EXPECT_TRUE(info->stopping);

  clock_.Advance(absl::Seconds(10));
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "4.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kExited);
  EXPECT_EQ(event->term_signal, SIGKILL);
  EXPECT_EQ(event->exit_code, -1);
  // Stopping an ended task is a no-op; signalling it is an error.
  EXPECT_TRUE(launcher->Stop("4.0", SIGTERM, absl::Seconds(1)).ok());
  EXPECT_EQ(launcher->Signal("4.0", SIGTERM).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(TaskLauncherTest, StopLetsATaskExitWithItsOwnCode) {
  auto launcher = NewLauncher();
  ASSERT_TRUE(launcher
                  ->Launch(Shell("4.1",
                                 "trap 'exit 42' TERM; echo ready; "
                                 "while :; do sleep 0.05; done"))
                  .ok());
  ASSERT_TRUE(WaitForText(Out("4.1"), "ready"));
  ASSERT_TRUE(launcher->Stop("4.1", SIGTERM, absl::Seconds(30)).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "4.1");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kExited);
  EXPECT_EQ(event->exit_code, 42);
  EXPECT_EQ(event->term_signal, 0);
}

TEST_F(TaskLauncherTest, StopKillsTheWholeProcessGroup) {
  auto launcher = NewLauncher();
  absl::StatusOr<TaskHandle> handle = launcher->Launch(
      Shell("5.0",
            "trap '' TERM; sleep 100 & echo $! > grandchild; echo ready; "
            "wait"));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(WaitForText(Out("5.0"), "ready"));
  pid_t grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(ReadFile(tmp_ / "work/grandchild")),
      &grandchild));
  EXPECT_EQ(::getpgid(grandchild), handle->pgid);

  ASSERT_TRUE(launcher->Stop("5.0", SIGTERM, absl::Seconds(5)).ok());
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_TRUE(launcher->Poll().empty());
  EXPECT_FALSE(ProcessIsGone(grandchild));  // it ignores SIGTERM too

  clock_.Advance(absl::Seconds(5));
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "5.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->term_signal, SIGKILL);
  // By the time the exit is recorded, no process of the group is left, not
  // even as a zombie.
  EXPECT_TRUE(GroupIsEmpty(handle->pgid));
  EXPECT_TRUE(ProcessIsGone(grandchild));
}

TEST_F(TaskLauncherTest, LeftoverGroupMembersDieWithTheTask) {
  auto launcher = NewLauncher();
  absl::StatusOr<TaskHandle> handle = launcher->Launch(
      Shell("5.1", "sleep 100 & echo $! > grandchild5; exit 0"));
  ASSERT_TRUE(handle.ok()) << handle.status();
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "5.1");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
  pid_t grandchild = 0;
  ASSERT_TRUE(absl::SimpleAtoi(
      absl::StripAsciiWhitespace(ReadFile(tmp_ / "work/grandchild5")),
      &grandchild));
  EXPECT_TRUE(GroupIsEmpty(handle->pgid));
  EXPECT_TRUE(ProcessIsGone(grandchild));
}

TEST_F(TaskLauncherTest, SignalReachesTheTask) {
  auto launcher = NewLauncher();
  ASSERT_TRUE(launcher
                  ->Launch(Shell("6.0",
                                 "trap 'echo got-usr1; exit 5' USR1; "
                                 "echo ready; while :; do sleep 0.05; done"))
                  .ok());
  ASSERT_TRUE(WaitForText(Out("6.0"), "ready"));
  ASSERT_TRUE(launcher->Signal("6.0", SIGUSR1).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "6.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 5);
  EXPECT_THAT(ReadFile(Out("6.0")), HasSubstr("got-usr1"));
  EXPECT_EQ(launcher->Signal("nope", SIGTERM).code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(launcher->Signal("6.0", -1).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TaskLauncherTest, RecoveredTaskIsAdoptedAndItsExitLearned) {
  pid_t pid = 0;
  {
    auto a = NewLauncher();
    absl::StatusOr<TaskHandle> handle =
        a->Launch(Shell("8.0", "sleep 2; exit 7"));
    ASSERT_TRUE(handle.ok()) << handle.status();
    pid = handle->pid;
  }  // The agent "dies" without stopping its task.
  ASSERT_FALSE(ProcessIsGone(pid));

  auto b = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = b->Recover();
  ASSERT_TRUE(infos.ok()) << infos.status();
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].task_id, "8.0");
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kRunning);
  EXPECT_TRUE((*infos)[0].adopted);
  EXPECT_EQ((*infos)[0].pid, pid);
  // No double launch.
  EXPECT_EQ(b->Launch(Shell("8.0", "exit 0")).status().code(),
            absl::StatusCode::kAlreadyExists);

  std::optional<TaskEvent> event = WaitForEvent(*b, "8.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kExited);
  EXPECT_EQ(event->exit_code, 7);
  ASSERT_TRUE(b->Forget("8.0").ok());
  EXPECT_TRUE(FilesIn(state_dir()).empty());
}

TEST_F(TaskLauncherTest, RecoverReportsAnExitThatHappenedWithoutAnAgent) {
  {
    auto a = NewLauncher();
    ASSERT_TRUE(a->Launch(Shell("8.1", "exit 5")).ok());
  }
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(state_dir() + "/8.1.exit"); }));
  auto b = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = b->Recover();
  ASSERT_TRUE(infos.ok()) << infos.status();
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kExited);
  EXPECT_EQ((*infos)[0].exit_code, 5);
  EXPECT_TRUE((*infos)[0].adopted);
  // Reported by Recover, so not again by Poll.
  EXPECT_TRUE(b->Poll().empty());
  ASSERT_TRUE(b->Forget("8.1").ok());
  EXPECT_TRUE(FilesIn(state_dir()).empty());
}

TEST_F(TaskLauncherTest, AnExitIsNotLostBetweenPollAndForget) {
  {
    auto a = NewLauncher();
    ASSERT_TRUE(a->Launch(Shell("8.2", "exit 4")).ok());
    std::optional<TaskEvent> event = WaitForEvent(*a, "8.2");
    ASSERT_TRUE(event.has_value());
    EXPECT_EQ(event->exit_code, 4);
  }  // Dies before it reported the exit upstream (no Forget).
  auto b = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = b->Recover();
  ASSERT_TRUE(infos.ok());
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kExited);
  EXPECT_EQ((*infos)[0].exit_code, 4);
}

TEST_F(TaskLauncherTest, RecoverFindsATaskFromTheShimsPidFile) {
  // The agent died after fork, before it completed the record: the record
  // says "starting" without pids; the shim's pid file names the processes.
  pid_t pid = 0;
  {
    auto a = NewLauncher();
    absl::StatusOr<TaskHandle> handle = a->Launch(Shell("8.3", "sleep 100"));
    ASSERT_TRUE(handle.ok()) << handle.status();
    pid = handle->pid;
  }
  agent_internal::TaskFileRecord starting;
  starting.task_id = "8.3";
  starting.phase = "starting";
  ASSERT_TRUE(WriteFileAtomically(state_dir() + "/8.3.json",
                                  agent_internal::TaskRecordToJson(starting))
                  .ok());
  // And a launch that died before its shim existed.
  starting.task_id = "8.4";
  ASSERT_TRUE(WriteFileAtomically(state_dir() + "/8.4.json",
                                  agent_internal::TaskRecordToJson(starting))
                  .ok());

  auto b = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = b->Recover();
  ASSERT_TRUE(infos.ok()) << infos.status();
  ASSERT_EQ(infos->size(), 2u);
  EXPECT_EQ((*infos)[0].task_id, "8.3");
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kRunning);
  EXPECT_EQ((*infos)[0].pid, pid);
  EXPECT_EQ((*infos)[1].task_id, "8.4");
  EXPECT_EQ((*infos)[1].state, TaskInfo::State::kLost);
  EXPECT_THAT((*infos)[1].reason, HasSubstr("while launching"));
  // The record was completed.
  absl::StatusOr<agent_internal::TaskFileRecord> record =
      agent_internal::TaskRecordFromJson(ReadFile(state_dir() + "/8.3.json"));
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->phase, "running");
  EXPECT_EQ(record->pid, pid);

  ASSERT_TRUE(b->Stop("8.3", SIGTERM, absl::Seconds(10)).ok());
  std::optional<TaskEvent> event = WaitForEvent(*b, "8.3");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->term_signal, SIGTERM);
}

TEST_F(TaskLauncherTest, TaskWhoseShimAndProcessWereKilledIsLost) {
  auto a = NewLauncher();
  absl::StatusOr<TaskHandle> handle = a->Launch(Shell("9.0", "sleep 100"));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_EQ(::kill(handle->shim_pid, SIGKILL), 0);
  ASSERT_EQ(::kill(handle->pid, SIGKILL), 0);
  std::optional<TaskEvent> event = WaitForEvent(*a, "9.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kLost);
  EXPECT_THAT(event->reason, HasSubstr("task 9.0"));
  EXPECT_THAT(event->reason, HasSubstr("no exit status was recorded"));
  EXPECT_THAT(event->reason, HasSubstr("killed by signal 9"));

  // A new agent on the same state finds it lost too.
  a.reset();
  auto b = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = b->Recover();
  ASSERT_TRUE(infos.ok());
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kLost);
  EXPECT_THAT((*infos)[0].reason, HasSubstr("no exit status was recorded"));
  EXPECT_TRUE(b->Forget("9.0").ok());
}

// True when `pid` is gone or a zombie (init in a container may not reap).
bool Dead(pid_t pid) {
  std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t close = stat.rfind(')');
  return close == std::string::npos || close + 2 >= stat.size() ||
         stat[close + 2] == 'Z';
}

// The pids a task wrote into `path`, one a line.
std::vector<pid_t> PidsIn(const std::string& path) {
  std::vector<pid_t> out;
  for (absl::string_view line :
       absl::StrSplit(ReadFile(path), '\n', absl::SkipEmpty())) {
    pid_t pid;
    if (absl::SimpleAtoi(line, &pid)) out.push_back(pid);
  }
  return out;
}

// A task never outlives its supervisor unnoticed: with its shim killed, the
// task's main process and the rest of its tree die, and the task is lost at
// once, "supervisor (shim) died".
void ExpectShimDeathKillsTask(TaskLauncher& launcher, const TaskHandle& handle,
                              const std::vector<pid_t>& others) {
  ASSERT_EQ(::kill(handle.shim_pid, SIGKILL), 0);
  std::optional<TaskEvent> event =
      WaitForEvent(launcher, handle.task_id, absl::Seconds(5));
  ASSERT_TRUE(event.has_value()) << "not reported within 5 s";
  EXPECT_EQ(event->kind, TaskEvent::Kind::kLost);
  EXPECT_THAT(event->reason, HasSubstr("supervisor (shim) died"));
  EXPECT_THAT(event->reason, HasSubstr("killed by signal 9"));
  EXPECT_TRUE(WaitUntil([&] { return Dead(handle.pid); }, absl::Seconds(5)))
      << "the task's main process " << handle.pid << " outlived its shim";
  for (pid_t pid : others) {
    EXPECT_TRUE(WaitUntil([&] { return Dead(pid); }, absl::Seconds(5)))
        << "process " << pid << " of the task outlived its shim";
  }
  // Ended: a stop (a cancel) is a no-op and it can be forgotten.
  EXPECT_TRUE(launcher.Stop(handle.task_id, SIGTERM, absl::Seconds(1)).ok());
  EXPECT_TRUE(launcher.Forget(handle.task_id).ok());
}

TEST_F(TaskLauncherTest, ShimKilledKillsTheTasksProcessGroup) {
  auto launcher = NewLauncher();
  const std::string pids = tmp_ / "9.1.pids";
  absl::StatusOr<TaskHandle> handle = launcher->Launch(Shell(
      "9.1", absl::StrCat("sleep 600 & echo $! > ", pids, "; sleep 600")));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(WaitUntil([&] { return PidsIn(pids).size() == 1; }));
  ExpectShimDeathKillsTask(*launcher, *handle, PidsIn(pids));
}

// With a cgroup v2 group per task, even a process that left the task's
// process group (a new session) dies with the task, and when its shim dies.
TEST_F(TaskLauncherTest, ShimKilledKillsTheTasksCgroupToo) {
  absl::StatusOr<std::unique_ptr<TaskGroups>> groups =
      TaskGroups::Create(state_dir());
  if (!groups.ok()) GTEST_SKIP() << groups.status();
  ShimTaskLauncherOptions options;
  options.state_dir = state_dir();
  options.groups = groups->get();
  options.now = clock_.AsFunction();
  auto launcher = ShimTaskLauncher::Create(std::move(options));
  ASSERT_TRUE(launcher.ok()) << launcher.status();

  // Its main process ends: the escaped one goes too.
  const std::string pids = tmp_ / "9.2.pids";
  absl::StatusOr<TaskHandle> handle = (*launcher)->Launch(Shell(
      "9.2",
      absl::StrCat("setsid sleep 600 & echo $! > ", pids, "; sleep 0.3")));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(WaitUntil([&] { return PidsIn(pids).size() == 1; }));
  std::optional<TaskEvent> event = WaitForEvent(**launcher, "9.2");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->kind, TaskEvent::Kind::kExited);
  EXPECT_TRUE(WaitUntil([&] { return Dead(PidsIn(pids)[0]); }));
  ASSERT_TRUE((*launcher)->Forget("9.2").ok());

  // Its shim dies: the whole tree goes, the escaped process included.
  const std::string more = tmp_ / "9.3.pids";
  handle = (*launcher)->Launch(Shell(
      "9.3",
      absl::StrCat("sleep 600 & echo $! > ", more,
                   "; setsid sleep 600 & echo $! >> ", more, "; sleep 600")));
  ASSERT_TRUE(handle.ok()) << handle.status();
  ASSERT_TRUE(WaitUntil([&] { return PidsIn(more).size() == 2; }));
  ExpectShimDeathKillsTask(**launcher, *handle, PidsIn(more));
  EXPECT_TRUE(WaitUntil([&] {
    (void)(*launcher)->Poll();
    return !fs::exists(groups->get()->parent());
  })) << "the task's cgroups were not removed";
}

TEST_F(TaskLauncherTest, ReusedPidIsNotAdopted) {
  // A record whose pids are alive (this test process) but started at another
  // time: the processes it names are gone and the pids were reused.
  const uint64_t my_start = agent_internal::ProcStartTicks(::getpid()).value();
  agent_internal::TaskFileRecord record;
  record.task_id = "10.0";
  record.phase = "running";
  record.pid = ::getpid();
  record.pgid = ::getpid();
  record.start_ticks = my_start + 12345;
  record.shim_pid = ::getpid();
  record.shim_start_ticks = my_start + 12345;
  fs::create_directories(state_dir());
  ASSERT_TRUE(WriteFileAtomically(state_dir() + "/10.0.json",
                                  agent_internal::TaskRecordToJson(record))
                  .ok());
  auto launcher = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = launcher->Recover();
  ASSERT_TRUE(infos.ok());
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kLost);
  EXPECT_THAT((*infos)[0].reason,
              HasSubstr("the pid now belongs to another process"));
  EXPECT_EQ(launcher->Stop("10.0", SIGKILL, absl::ZeroDuration()).code(),
            absl::StatusCode::kOk);  // a no-op: nothing is signalled
  EXPECT_TRUE(launcher->Forget("10.0").ok());
}

TEST_F(TaskLauncherTest, UnreadableRecordIsReportedLost) {
  fs::create_directories(state_dir());
  WriteFile(state_dir() + "/11.0.json", "{not json");
  WriteFile(state_dir() + "/12.0.exit", "exited 0 1\n");  // a stray
  auto launcher = NewLauncher();
  absl::StatusOr<std::vector<TaskInfo>> infos = launcher->Recover();
  ASSERT_TRUE(infos.ok());
  ASSERT_EQ(infos->size(), 1u);
  EXPECT_EQ((*infos)[0].task_id, "11.0");
  EXPECT_EQ((*infos)[0].state, TaskInfo::State::kLost);
  EXPECT_THAT((*infos)[0].reason, HasSubstr("unreadable"));
  EXPECT_FALSE(fs::exists(state_dir() + "/12.0.exit"));
}

TEST_F(TaskLauncherTest, DuplicateTaskIdIsRejected) {
  auto launcher = NewLauncher();
  ASSERT_TRUE(launcher->Launch(Shell("13.0", "sleep 100")).ok());
  absl::Status status = launcher->Launch(Shell("13.0", "exit 0")).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(status.message()), HasSubstr("task 13.0"));
  // Another launcher on the same state that has not recovered yet.
  auto other = NewLauncher();
  EXPECT_EQ(other->Launch(Shell("13.0", "exit 0")).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(launcher->Forget("13.0").code(),
            absl::StatusCode::kFailedPrecondition);

  ASSERT_TRUE(launcher->Stop("13.0", SIGKILL, absl::ZeroDuration()).ok());
  ASSERT_TRUE(WaitForEvent(*launcher, "13.0").has_value());
  // Ended but not forgotten: still taken.
  EXPECT_EQ(launcher->Launch(Shell("13.0", "exit 0")).status().code(),
            absl::StatusCode::kAlreadyExists);
  ASSERT_TRUE(launcher->Forget("13.0").ok());
  ASSERT_TRUE(launcher->Launch(Shell("13.0", "exit 0")).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "13.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
}

TEST_F(TaskLauncherTest, ConcurrentLaunches) {
  auto launcher = NewLauncher();
  constexpr int kThreads = 4;
  constexpr int kPerThread = 3;
  std::vector<std::thread> threads;
  std::vector<absl::Status> results(kThreads * kPerThread);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        const int n = t * kPerThread + i;
        results[n] = launcher
                         ->Launch(Shell(absl::StrCat("20.", n),
                                        absl::StrCat("exit ", n)))
                         .status();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (const absl::Status& s : results) EXPECT_TRUE(s.ok()) << s;
  std::map<std::string, int> codes;
  WaitUntil([&] {
    for (const TaskEvent& e : launcher->Poll()) codes[e.task_id] = e.exit_code;
    return codes.size() == results.size();
  });
  ASSERT_EQ(codes.size(), results.size());
  for (int n = 0; n < kThreads * kPerThread; ++n) {
    EXPECT_EQ(codes[absl::StrCat("20.", n)], n);
  }
}

TEST_F(TaskLauncherTest, RunsAsAnotherUserWhenRoot) {
  struct passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || nobody == nullptr || nobody->pw_uid != 65534) {
    GTEST_SKIP() << "needs root and a user nobody with uid 65534";
  }
  const gid_t gid = nobody->pw_gid;
  // The temporary directory is root's (0700): open it up for the user, with
  // a world-writable place (like /tmp) where it may make directories, and
  // a place that stays root's.
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
  fs::create_directories(tmp_ / "open");
  ASSERT_EQ(::chmod((tmp_ / "open").c_str(), 01777), 0);
  fs::create_directories(tmp_ / "private");
  ASSERT_EQ(::chmod((tmp_ / "private").c_str(), 0700), 0);
  auto launcher = NewLauncher();
  TaskSpec spec = Shell(
      "14.0",
      absl::StrCat("id -u; id -g; pwd; touch ckpt.ok && echo wrote-cwd; ",
                   "touch ", state_dir(), "/x 2>/dev/null || echo denied"));
  spec.uid = 65534;
  spec.working_dir = tmp_ / "open/a/work";
  spec.create_dirs = {tmp_ / "open/ckpt/14", tmp_ / "private/ckpt"};
  ASSERT_TRUE(launcher->Launch(spec).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "14.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
  EXPECT_EQ(ReadFile(Out("14.0")),
            absl::StrCat("65534\n", gid, "\n", tmp_ / "open/a/work",
                         "\nwrote-cwd\ndenied\n"));
  // Best effort: the directory it could not make is named in its stderr.
  EXPECT_EQ(ReadFile(Err("14.0")),
            absl::StrCat("loom: cannot create directory ",
                         tmp_ / "private/ckpt", ": EACCES\n"));
  // The user made its directories, and owns its output files.
  auto owner = [](const std::string& path) {
    struct stat st;
    EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
    return std::make_pair(st.st_uid, st.st_mode & 07777);
  };
  EXPECT_EQ(owner(tmp_ / "open/a").first, 65534u);
  EXPECT_EQ(owner(tmp_ / "open/a/work").first, 65534u);
  EXPECT_EQ(owner(tmp_ / "open/ckpt/14").first, 65534u);
  EXPECT_EQ(owner(Out("14.0")), std::make_pair(uid_t{65534}, 0600u));
  EXPECT_EQ(owner(Err("14.0")), std::make_pair(uid_t{65534}, 0600u));
  EXPECT_FALSE(fs::exists(tmp_ / "private/ckpt"));
}

TEST_F(TaskLauncherTest, AnotherUsersTaskOnlyGoesWhereThatUserMay) {
  struct passwd* nobody = ::getpwnam("nobody");
  if (::geteuid() != 0 || nobody == nullptr || nobody->pw_uid != 65534) {
    GTEST_SKIP() << "needs root and a user nobody with uid 65534";
  }
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
  fs::create_directories(tmp_ / "private");
  ASSERT_EQ(::chmod((tmp_ / "private").c_str(), 0700), 0);
  auto launcher = NewLauncher();
  // Root could enter it; the task's user cannot.
  TaskSpec spec = Shell("15.0", "true");
  spec.uid = 65534;
  spec.working_dir = tmp_ / "private";
  absl::StatusOr<TaskHandle> handle = launcher->Launch(spec);
  ASSERT_FALSE(handle.ok());
  EXPECT_TRUE(absl::IsPermissionDenied(handle.status())) << handle.status();
  EXPECT_THAT(handle.status().message(),
              HasSubstr(absl::StrCat("chdir ", tmp_ / "private")));
  // Nor is a directory made for it by root where it could not make one.
  spec.task_id = "15.1";
  spec.working_dir = tmp_ / "private/new";
  handle = launcher->Launch(spec);
  ASSERT_FALSE(handle.ok());
  EXPECT_THAT(handle.status().message(),
              HasSubstr(absl::StrCat("create working directory ",
                                     tmp_ / "private/new")));
  EXPECT_FALSE(fs::exists(tmp_ / "private/new"));
  EXPECT_TRUE(launcher->List().empty());
}

TEST_F(TaskLauncherTest, CreatesDirectoriesForTheTask) {
  auto launcher = NewLauncher();
  TaskSpec spec = Shell("16.0", "test -d ckpt/16 && echo yes");
  spec.create_dirs = {tmp_ / "work/ckpt/16", "relative/ignored"};
  ASSERT_TRUE(launcher->Launch(spec).ok());
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "16.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
  EXPECT_EQ(ReadFile(Out("16.0")), "yes\n");
  EXPECT_EQ(ReadFile(Err("16.0")), "");
  EXPECT_FALSE(fs::exists(tmp_ / "work/relative"));
}

// --- cgroups ---

// A fake cgroup v1 tree: memory and cpu hierarchies, the agent in
// /agent/pod in the memory one and at the root of the cpu one.
class FakeCgroupTree {
 public:
  explicit FakeCgroupTree(const std::string& root, bool with_cpu = true)
      : root_(root) {
    fs::create_directories(root + "/memory/agent/pod");
    WriteFile(root + "/memory/agent/pod/memory.limit_in_bytes", "max");
    WriteFile(root + "/memory/agent/pod/memory.memsw.limit_in_bytes", "max");
    if (with_cpu) {
      fs::create_directories(root + "/cpu");
      WriteFile(root + "/cpu/cpu.cfs_quota_us", "-1");
    }
    WriteFile(root + "/self", "4:memory:/agent/pod\n2:cpu,cpuacct:/\n");
  }
  std::string self() const { return root_ + "/self"; }

 private:
  std::string root_;
};

TEST(CgroupV1ManagerTest, WritesLimitsIntoAFakeTree) {
  TempDir tmp;
  FakeCgroupTree tree(tmp / "cg");
  CgroupV1Manager cgroups(tmp / "cg", tree.self());
  EXPECT_EQ(cgroups.ParentDir("memory"), tmp / "cg/memory/agent/pod/loom");
  absl::StatusOr<CgroupPlacement> placement = cgroups.Prepare(
      "42.1", TaskLimits{.memory_bytes = int64_t{1} << 30, .cpu_millis = 1500});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_TRUE(placement->limits_applied);
  const std::string mem = tmp / "cg/memory/agent/pod/loom/42.1";
  const std::string cpu = tmp / "cg/cpu/loom/42.1";
  EXPECT_EQ(ReadFile(mem + "/memory.limit_in_bytes"), "1073741824");
  EXPECT_EQ(ReadFile(mem + "/memory.memsw.limit_in_bytes"), "1073741824");
  EXPECT_EQ(ReadFile(cpu + "/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(ReadFile(cpu + "/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(
      placement->procs_files,
      (std::vector<std::string>{mem + "/cgroup.procs", cpu + "/cgroup.procs"}));
  EXPECT_EQ(placement->dirs, (std::vector<std::string>{mem, cpu}));
  EXPECT_THAT(placement->note, HasSubstr("cgroup v1 limits"));

  ASSERT_TRUE(cgroups.Remove(*placement).ok());
  EXPECT_FALSE(fs::exists(mem));
  EXPECT_FALSE(fs::exists(cpu));
  EXPECT_TRUE(cgroups.Remove(*placement).ok());  // already gone: fine
}

TEST(CgroupV1ManagerTest, ReportsControllersThatAreMissing) {
  TempDir tmp;
  FakeCgroupTree tree(tmp / "cg", /*with_cpu=*/false);
  CgroupV1Manager cgroups(tmp / "cg", tree.self());
  absl::StatusOr<CgroupPlacement> placement = cgroups.Prepare(
      "1.0", TaskLimits{.memory_bytes = 1 << 20, .cpu_millis = 500});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_FALSE(placement->limits_applied);
  EXPECT_EQ(placement->dirs.size(), 1u);
  EXPECT_THAT(placement->note, HasSubstr("cgroup limits not applied: cpu"));
  EXPECT_EQ(cgroups
                .Prepare("1.1", TaskLimits{.memory_bytes = std::nullopt,
                                           .cpu_millis = 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(TaskLauncherTest, LaunchPlacesTheTaskInItsCgroups) {
  FakeCgroupTree tree(tmp_ / "cg");
  CgroupV1Manager cgroups(tmp_ / "cg", tree.self());
  auto launcher = NewLauncher(&cgroups);
  TaskSpec spec = Shell("15.0", "echo $$");
  spec.limits.memory_bytes = 256 << 20;
  spec.limits.cpu_millis = 2000;
  absl::StatusOr<TaskHandle> handle = launcher->Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_TRUE(handle->limits_applied);
  ASSERT_TRUE(WaitForEvent(*launcher, "15.0").has_value());
  const std::string pid = absl::StrCat(handle->pid);
  EXPECT_EQ(ReadFile(Out("15.0")), pid + "\n");
  const std::string mem = tmp_ / "cg/memory/agent/pod/loom/15.0";
  EXPECT_EQ(ReadFile(mem + "/cgroup.procs"), pid);
  EXPECT_EQ(ReadFile(tmp_ / "cg/cpu/loom/15.0/cgroup.procs"), pid);
  EXPECT_EQ(ReadFile(mem + "/memory.limit_in_bytes"), absl::StrCat(256 << 20));
  ASSERT_TRUE(launcher->Forget("15.0").ok());
  EXPECT_FALSE(fs::exists(mem));
}

TEST_F(TaskLauncherTest, WithoutCgroupsTheTaskRunsWithoutLimitsAndSaysSo) {
  auto launcher = NewLauncher();  // no cgroup manager
  TaskSpec spec = Shell("16.0", "exit 0");
  spec.limits.memory_bytes = 1 << 30;
  absl::StatusOr<TaskHandle> handle = launcher->Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_FALSE(handle->limits_applied);
  EXPECT_THAT(handle->cgroup_note, HasSubstr("not applied"));
  std::optional<TaskInfo> info = InfoOf(*launcher, "16.0");
  ASSERT_TRUE(info.has_value());
  EXPECT_FALSE(info->limits_applied);
  std::optional<TaskEvent> event = WaitForEvent(*launcher, "16.0");
  ASSERT_TRUE(event.has_value());
  EXPECT_EQ(event->exit_code, 0);
}

// The host's own cgroup v1 hierarchies, where they are writable.
TEST_F(TaskLauncherTest, RealCgroupV1Limits) {
  CgroupV1Manager cgroups;
  const std::string mem_parent = cgroups.ParentDir("memory");
  const std::string mem_base = mem_parent.substr(0, mem_parent.size() - 5);
  if (::access(mem_base.c_str(), W_OK) != 0 ||
      !fs::exists(mem_base + "/memory.limit_in_bytes")) {
    GTEST_SKIP() << "no writable cgroup v1 memory hierarchy at " << mem_base;
  }
  auto launcher = NewLauncher(&cgroups);
  const std::string id = absl::StrCat("cgtest-", ::getpid());
  TaskSpec spec = Shell(id, "cat /proc/self/cgroup");
  spec.limits.memory_bytes = 256 << 20;
  absl::StatusOr<TaskHandle> handle = launcher->Launch(spec);
  ASSERT_TRUE(handle.ok()) << handle.status();
  if (!handle->limits_applied) {
    Cleanup(*launcher, id);
    GTEST_SKIP() << handle->cgroup_note;
  }
  ASSERT_TRUE(WaitForEvent(*launcher, id).has_value());
  EXPECT_THAT(ReadFile(Out(id)), HasSubstr("/loom/" + id));
  EXPECT_EQ(ReadFile(mem_parent + "/" + id + "/memory.limit_in_bytes"),
            absl::StrCat(256 << 20, "\n"));
  ASSERT_TRUE(launcher->Forget(id).ok());
  EXPECT_FALSE(fs::exists(mem_parent + "/" + id));
}

// --- file formats ---

TEST(TaskFilesTest, ParsesProcStatWithAwkwardCommandNames) {
  const std::string stat =
      "123 (a) b) (c) S 1 123 123 0 -1 4194304 100 0 0 0 1 2 0 0 20 0 1 0 "
      "987654 1000 10";
  char state = 0;
  uint64_t start = 0;
  ASSERT_TRUE(
      agent_internal::ParseProcStat(stat.data(), stat.size(), &state, &start));
  EXPECT_EQ(state, 'S');
  EXPECT_EQ(start, 987654u);
  EXPECT_FALSE(agent_internal::ParseProcStat("12 (x", 5, &state, &start));
}

TEST(TaskFilesTest, ExitLinesAndRecordsRoundTrip) {
  absl::StatusOr<agent_internal::ExitRecord> e =
      agent_internal::ParseExitLine("signaled 9 1700000000\n");
  ASSERT_TRUE(e.ok());
  EXPECT_TRUE(e->signaled);
  EXPECT_EQ(e->value, 9);
  EXPECT_EQ(e->ended_at, absl::FromUnixSeconds(1700000000));
  EXPECT_TRUE(agent_internal::ParseExitLine("exited 3").ok());
  EXPECT_FALSE(agent_internal::ParseExitLine("exited").ok());
  EXPECT_FALSE(agent_internal::ParseExitLine("crashed 3").ok());

  agent_internal::TaskFileRecord r;
  r.task_id = "1.2";
  r.phase = "running";
  r.pid = 10;
  r.pgid = 10;
  r.shim_pid = 9;
  r.start_ticks = 111;
  r.shim_start_ticks = 110;
  r.argv = {"python3", "train.py"};
  r.cgroup.dirs = {"/x"};
  r.cgroup.limits_applied = false;
  absl::StatusOr<agent_internal::TaskFileRecord> back =
      agent_internal::TaskRecordFromJson(agent_internal::TaskRecordToJson(r));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->pid, 10);
  EXPECT_EQ(back->start_ticks, 111u);
  EXPECT_EQ(back->argv, r.argv);
  EXPECT_EQ(back->cgroup.dirs, r.cgroup.dirs);
  EXPECT_FALSE(back->cgroup.limits_applied);
  EXPECT_FALSE(agent_internal::TaskRecordFromJson("[]").ok());
  EXPECT_FALSE(
      agent_internal::TaskRecordFromJson(R"({"version":1,"task_id":5})").ok());
}

}  // namespace
}  // namespace loom
