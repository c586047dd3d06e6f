// The unit file of a multi-process task (unit_file.h): what is written is
// what is read back, and what is not a unit file is refused.

#include "loom/agent/unit_file.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "loom/agent/task_state.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;

TaskUnit TwoProcesses() {
  TaskUnit u;
  u.task_id = "42.0.1";
  u.job_id = 42;
  u.task_index = 1;
  u.gpus = {0, 3};
  for (int k = 0; k < 2; ++k) {
    TaskProcess p;
    p.launcher_id = "42.0.1.p" + std::to_string(k);
    p.stdout_path = "/data/logs/42.0.1.p" + std::to_string(k) + ".out";
    p.stderr_path = "/data/logs/42.0.1.p" + std::to_string(k) + ".err";
    // Not written: a restarted agent learns these from the launcher.
    p.state = TaskProcess::State::kExited;
    p.pid = 1000 + k;
    p.exit_code = 3;
    u.procs.push_back(p);
  }
  return u;
}

TEST(UnitFileTest, RoundTrip) {
  const TaskUnit u = TwoProcesses();
  const std::string text = UnitFileText(u);
  EXPECT_EQ(json::parse(text)["version"], 1);
  absl::StatusOr<TaskUnit> back = ParseUnitFile(text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->task_id, "42.0.1");
  EXPECT_EQ(back->job_id, 42);
  EXPECT_EQ(back->task_index, 1);
  EXPECT_EQ(back->gpus, (std::vector<int>{0, 3}));
  EXPECT_TRUE(back->persisted);
  EXPECT_FALSE(back->first_failure.has_value());
  ASSERT_EQ(back->procs.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(back->procs[k].launcher_id, u.procs[k].launcher_id);
    EXPECT_EQ(back->procs[k].stdout_path, u.procs[k].stdout_path);
    EXPECT_EQ(back->procs[k].stderr_path, u.procs[k].stderr_path);
    EXPECT_EQ(back->procs[k].state, TaskProcess::State::kStarting);
    EXPECT_EQ(back->procs[k].pid, 0);
    EXPECT_EQ(back->procs[k].exit_code, 0);
  }
}

TEST(UnitFileTest, KeepsOnlyGpuIndicesThatCanBeOnes) {
  json m = json::parse(UnitFileText(TwoProcesses()));
  m["gpus"] = json::array({1, -1, 64, "2", 1.5, 63});
  absl::StatusOr<TaskUnit> back = ParseUnitFile(m.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->gpus, (std::vector<int>{1, 63}));
  // Missing numbers are zero.
  m.erase("job_id");
  m.erase("task_index");
  m.erase("gpus");
  back = ParseUnitFile(m.dump());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->job_id, 0);
  EXPECT_EQ(back->task_index, 0);
  EXPECT_TRUE(back->gpus.empty());
}

TEST(UnitFileTest, RefusesWhatIsNotAUnitFile) {
  const json good = json::parse(UnitFileText(TwoProcesses()));
  std::vector<std::string> bad = {"", "not json", "[]", "{\"task_id\": "};
  json m = good;
  m.erase("task_id");
  bad.push_back(m.dump());
  m = good;
  m["task_id"] = 42;
  bad.push_back(m.dump());
  for (const char* id : {"", "..", "../x", "a/b", "a b"}) {
    m = good;
    m["task_id"] = id;
    bad.push_back(m.dump());
  }
  m = good;
  m.erase("processes");
  bad.push_back(m.dump());
  m = good;
  m["processes"] = json::array();
  bad.push_back(m.dump());
  m = good;
  m["processes"] = json::object();
  bad.push_back(m.dump());
  m = good;
  m["processes"][1].erase("launcher_id");
  bad.push_back(m.dump());
  m = good;
  m["processes"][0]["launcher_id"] = 7;
  bad.push_back(m.dump());
  m = good;
  m["processes"][0] = "42.0.1.p0";
  bad.push_back(m.dump());
  for (const std::string& text : bad) {
    absl::StatusOr<TaskUnit> unit = ParseUnitFile(text);
    EXPECT_TRUE(absl::IsInvalidArgument(unit.status()))
        << text << " -> " << unit.status();
  }
  // The good one is good.
  EXPECT_TRUE(ParseUnitFile(good.dump()).ok());
}

}  // namespace
}  // namespace loom
