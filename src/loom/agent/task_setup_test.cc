// Tests of what a launch prepares before it forks (task_setup.h).

#include "loom/agent/task_setup.h"

#include <fcntl.h>
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

TEST(TaskSetupTest, ValidateSpecSaysWhatIsWrong) {
  TaskSpec spec;
  spec.task_id = "3.1";
  spec.argv = {"/bin/true"};
  EXPECT_TRUE(agent_internal::ValidateSpec(spec).ok());

  TaskSpec bad = spec;
  bad.task_id = "a/b";
  EXPECT_THAT(std::string(agent_internal::ValidateSpec(bad).message()),
              HasSubstr("it must be 1 to 200 of [A-Za-z0-9._-]"));
  bad = spec;
  bad.argv.push_back(std::string("a\0b", 3));
  EXPECT_THAT(std::string(agent_internal::ValidateSpec(bad).message()),
              HasSubstr("task 3.1: an argument contains a NUL byte"));
  bad = spec;
  bad.limits.cpu_millis = 0;
  EXPECT_THAT(std::string(agent_internal::ValidateSpec(bad).message()),
              HasSubstr("cpu limit must be positive"));
  bad = spec;
  bad.stdout_path = std::string("/x\0y", 4);
  EXPECT_EQ(agent_internal::ValidateSpec(bad).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskSetupTest, ExecCandidatesFollowExecvp) {
  using Paths = std::vector<std::string>;
  EXPECT_EQ(agent_internal::ExecCandidates("python3", "/a:/b"),
            (Paths{"/a/python3", "/b/python3"}));
  // An empty entry is the current directory.
  EXPECT_EQ(agent_internal::ExecCandidates("env", "/a::/b"),
            (Paths{"/a/env", "env", "/b/env"}));
  // A name with a slash is not searched.
  EXPECT_EQ(agent_internal::ExecCandidates("./run.sh", "/a"),
            (Paths{"./run.sh"}));
}

TEST(TaskSetupTest, TheAgentsOwnIdentityIsNoChange) {
  TaskSpec spec;
  spec.task_id = "3.2";
  absl::StatusOr<agent_internal::Identity> id =
      agent_internal::ResolveIdentity(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(id->change);
  spec.uid = ::geteuid();
  spec.gid = ::getegid();
  id = agent_internal::ResolveIdentity(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_FALSE(id->change);
  if (::geteuid() != 0) {
    spec.uid = ::geteuid() + 1;
    EXPECT_EQ(agent_internal::ResolveIdentity(spec).status().code(),
              absl::StatusCode::kPermissionDenied);
  }
}

TEST(TaskSetupTest, OutputWithoutAPathIsDevNullAboveStdio) {
  agent_internal::ScopedFd fd;
  ASSERT_TRUE(
      agent_internal::OpenOutput("3.3", "", agent_internal::Identity{}, fd)
          .ok());
  EXPECT_GE(fd.get(), 3);
  EXPECT_EQ(::write(fd.get(), "x", 1), 1);
  EXPECT_EQ(::fcntl(fd.get(), F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
  absl::Status missing = agent_internal::OpenOutput(
      "3.3", "/nonexistent/dir/out", agent_internal::Identity{}, fd);
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.message()),
              HasSubstr("task 3.3: open /nonexistent/dir/out"));
}

}  // namespace
}  // namespace loom
