// The task runner (task_runner.h) through a whole agent: launch with ranks
// and logs, following logs, duplicates, exec failures and the rollback of a
// launch that failed half-way, stopping with a grace, a failed process
// stopping its siblings, fake tasks.

#include "loom/agent/task_runner.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_launcher.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
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

}  // namespace
}  // namespace loom
