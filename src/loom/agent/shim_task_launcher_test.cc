// Tests of `ShimTaskLauncher` as a whole (shim_task_launcher.h), with real
// processes in temporary directories: what Launch, Stop, Signal, Poll,
// Recover and Forget promise, in turn and at once.

#include "loom/agent/shim_task_launcher.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::loom::testing::FilesIn;
using ::loom::testing::InfoOf;
using ::loom::testing::ProcessIsGone;
using ::loom::testing::ReadFile;
using ::loom::testing::TaskLauncherTest;
using ::loom::testing::WaitForEvent;
using ::loom::testing::WaitForText;
using ::loom::testing::WaitUntil;
using ::loom::testing::WriteFile;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace loom
