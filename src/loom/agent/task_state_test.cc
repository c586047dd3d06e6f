// What a task amounts to for the server (task_state.h): `SummarizeTask`,
// `TaskStatusJson` and `SignalText`, on task tables made by hand.

#include "loom/agent/task_state.h"

#include <signal.h>

#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using State = TaskProcess::State;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TaskProcess Running() {
  TaskProcess p;
  p.state = State::kRunning;
  p.pid = 4242;
  return p;
}

TaskProcess Exited(int exit_code, absl::Time at, int term_signal = 0) {
  TaskProcess p;
  p.state = State::kExited;
  p.exit_code = term_signal != 0 ? -1 : exit_code;
  p.term_signal = term_signal;
  p.ended_at = at;
  return p;
}

TaskProcess Lost(std::string reason) {
  TaskProcess p;
  p.state = State::kLost;
  p.reason = std::move(reason);
  return p;
}

TaskUnit Unit(std::vector<TaskProcess> procs) {
  TaskUnit u;
  u.task_id = "42.0.1";
  u.job_id = 42;
  u.task_index = 1;
  u.procs = std::move(procs);
  return u;
}

TEST(TaskStateTest, RunningWhileAnyProcessRuns) {
  TaskSummary s = SummarizeTask(Unit({Exited(3, kT0), Running()}));
  EXPECT_EQ(s.state, "running");
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.signal, 0);
  EXPECT_EQ(s.reason, "");
  // A process still starting has not ended either.
  EXPECT_EQ(SummarizeTask(Unit({Exited(0, kT0), TaskProcess()})).state,
            "running");
}

TEST(TaskStateTest, AllExitedWithZeroIsExitedZero) {
  const TaskSummary s =
      SummarizeTask(Unit({Exited(0, kT0), Exited(0, kT0 + absl::Seconds(1))}));
  EXPECT_EQ(s.state, "exited");
  EXPECT_EQ(s.exit_code, 0);
  EXPECT_EQ(s.signal, 0);
  EXPECT_EQ(s.reason, "");
}

TEST(TaskStateTest, TheFailureSeenFirstWinsOverAnEarlierTimedOne) {
  // Process 1 ended earlier by its (whole-second) time, but the agent saw
  // process 0 fail first.
  TaskUnit u = Unit({Exited(2, kT0 + absl::Seconds(5)), Exited(3, kT0)});
  u.first_failure = 0;
  TaskSummary s = SummarizeTask(u);
  EXPECT_EQ(s.state, "exited");
  EXPECT_EQ(s.exit_code, 2);
  EXPECT_EQ(s.reason, "process 0 exited with code 2");

  // Without it (a task recovered after a restart): the earliest end wins.
  u.first_failure.reset();
  s = SummarizeTask(u);
  EXPECT_EQ(s.exit_code, 3);
  EXPECT_EQ(s.reason, "process 1 exited with code 3");

  // A first failure that names no process is no help either.
  u.first_failure = 7;
  EXPECT_EQ(SummarizeTask(u).exit_code, 3);
}

TEST(TaskStateTest, EqualTimesGoToTheLowerProcess) {
  const TaskSummary s =
      SummarizeTask(Unit({Exited(0, kT0), Exited(5, kT0), Exited(6, kT0)}));
  EXPECT_EQ(s.exit_code, 5);
  EXPECT_EQ(s.reason, "process 1 exited with code 5");
}

TEST(TaskStateTest, AKilledProcessExitsWith128PlusItsSignal) {
  TaskSummary s = SummarizeTask(Unit({Exited(0, kT0, SIGKILL)}));
  EXPECT_EQ(s.state, "exited");
  EXPECT_EQ(s.exit_code, 128 + SIGKILL);
  EXPECT_EQ(s.signal, SIGKILL);
  EXPECT_EQ(s.reason, "killed by SIGKILL");

  // One process of several: the reason names it.
  s = SummarizeTask(
      Unit({Exited(0, kT0), Exited(0, kT0 + absl::Seconds(1), SIGTERM)}));
  EXPECT_EQ(s.exit_code, 128 + SIGTERM);
  EXPECT_EQ(s.signal, SIGTERM);
  EXPECT_EQ(s.reason, "process 1 was killed by SIGTERM");

  // A one-process task that exits non-zero needs no reason.
  s = SummarizeTask(Unit({Exited(7, kT0)}));
  EXPECT_EQ(s.exit_code, 7);
  EXPECT_EQ(s.reason, "");
}

TEST(TaskStateTest, ALostProcessMakesTheTaskLost) {
  TaskSummary s = SummarizeTask(Unit({Lost("supervisor (shim) died")}));
  EXPECT_EQ(s.state, "lost");
  EXPECT_EQ(s.exit_code, -1);
  EXPECT_EQ(s.signal, 0);
  EXPECT_EQ(s.reason, "supervisor (shim) died");

  s = SummarizeTask(Unit({Exited(0, kT0), Lost("its record is gone")}));
  EXPECT_EQ(s.state, "lost");
  EXPECT_EQ(s.reason, "process 1: its record is gone");

  EXPECT_EQ(SummarizeTask(Unit({Lost("")})).reason, "lost");
}

TEST(TaskStateTest, StatusJsonShortAndDetailed) {
  TaskUnit u = Unit({Running(), Exited(0, kT0, SIGTERM)});
  u.procs[1].pid = 77;
  u.procs[1].reason = "stopped";
  u.stopping = true;

  const json brief = TaskStatusJson("h200-0", u, /*detailed=*/false);
  EXPECT_EQ(brief, (json{{"task_id", "42.0.1"},
                         {"state", "running"},
                         {"exit_code", 0},
                         {"signal", 0},
                         {"reason", ""}}));

  const json full = TaskStatusJson("h200-0", u, /*detailed=*/true);
  EXPECT_EQ(full["task_id"], "42.0.1");
  EXPECT_EQ(full["state"], "running");
  EXPECT_EQ(full["node"], "h200-0");
  EXPECT_EQ(full["job_id"], 42);
  EXPECT_EQ(full["task_index"], 1);
  EXPECT_EQ(full["stopping"], true);
  ASSERT_EQ(full["processes"].size(), 2u);
  EXPECT_EQ(full["processes"][0],
            (json{{"index", 0}, {"state", "running"}, {"pid", 4242}}));
  EXPECT_EQ(full["processes"][1], (json{{"index", 1},
                                        {"state", "exited"},
                                        {"pid", 77},
                                        {"exit_code", 128 + SIGTERM},
                                        {"signal", SIGTERM},
                                        {"reason", "stopped"}}));

  // `stopping` only while the task runs.
  u.procs[0] = Exited(0, kT0);
  const json done = TaskStatusJson("h200-0", u, /*detailed=*/true);
  EXPECT_EQ(done["state"], "exited");
  EXPECT_EQ(done["exit_code"], 128 + SIGTERM);
  EXPECT_EQ(done["stopping"], false);
  EXPECT_EQ(done["processes"][0]["exit_code"], 0);

  // Starting and lost processes have no exit code.
  const json odd =
      TaskStatusJson("h200-0", Unit({Lost("gone"), TaskProcess()}), true);
  EXPECT_EQ(odd["state"], "running");  // process 1 is still starting
  EXPECT_EQ(odd["processes"][0]["state"], "lost");
  EXPECT_EQ(odd["processes"][0]["reason"], "gone");
  EXPECT_FALSE(odd["processes"][0].contains("exit_code"));
  EXPECT_EQ(odd["processes"][1]["state"], "starting");
  EXPECT_FALSE(odd["processes"][1].contains("exit_code"));
}

TEST(TaskStateTest, SignalNames) {
  EXPECT_EQ(SignalText(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalText(SIGKILL), "SIGKILL");
  EXPECT_EQ(SignalText(200), "signal 200");
}

}  // namespace
}  // namespace loom
