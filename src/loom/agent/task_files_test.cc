// Tests of the task's files and their formats (task_files.h).

#include "loom/agent/task_files.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

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

// --- where the files are ---

TEST(TaskFilesTest, ValidTaskIdsAreSafeFileNames) {
  for (const std::string id : {"42.1", "cgtest-12_A", "..x", "a"}) {
    EXPECT_TRUE(agent_internal::ValidTaskId(id)) << id;
  }
  EXPECT_TRUE(agent_internal::ValidTaskId(
      std::string(agent_internal::kMaxTaskIdLength, 'a')));
  EXPECT_FALSE(agent_internal::ValidTaskId(
      std::string(agent_internal::kMaxTaskIdLength + 1, 'a')));
  for (const std::string id : {"", ".", "..", "a/b", "../x", "job 1", "x\n"}) {
    EXPECT_FALSE(agent_internal::ValidTaskId(id)) << id;
  }
}

TEST(TaskFilesTest, PathsInTheStateDirectory) {
  EXPECT_EQ(
      agent_internal::TaskFilePath("/var/lib/loom/tasks", "42.1", ".exit"),
      "/var/lib/loom/tasks/42.1.exit");
  EXPECT_EQ(agent_internal::TaskFilePath("/s", "1.0", ".json.tmp"),
            "/s/1.0.json.tmp");
}

TEST(TaskFilesTest, OnlyRegularFilesAreRegular) {
  char path[] = "/tmp/loom-task-files-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_TRUE(agent_internal::IsRegularFile(path));
  EXPECT_FALSE(agent_internal::IsRegularFile("/"));
  ::unlink(path);
  EXPECT_FALSE(agent_internal::IsRegularFile(path));
}

TEST(TaskFilesTest, DescribesHowAProcessEnded) {
  auto wait_status = [](bool kill_itself) {
    const pid_t child = ::fork();
    if (child == 0) {
      if (kill_itself) ::raise(SIGKILL);
      ::_exit(3);
    }
    int status = 0;
    EXPECT_EQ(::waitpid(child, &status, 0), child);
    return status;
  };
  EXPECT_EQ(agent_internal::DescribeWaitStatus(wait_status(false)), "exited 3");
  EXPECT_EQ(agent_internal::DescribeWaitStatus(wait_status(true)),
            "was killed by signal 9");
}

}  // namespace
}  // namespace loom
