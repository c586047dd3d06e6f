// Tests of the shim and the task's child process (spawn.h): the shim ends
// the whole process group of its task before it records the exit.

#include "loom/agent/spawn.h"

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
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

using ::loom::testing::ProcessIsGone;
using ::loom::testing::ReadFile;
using ::loom::testing::TaskLauncherTest;
using ::loom::testing::WaitForEvent;
using ::loom::testing::WaitForText;

bool GroupIsEmpty(pid_t pgid) {
  return ::kill(-pgid, 0) != 0 && errno == ESRCH;
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

TEST(SpawnTest, SealPointsTheArraysIntoTheStorage) {
  agent_internal::SpawnPlan plan;
  plan.argv_storage = {"/bin/sh", "-c", "exit 0"};
  plan.env_storage = {"A=1"};
  plan.Seal();
  ASSERT_EQ(plan.argv.size(), 4u);
  for (size_t i = 0; i < plan.argv_storage.size(); ++i) {
    EXPECT_EQ(plan.argv[i], plan.argv_storage[i].data());
  }
  EXPECT_EQ(plan.argv.back(), nullptr);
  ASSERT_EQ(plan.envp.size(), 2u);
  EXPECT_STREQ(plan.envp[0], "A=1");
  EXPECT_EQ(plan.envp.back(), nullptr);
}

TEST(SpawnTest, StagesHaveNamesForMessages) {
  using agent_internal::SpawnStage;
  using agent_internal::SpawnStageName;
  EXPECT_STREQ(SpawnStageName(SpawnStage::kExec), "exec");
  EXPECT_STREQ(SpawnStageName(SpawnStage::kSetsid), "setsid");
  EXPECT_STREQ(SpawnStageName(SpawnStage::kMkdir), "create working directory");
  EXPECT_STREQ(SpawnStageName(SpawnStage::kNone), "start");
}

}  // namespace
}  // namespace loom
