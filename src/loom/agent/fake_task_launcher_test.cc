// The launcher of `--fake-tasks` (fake_task_launcher.h).

#include "loom/agent/fake_task_launcher.h"

#include <signal.h>

#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "loom/agent/task_launcher.h"

namespace loom {
namespace {

TEST(FakeTaskLauncherTest, EndsOnTimeOrSignal) {
  absl::Time now = absl::FromUnixSeconds(1000);
  FakeTaskLauncherOptions options;
  options.now = [&] { return now; };
  FakeTaskLauncher launcher(options);
  TaskSpec spec;
  spec.task_id = "1.0";
  spec.argv = {"x"};
  spec.env = {{"LOOM_FAKE_SECONDS", "2.5"}};
  ASSERT_TRUE(launcher.Launch(spec).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(launcher.Launch(spec).status()));
  spec.task_id = "1.1";
  spec.env.clear();
  ASSERT_TRUE(launcher.Launch(spec).ok());
  EXPECT_TRUE(launcher.Poll().empty());
  EXPECT_TRUE(absl::IsFailedPrecondition(launcher.Forget("1.0")));
  now += absl::Seconds(2.5);
  std::vector<TaskEvent> events = launcher.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].task_id, "1.0");
  EXPECT_EQ(events[0].exit_code, 0);
  EXPECT_TRUE(launcher.Poll().empty());
  ASSERT_TRUE(launcher.Stop("1.1", SIGTERM, absl::Seconds(10)).ok());
  events = launcher.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].term_signal, SIGTERM);
  EXPECT_TRUE(launcher.Forget("1.0").ok());
  EXPECT_TRUE(absl::IsNotFound(launcher.Forget("1.0")));
  EXPECT_EQ(launcher.List().size(), 1u);
}

}  // namespace
}  // namespace loom
