// A container task's sandbox (task_sandbox.h): what the launcher makes on
// the host before the fork, and the private mounts the task's child makes.

#include "loom/agent/task_sandbox.h"

#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitUntil;

TEST(TaskSandboxTest, RelativePathsAreRefused) {
  TaskSandbox s;
  s.dirs.push_back({"relative/dir"});
  absl::Status st = agent_internal::ValidateSandbox("1.0", s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("relative/dir"));
  TaskSandbox m;
  m.mounts.push_back({"overlay", "/x", "", 0, ""});
  EXPECT_EQ(agent_internal::ValidateSandbox("1.0", m).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(TaskSandboxTest, FilesDirsOwnersAndMountTargets) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  TempDir tmp;
  fs::create_directories(tmp / "bundle/upper/old");
  testing::WriteFile(tmp / "bundle/upper/old/file", "left by a run before");
  TaskSandbox s;
  s.files.emplace_back(tmp / "bundle/config.json", "{}");
  s.dirs.push_back({tmp / "bundle/upper", std::nullopt, std::nullopt, true});
  s.dirs.push_back({tmp / "ckpt/job/1", 4321, 4322, false});
  s.mounts.push_back({"tmpfs", tmp / "bundle/rootfs", "tmpfs", 0, ""});
  ASSERT_TRUE(agent_internal::PrepareSandbox("1.0", s).ok());
  EXPECT_EQ(ReadFile(tmp / "bundle/config.json"), "{}");
  struct stat st;
  ASSERT_EQ(::stat((tmp / "bundle/config.json").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(fs::is_directory(tmp / "bundle/upper"));
  EXPECT_FALSE(fs::exists(tmp / "bundle/upper/old"));  // emptied
  ASSERT_EQ(::stat((tmp / "ckpt/job/1").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 4321u);
  EXPECT_EQ(st.st_gid, 4322u);
  ASSERT_EQ(::stat((tmp / "ckpt/job").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);  // parents made on the way stay root's
  EXPECT_TRUE(fs::is_directory(tmp / "bundle/rootfs"));
}

// The task's child mounts in a namespace of its own: the task sees the
// mount, the host never does, and it is gone with the task.
class SandboxLaunchTest : public testing::TaskLauncherTest {};

TEST_F(SandboxLaunchTest, MountsArePrivateToTheTask) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  std::unique_ptr<ShimTaskLauncher> launcher = NewLauncher();
  ASSERT_NE(launcher, nullptr);
  const std::string target = tmp_ / "sandbox/mnt";
  TaskSpec spec =
      Shell("1.0", "echo inside > " + target + "/f && cat " + target +
                       "/f && "
                       "grep -c ' " +
                       target + " tmpfs' /proc/self/mounts");
  spec.sandbox = TaskSandbox{};
  spec.sandbox->mounts.push_back(
      {"tmpfs", target, "tmpfs", MS_NOSUID, "size=1m"});
  absl::StatusOr<TaskHandle> h = launcher->Launch(spec);
  ASSERT_TRUE(h.ok()) << h.status();
  ASSERT_TRUE(WaitUntil([&] {
    for (const TaskEvent& e : launcher->Poll()) {
      if (e.task_id == "1.0") return true;
    }
    return false;
  }));
  EXPECT_EQ(ReadFile(Out("1.0")), "inside\n1\n") << ReadFile(Err("1.0"));
  EXPECT_FALSE(fs::exists(target + "/f"));  // it was written in the tmpfs
  EXPECT_EQ(ReadFile("/proc/self/mounts").find(target), std::string::npos);
  EXPECT_TRUE(launcher->Forget("1.0").ok());
}

TEST_F(SandboxLaunchTest, AFailedMountFailsTheLaunchNamingIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  std::unique_ptr<ShimTaskLauncher> launcher = NewLauncher();
  ASSERT_NE(launcher, nullptr);
  TaskSpec spec = Shell("1.0", "true");
  spec.sandbox = TaskSandbox{};
  spec.sandbox->mounts.push_back(
      {"none", tmp_ / "sandbox/bad", "no-such-fs-type", 0, ""});
  absl::StatusOr<TaskHandle> h = launcher->Launch(spec);
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr("mount no-such-fs-type on"));
}

TEST_F(SandboxLaunchTest, EveryTaskRunsWithNoNewPrivsUnlessItsPoolAllows) {
  std::unique_ptr<ShimTaskLauncher> launcher = NewLauncher();
  ASSERT_NE(launcher, nullptr);
  for (bool allow : {false, true}) {
    const std::string id = allow ? "2.0" : "1.0";
    TaskSpec spec = Shell(id, "grep NoNewPrivs /proc/self/status");
    spec.allow_privilege_escalation = allow;
    absl::StatusOr<TaskHandle> h = launcher->Launch(spec);
    ASSERT_TRUE(h.ok()) << h.status();
    ASSERT_TRUE(WaitUntil([&] {
      for (const TaskEvent& e : launcher->Poll()) {
        if (e.task_id == id) return true;
      }
      return false;
    }));
    EXPECT_EQ(ReadFile(Out(id)),
              absl::StrCat("NoNewPrivs:\t", allow ? "0" : "1", "\n"))
        << ReadFile(Err(id));
    EXPECT_TRUE(launcher->Forget(id).ok());
  }
}

// A user's mount target (a dataset's mount) is made and reached without
// following links: a link planted on the way fails the launch, and nothing
// is made where it points.
TEST_F(SandboxLaunchTest, AUserTargetIsNeverReachedThroughALink) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root";
  std::unique_ptr<ShimTaskLauncher> launcher = NewLauncher();
  ASSERT_NE(launcher, nullptr);
  fs::create_directories(tmp_ / "elsewhere");
  fs::create_directories(tmp_ / "roots");
  fs::create_directory_symlink(tmp_ / "elsewhere", tmp_ / "roots/link");
  TaskSpec spec = Shell("1.0", "true");
  spec.sandbox = TaskSandbox{};
  TaskMount m{"tmpfs", tmp_ / "roots/link/made", "tmpfs", MS_NOSUID, "size=1m"};
  m.user_target = true;
  spec.sandbox->mounts.push_back(m);
  ASSERT_TRUE(agent_internal::PrepareSandbox("1.0", *spec.sandbox).ok());
  absl::StatusOr<TaskHandle> h = launcher->Launch(spec);
  ASSERT_FALSE(h.ok());
  EXPECT_THAT(h.status().message(), HasSubstr("mount tmpfs on"));
  EXPECT_FALSE(fs::exists(tmp_ / "elsewhere/made"));

  // Without a link: its directories are made (root's, 0755) and mounted on.
  const std::string target = tmp_ / "roots/new/deep";
  TaskSpec ok = Shell("2.0", "grep -c ' " + target + " tmpfs' /proc/self/mounts");
  ok.sandbox = TaskSandbox{};
  TaskMount good{"tmpfs", target, "tmpfs", MS_NOSUID, "size=1m"};
  good.user_target = true;
  ok.sandbox->mounts.push_back(good);
  absl::StatusOr<TaskHandle> h2 = launcher->Launch(ok);
  ASSERT_TRUE(h2.ok()) << h2.status();
  ASSERT_TRUE(WaitUntil([&] {
    for (const TaskEvent& e : launcher->Poll()) {
      if (e.task_id == "2.0") return true;
    }
    return false;
  }));
  EXPECT_EQ(ReadFile(Out("2.0")), "1\n") << ReadFile(Err("2.0"));
  struct stat st;
  ASSERT_EQ(::stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 022, 0u);  // no one else writes into it
  EXPECT_TRUE(launcher->Forget("2.0").ok());
}

}  // namespace
}  // namespace loom
