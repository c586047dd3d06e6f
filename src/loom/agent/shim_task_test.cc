// Tests of how a task stands (shim_task.h): a task recovered from its
// files, a task whose shim died, a record that names someone else's
// process or cannot be read.

#include "loom/agent/shim_task.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
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
#include "loom/agent/task_files.h"
#include "loom/agent/task_group.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_launcher_test_util.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

using ::loom::testing::TempDir;
namespace fs = std::filesystem;
using ::loom::testing::ReadFile;
using ::loom::testing::TaskLauncherTest;
using ::loom::testing::WaitForEvent;
using ::loom::testing::WaitUntil;
using ::loom::testing::WriteFile;
using ::testing::HasSubstr;

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
  // The task may be gone already: its shim's death can take it along
  // before this signal (ESRCH; seen once in CI).
  ASSERT_TRUE(::kill(handle->pid, SIGKILL) == 0 || errno == ESRCH)
      << std::strerror(errno);
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

// A record of `task_id` whose pids are alive (this test process) but
// started at another time: the processes it names are gone and the pids
// were reused.
agent_internal::TaskFileRecord ReusedPidRecord(const std::string& task_id) {
  const uint64_t my_start = agent_internal::ProcStartTicks(::getpid()).value();
  agent_internal::TaskFileRecord record;
  record.task_id = task_id;
  record.phase = "running";
  record.pid = ::getpid();
  record.pgid = ::getpid();
  record.start_ticks = my_start + 12345;
  record.shim_pid = ::getpid();
  record.shim_start_ticks = my_start + 12345;
  return record;
}

TEST_F(TaskLauncherTest, ReusedPidIsNotAdopted) {
  const agent_internal::TaskFileRecord record = ReusedPidRecord("10.0");
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

// --- one task, from its files ---

TEST(ShimTaskTest, AnUnreadableRecordIsLostAtOnce) {
  TempDir tmp;
  WriteFile(tmp / "1.0.json", "{not json");
  agent_internal::ShimTask task =
      agent_internal::LoadShimTask(tmp.path(), "1.0");
  EXPECT_TRUE(task.adopted);
  EXPECT_EQ(task.state, TaskInfo::State::kLost);
  EXPECT_TRUE(task.shim_done);
  EXPECT_THAT(task.reason, HasSubstr("task 1.0: record "));
  EXPECT_THAT(task.reason, HasSubstr("is unreadable"));
  // A record of another task is unreadable too.
  ASSERT_TRUE(WriteFileAtomically(
                  tmp / "1.2.json",
                  agent_internal::TaskRecordToJson(ReusedPidRecord("1.1")))
                  .ok());
  task = agent_internal::LoadShimTask(tmp.path(), "1.2");
  EXPECT_EQ(task.state, TaskInfo::State::kLost);
  EXPECT_THAT(task.reason, HasSubstr("it names task \"1.1\""));
}

TEST(ShimTaskTest, AnExitFileEndsTheTask) {
  TempDir tmp;
  ASSERT_TRUE(WriteFileAtomically(
                  tmp / "2.0.json",
                  agent_internal::TaskRecordToJson(ReusedPidRecord("2.0")))
                  .ok());
  WriteFile(tmp / "2.0.exit", "exited 3 1700000000\n");
  agent_internal::ShimTask task =
      agent_internal::LoadShimTask(tmp.path(), "2.0");
  EXPECT_EQ(task.state, TaskInfo::State::kRunning);  // until refreshed
  EXPECT_TRUE(agent_internal::Refresh(task, tmp.path()));
  EXPECT_EQ(task.state, TaskInfo::State::kExited);
  EXPECT_TRUE(task.shim_done);
  TaskInfo info = agent_internal::InfoOf(task);
  EXPECT_EQ(info.task_id, "2.0");
  EXPECT_EQ(info.exit_code, 3);
  EXPECT_EQ(info.term_signal, 0);
  EXPECT_EQ(info.ended_at, absl::FromUnixSeconds(1700000000));
  EXPECT_TRUE(info.adopted);
  // Ended: a refresh changes nothing.
  EXPECT_FALSE(agent_internal::Refresh(task, tmp.path()));
}

TEST(ShimTaskTest, AGoneShimWithoutAnExitFileIsLost) {
  TempDir tmp;
  ASSERT_TRUE(WriteFileAtomically(
                  tmp / "3.0.json",
                  agent_internal::TaskRecordToJson(ReusedPidRecord("3.0")))
                  .ok());
  agent_internal::ShimTask task =
      agent_internal::LoadShimTask(tmp.path(), "3.0");
  EXPECT_TRUE(agent_internal::Refresh(task, tmp.path()));
  EXPECT_EQ(task.state, TaskInfo::State::kLost);
  EXPECT_THAT(task.reason, HasSubstr("task 3.0: supervisor (shim) died"));
  EXPECT_THAT(task.reason, HasSubstr("the pid now belongs to another process"));
  EXPECT_EQ(agent_internal::InfoOf(task).state, TaskInfo::State::kLost);
}

TEST(ShimTaskTest, ReapShimWaitsForTheShimToEnd) {
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[1]);
    char c;
    while (::read(pipe_fds[0], &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  ::close(pipe_fds[0]);
  const uint64_t start = agent_internal::ProcStartTicks(child).value();
  EXPECT_FALSE(agent_internal::ReapShim({child, start}));  // still running
  ::close(pipe_fds[1]);
  EXPECT_TRUE(WaitUntil([&] {
    return agent_internal::ReapShim({child, start});
  }));
  EXPECT_EQ(::waitpid(child, nullptr, WNOHANG), -1);  // reaped
  // A pid whose start time differs is another process: gone.
  EXPECT_TRUE(agent_internal::ReapShim({::getpid(), start + 1}));
}

}  // namespace
}  // namespace loom
