// Tests of starting a task under its shim (shim_start.h) through
// `ShimTaskLauncher::Launch`: its environment, program lookup, working
// directory, user, directories, cgroups, and the errors of a start that
// fails.

#include "loom/agent/shim_start.h"

#include <pwd.h>
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

#include "absl/strings/match.h"
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
#include "loom/agent/task_files.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::loom::testing::FakeCgroupTree;
using ::loom::testing::FilesIn;
using ::loom::testing::InfoOf;
using ::loom::testing::ReadFile;
using ::loom::testing::TaskLauncherTest;
using ::loom::testing::WaitForEvent;
using ::loom::testing::WriteFile;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

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

TEST_F(TaskLauncherTest, StartShimReturnsACompleteDurableRecord) {
  fs::create_directories(state_dir());
  agent_internal::ShimStartOptions options;
  options.state_dir = state_dir();
  options.now = clock_.AsFunction();
  absl::StatusOr<agent_internal::TaskFileRecord> record =
      agent_internal::StartShim(Shell("30.0", "exit 4"), options);
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->phase, "running");
  EXPECT_GT(record->pid, 0);
  EXPECT_EQ(record->pgid, record->pid);
  EXPECT_GT(record->shim_pid, 0);
  EXPECT_GT(record->start_ticks, 0u);
  EXPECT_EQ(record->launched_at, clock_.Now());
  EXPECT_EQ(record->working_dir, tmp_ / "work");
  EXPECT_TRUE(record->cgroup.limits_applied);  // none were asked for
  absl::StatusOr<agent_internal::TaskFileRecord> on_disk =
      agent_internal::TaskRecordFromJson(ReadFile(state_dir() + "/30.0.json"));
  ASSERT_TRUE(on_disk.ok()) << on_disk.status();
  EXPECT_EQ(on_disk->phase, "running");
  EXPECT_EQ(on_disk->pid, record->pid);
  // The shim is this process's child: it records the exit, then exits.
  int status = 0;
  ASSERT_EQ(::waitpid(record->shim_pid, &status, 0), record->shim_pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_TRUE(
      absl::StartsWith(ReadFile(state_dir() + "/30.0.exit"), "exited 4 "));
}

TEST_F(TaskLauncherTest, AFailedStartShimLeavesNothing) {
  fs::create_directories(state_dir());
  agent_internal::ShimStartOptions options;
  options.state_dir = state_dir();
  options.now = clock_.AsFunction();
  TaskSpec spec = Shell("31.0", "");
  spec.argv = {"/nonexistent/loom-program"};
  absl::StatusOr<agent_internal::TaskFileRecord> record =
      agent_internal::StartShim(spec, options);
  EXPECT_EQ(record.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(record.status().message()),
              HasSubstr("task 31.0: exec /nonexistent/loom-program"));
  EXPECT_TRUE(FilesIn(state_dir()).empty());
}

}  // namespace
}  // namespace loom
