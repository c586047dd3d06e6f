// Tests of what a launch prepares before it forks (task_setup.h).

#include "loom/agent/task_setup.h"

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
#include "loom/agent/cgroup.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

using ::loom::testing::FilesIn;
using ::loom::testing::TaskLauncherTest;
using ::testing::HasSubstr;

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

}  // namespace
}  // namespace loom
