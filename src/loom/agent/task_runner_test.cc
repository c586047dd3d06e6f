// The task runner (task_runner.h). Through a whole agent (AgentTest): launch
// with ranks and logs, following logs, duplicates, exec failures and the
// rollback of a launch that failed half-way, stopping with a grace, a failed
// process stopping its siblings, fake tasks. Directly (TaskRunnerTest), on a
// node of fake tasks with a clock the test turns: launches and statuses,
// stops, the server's orders, fencing.

#include "loom/agent/task_runner.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/node_table.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_launcher.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::FakeServer;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::StateIs;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

TEST(AgentTest, LaunchesProcessesWithRanksReportsExitAndServesLogs) {
  FakeServer server;
  server.set_auto_ack(true);
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  json body = Launch("42.0.0",
                     {"/bin/sh", "-c",
                      "echo $RANK $LOCAL_RANK $WORLD_SIZE "
                      "$CUDA_VISIBLE_DEVICES $LOCAL_WORLD_SIZE; echo oops >&2"},
                     {{"WORLD_SIZE", "4"}}, 2);
  body["rank_base"] = 2;
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  const json launched = json::parse(res->body);
  EXPECT_EQ(launched["task_id"], "42.0.0");
  EXPECT_EQ(launched["processes"].size(), 2u);

  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "42.0.0"), "exited");
  }));
  const json status = server.LastStatus("h200-0", "42.0.0");
  EXPECT_EQ(status["exit_code"], 0);
  EXPECT_EQ(status["signal"], 0);

  res = client.Get("/v1/tasks/42.0.0/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "2 0 4 0,1 2\n");
  res = client.Get("/v1/tasks/42.0.0/logs?process=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "3 1 4 0,1 2\n");
  res = client.Get("/v1/tasks/42.0.0/logs?stream=stderr");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "oops\n");
  res = client.Get("/v1/tasks/42.0.0/logs?offset=2");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "0 4 0,1 2\n");

  // The server acknowledged the exit: the agent forgets the task (the logs
  // stay).
  ASSERT_TRUE(WaitFor(
      [&] { return !server.LastTaskIds("h200-0").contains("42.0.0"); }));
  res = client.Get("/v1/tasks/42.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/tasks/42.0.0/logs?process=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "3 1 4 0,1 2\n");
  EXPECT_FALSE(fs::exists(dir.path() + "/units/42.0.0.json"));
}

TEST(AgentTest, FollowStreamsLogsUntilTheTaskEnds) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("13.0.0", {"/bin/sh", "-c", "echo one; sleep 0.5; echo two"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  httplib::Client follower("127.0.0.1", agent->port());
  follower.set_read_timeout(20, 0);
  std::string received;
  httplib::Result streamed = follower.Get("/v1/tasks/13.0.0/logs?follow=1",
                                          [&](const char* data, size_t n) {
                                            received.append(data, n);
                                            return true;
                                          });
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(received, "one\ntwo\n");
}

TEST(AgentTest, DuplicateLaunchIsAConflict) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const json body = Launch("7.0.0", {"/bin/sleep", "30"});
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_THAT(res->body, HasSubstr("already known"));
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"].size(), 1u);
  res = client.Post("/v1/tasks/7.0.0/stop", json{{"signal", 9}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "7.0.0"), "exited"); }));
}

TEST(AgentTest, ExecFailureIsReportedAndLeavesNothing) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("9.0.0", {"/nonexistent/prog"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("/nonexistent/prog"));
  res = client.Get("/v1/tasks/9.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  // The id is free again.
  res = client.Post("/v1/tasks", Launch("9.0.0", {"/bin/true"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "9.0.0"), "exited"); }));
}

// Fails the launch of one chosen process id, once.
class FailingLauncher : public TaskLauncher {
 public:
  FailingLauncher(std::unique_ptr<TaskLauncher> inner, std::string fail_id)
      : inner_(std::move(inner)), fail_id_(std::move(fail_id)) {}

  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override {
    if (spec.task_id == fail_id_ && !failed_.exchange(true)) {
      return absl::InternalError("injected launch failure");
    }
    absl::StatusOr<TaskHandle> handle = inner_->Launch(spec);
    if (handle.ok()) last_pid_.store(handle->pid);
    return handle;
  }
  absl::Status Signal(const std::string& id, int signal) override {
    return inner_->Signal(id, signal);
  }
  absl::Status Stop(const std::string& id, int signal,
                    absl::Duration grace) override {
    return inner_->Stop(id, signal, grace);
  }
  std::vector<TaskEvent> Poll() override { return inner_->Poll(); }
  absl::StatusOr<std::vector<TaskInfo>> Recover() override {
    return inner_->Recover();
  }
  absl::Status Forget(const std::string& id) override {
    return inner_->Forget(id);
  }
  std::vector<TaskInfo> List() const override { return inner_->List(); }

  static std::atomic<pid_t> last_pid_;

 private:
  std::unique_ptr<TaskLauncher> inner_;
  const std::string fail_id_;
  std::atomic<bool> failed_{false};
};

std::atomic<pid_t> FailingLauncher::last_pid_{0};

TEST(AgentTest, PartialLaunchIsRolledBack) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.launcher_factory = [](const std::string&, const std::string& state)
      -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
    ShimTaskLauncherOptions shim;
    shim.state_dir = state;
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> inner =
        ShimTaskLauncher::Create(shim);
    if (!inner.ok()) return inner.status();
    return std::make_unique<FailingLauncher>(*std::move(inner), "8.0.0.p1");
  };
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const json body = Launch("8.0.0", {"/bin/sleep", "30"}, json::object(), 2);
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_THAT(res->body, HasSubstr("injected launch failure"));
  EXPECT_THAT(res->body, HasSubstr("process 1 of 2"));
  const pid_t first = FailingLauncher::last_pid_.load();
  ASSERT_GT(first, 0);
  // The process that had started is gone, and nothing is left behind.
  EXPECT_TRUE(WaitFor([&] { return ::kill(first, 0) != 0; }));
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"], json::array());
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  EXPECT_TRUE(fs::is_empty(dir.path() + "/units"));
  // A retry succeeds.
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks/8.0.0/stop", json{{"signal", 9}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "8.0.0"), "exited"); }));
}

TEST(AgentTest, StopSignalsThenKillsAfterTheGrace) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);

  // Ignores SIGTERM: SIGKILL after the grace.
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("5.0.0", {"/bin/sh", "-c", "trap '' TERM; sleep 30 & wait"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "5.0.0"), "running");
  }));
  res = client.Post("/v1/tasks/5.0.0/stop",
                    json{{"signal", 15}, {"grace_ms", 300}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.0"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.0")["signal"], SIGKILL);
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.0")["exit_code"], 128 + SIGKILL);

  // Default signal: SIGTERM.
  res = client.Post("/v1/tasks", Launch("5.0.1", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks/5.0.1/stop", std::string());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.1"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.1")["signal"], SIGTERM);

  // The server lists a task in `stop`.
  res = client.Post("/v1/tasks", Launch("5.0.2", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "5.0.2"), "running");
  }));
  server.StopOnce("h200-0", "5.0.2");
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.2"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.2")["signal"], SIGTERM);
}

TEST(AgentTest, AFailedProcessStopsItsSiblings) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("6.0.0",
             {"/bin/sh", "-c",
              "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 30"},
             json::object(), 2));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "6.0.0"), "exited"); },
      absl::Seconds(10)));
  const json status = server.LastStatus("h200-0", "6.0.0");
  EXPECT_EQ(status["exit_code"], 3);
  EXPECT_THAT(status["reason"].get<std::string>(),
              HasSubstr("process 1 exited with code 3"));
}

TEST(AgentTest, FakeTasksExitAfterLoomFakeSeconds) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.fake_tasks = true;
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const absl::Time start = absl::Now();
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("3.0.0", {"python3", "train.py"}, {{"LOOM_FAKE_SECONDS", "1"}}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "3.0.0"), "running");
  }));
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "3.0.0"), "exited"); },
      absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(950));
  EXPECT_EQ(server.LastStatus("h200-0", "3.0.0")["exit_code"], 0);
  res = client.Get("/v1/tasks/3.0.0/logs");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("fake task 3.0.0"));
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  // A bad LOOM_FAKE_SECONDS is a bad request.
  res = client.Post("/v1/tasks",
                    Launch("3.0.1", {"x"}, {{"LOOM_FAKE_SECONDS", "soon"}}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
}

// ---------------------------------------------------------------------------
// `TaskRunner` itself, on one node of fake tasks whose clock the test turns.

class TaskRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ =
        FakeNodes(dir_.path(), {"h200-0"}, log_.log(), [this] { return now_; });
    ASSERT_NE(nodes_, nullptr);
    LaunchStepsOptions steps;
    steps.server_urls = {"http://127.0.0.1:7000"};
    steps.checkpoint_dirs = false;
    TaskRunnerOptions options;
    options.stop_signal = SIGTERM;
    options.stop_grace = absl::Seconds(5);
    options.steps = DefaultLaunchSteps(steps);
    options.on_task_ended = [this](AgentNode&) { ++ended_reports_; };
    runner_ = std::make_unique<TaskRunner>(std::move(options), log_.log());
  }

  AgentNode& node() { return *nodes_->nodes().front(); }

  // A task of `processes` fake processes that "run" for `seconds`.
  static LaunchRequest Request(const std::string& id, int seconds,
                               int processes = 1) {
    LaunchRequest r;
    r.task_id = id;
    r.job_id = 1;
    r.argv = {"train"};
    r.env = {{"LOOM_FAKE_SECONDS", absl::StrCat(seconds)}};
    r.gpus = {0};
    r.processes = processes;
    return r;
  }
  absl::StatusOr<json> Launch(const LaunchRequest& r) {
    field_.clear();
    return runner_->Launch(node(), r, &field_);
  }
  // The heartbeat's statuses by task id, and the ended ones.
  std::map<std::string, json> Statuses(std::set<std::string>* ended = nullptr) {
    std::vector<std::string> ended_ids;
    const json tasks = runner_->Statuses(node(), &ended_ids);
    std::map<std::string, json> out;
    for (const json& t : tasks) out[t["task_id"].get<std::string>()] = t;
    if (ended != nullptr) ended->insert(ended_ids.begin(), ended_ids.end());
    return out;
  }
  std::set<std::string> LauncherIds() {
    std::set<std::string> ids;
    for (const TaskInfo& info : node().launcher->List()) {
      ids.insert(info.task_id);
    }
    return ids;
  }

  TempDir dir_;
  CapturedLog log_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<TaskRunner> runner_;
  int ended_reports_ = 0;
  std::string field_;
};

TEST_F(TaskRunnerTest, LaunchThenStatuses) {
  absl::StatusOr<json> launched = Launch(Request("1.0.0", 5, 2));
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ((*launched)["task_id"], "1.0.0");
  EXPECT_EQ((*launched)["state"], "running");
  EXPECT_EQ((*launched)["node"], "h200-0");
  ASSERT_EQ((*launched)["processes"].size(), 2u);
  for (const json& p : (*launched)["processes"]) {
    EXPECT_EQ(p["state"], "running");
    EXPECT_GT(p["pid"].get<int>(), 0);
  }
  EXPECT_EQ(LauncherIds(), (std::set<std::string>{"1.0.0.p0", "1.0.0.p1"}));
  std::set<std::string> ended;
  std::map<std::string, json> s = Statuses(&ended);
  ASSERT_EQ(s.size(), 1u);
  // The fake processes wrote a line at start: `output` (a recovered run's
  // first progress for the server).
  EXPECT_EQ(s["1.0.0"], (json{{"task_id", "1.0.0"},
                              {"state", "running"},
                              {"exit_code", 0},
                              {"signal", 0},
                              {"reason", ""},
                              {"output", true}}));
  EXPECT_TRUE(ended.empty());
  EXPECT_EQ(ended_reports_, 0);
  EXPECT_EQ(log_.LinesWith("launched task 1.0.0 (job 1, task index 0, 2 "
                           "processes"),
            1);

  // What each process would have run is in its log.
  absl::StatusOr<std::string> out = runner_->LogPath(node(), "1.0.0", 1, false);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, TaskLogPath(node(), "1.0.0", 1, false));
  std::ifstream in(*out);
  const std::string text((std::istreambuf_iterator<char>(in)),
                         std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("loom fake task 1.0.0.p1: would run [train]"));
  EXPECT_TRUE(absl::IsInvalidArgument(
      runner_->LogPath(node(), "1.0.0", 2, false).status()));
  EXPECT_EQ(runner_->LogPath(node(), "nope", 0, false).value(), "");

  // Their time is up.
  now_ += absl::Seconds(5);
  EXPECT_FALSE(runner_->ProcessEnded(node(), "1.0.0", 0));
  runner_->Poll(node());
  EXPECT_TRUE(runner_->ProcessEnded(node(), "1.0.0", 0));
  s = Statuses(&ended);
  EXPECT_EQ(s["1.0.0"]["state"], "exited");
  EXPECT_EQ(s["1.0.0"]["exit_code"], 0);
  EXPECT_EQ(ended, (std::set<std::string>{"1.0.0"}));
  EXPECT_EQ(ended_reports_, 1);
  runner_->Poll(node());
  EXPECT_EQ(ended_reports_, 1);  // said once
  absl::StatusOr<json> got = runner_->Get(node(), "1.0.0");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ((*got)["processes"][1]["state"], "exited");
  EXPECT_TRUE(absl::IsNotFound(runner_->Get(node(), "nope").status()));
}

TEST_F(TaskRunnerTest, ADuplicateIdIsAlreadyKnown) {
  ASSERT_TRUE(Launch(Request("2.0.0", 5)).ok());
  absl::StatusOr<json> again = Launch(Request("2.0.0", 5));
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(std::string(again.status().message()),
              HasSubstr("already known on node h200-0 (running)"));
  // Ended but not yet acknowledged: still known.
  now_ += absl::Seconds(5);
  runner_->Poll(node());
  again = Launch(Request("2.0.0", 5));
  EXPECT_TRUE(absl::IsAlreadyExists(again.status())) << again.status();
  EXPECT_THAT(std::string(again.status().message()), HasSubstr("(exited)"));
  EXPECT_EQ(Statuses().size(), 1u);
  EXPECT_EQ(LauncherIds(), (std::set<std::string>{"2.0.0"}));
}

TEST_F(TaskRunnerTest, ARequestThatFailsLeavesNothing) {
  LaunchRequest r = Request("3.0.0", 5, 2);
  r.gpus = {8};
  absl::StatusOr<json> launched = Launch(r);
  EXPECT_TRUE(absl::IsInvalidArgument(launched.status()));
  EXPECT_EQ(field_, "gpus");
  // The launcher refuses: the launch is rolled back.
  r = Request("3.0.0", 5, 2);
  r.env["LOOM_FAKE_SECONDS"] = "soon";
  launched = Launch(r);
  EXPECT_TRUE(absl::IsInvalidArgument(launched.status()));
  EXPECT_THAT(std::string(launched.status().message()),
              ::testing::StartsWith("process 0 of 2: "));
  EXPECT_TRUE(Statuses().empty());
  EXPECT_TRUE(LauncherIds().empty());
  EXPECT_FALSE(fs::exists(TaskLogPath(node(), "3.0.0", 0, false)));
  // The id is free again.
  EXPECT_TRUE(Launch(Request("3.0.0", 5, 2)).ok());
}

TEST_F(TaskRunnerTest, StopsWithTheSignalAsked) {
  absl::StatusOr<json> stopped =
      runner_->Stop(node(), "nope", SIGTERM, absl::Seconds(1));
  EXPECT_TRUE(absl::IsNotFound(stopped.status())) << stopped.status();
  EXPECT_EQ(std::string(stopped.status().message()),
            "task nope is not known on node h200-0");

  ASSERT_TRUE(Launch(Request("4.0.0", 60)).ok());
  stopped = runner_->Stop(node(), "4.0.0", SIGINT, absl::Seconds(1));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ((*stopped)["state"], "running");  // until the launcher says
  EXPECT_EQ((*stopped)["stopping"], true);
  runner_->Poll(node());
  std::map<std::string, json> s = Statuses();
  EXPECT_EQ(s["4.0.0"]["state"], "exited");
  EXPECT_EQ(s["4.0.0"]["signal"], SIGINT);
  EXPECT_EQ(s["4.0.0"]["exit_code"], 128 + SIGINT);
  EXPECT_EQ(s["4.0.0"]["reason"], "killed by SIGINT");
  EXPECT_EQ(ended_reports_, 1);
  // Stopping an ended task changes nothing.
  stopped = runner_->Stop(node(), "4.0.0", SIGKILL, absl::ZeroDuration());
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  EXPECT_EQ((*stopped)["signal"], SIGINT);
  EXPECT_EQ((*stopped)["stopping"], false);
}

TEST_F(TaskRunnerTest, AcksForgetEndedTasksButNotRunningOnes) {
  ASSERT_TRUE(Launch(Request("5.0.0", 0)).ok());
  ASSERT_TRUE(Launch(Request("5.0.1", 60, 2)).ok());
  runner_->Poll(node());
  ASSERT_EQ(Statuses()["5.0.0"]["state"], "exited");
  runner_->ApplyServerOrders(node(), {"5.0.0", "5.0.1", "unknown"}, {}, {});
  EXPECT_TRUE(absl::IsNotFound(runner_->Get(node(), "5.0.0").status()));
  EXPECT_TRUE(runner_->Get(node(), "5.0.1").ok());
  EXPECT_EQ(Statuses().size(), 1u);
  EXPECT_EQ(LauncherIds(), (std::set<std::string>{"5.0.1.p0", "5.0.1.p1"}));
  EXPECT_EQ(log_.LinesWith("the server acknowledged task 5.0.1, which still "
                           "runs; ignored"),
            1);
  // A forgotten id may be launched again.
  EXPECT_TRUE(Launch(Request("5.0.0", 0)).ok());
}

TEST_F(TaskRunnerTest, StopOrdersStopRunningTasksAndDropUnexpectedEnds) {
  ASSERT_TRUE(Launch(Request("6.0.0", 60)).ok());
  ASSERT_TRUE(Launch(Request("6.0.1", 0)).ok());
  ASSERT_TRUE(Launch(Request("6.0.2", 0)).ok());
  runner_->Poll(node());
  // 6.0.1 ended and the server saw it (it was reported); 6.0.2 ended, but
  // the server has not seen that yet.
  runner_->ApplyServerOrders(node(), {}, {"6.0.0", "6.0.1", "6.0.2"},
                             {"6.0.0", "6.0.1"});
  runner_->Poll(node());
  std::map<std::string, json> s = Statuses();
  EXPECT_EQ(s["6.0.0"]["state"], "exited");
  EXPECT_EQ(s["6.0.0"]["signal"], SIGTERM);  // the runner's stop signal
  EXPECT_FALSE(s.contains("6.0.1"));
  EXPECT_EQ(s["6.0.2"]["state"], "exited");
  EXPECT_EQ(log_.LinesWith("forgetting ended task 6.0.1"), 1);
}

TEST_F(TaskRunnerTest, KillAllCountsRunningTasks) {
  ASSERT_TRUE(Launch(Request("7.0.0", 60)).ok());
  ASSERT_TRUE(Launch(Request("7.0.1", 60, 3)).ok());
  ASSERT_TRUE(Launch(Request("7.0.2", 0)).ok());
  runner_->Poll(node());
  EXPECT_EQ(runner_->KillAll(node()), 2);
  runner_->Poll(node());
  std::map<std::string, json> s = Statuses();
  EXPECT_EQ(s["7.0.0"]["signal"], SIGKILL);
  EXPECT_EQ(s["7.0.1"]["signal"], SIGKILL);
  EXPECT_EQ(s["7.0.1"]["state"], "exited");
  EXPECT_EQ(s["7.0.2"]["signal"], 0);
  EXPECT_EQ(s["7.0.2"]["exit_code"], 0);
  EXPECT_EQ(runner_->KillAll(node()), 0);
}

}  // namespace
}  // namespace loom
