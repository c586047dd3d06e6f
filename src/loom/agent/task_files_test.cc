// Tests of the task's files and their formats (task_files.h).

#include "loom/agent/task_files.h"

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

}  // namespace
}  // namespace loom
