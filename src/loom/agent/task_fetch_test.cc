// Launches that wait for slow work before their processes start (an image
// pull: `LaunchStep::NeedsFetch` / `Fetch`, task_runner.h). A step of the
// test's own plays the image step: the launch is answered at once with the
// task `pulling` and its progress; the processes start once the fetch is
// done; a failed fetch ends the task lost and `refused`, with the reason; a
// stop while it waits ends it at once, and the late fetch starts nothing.

#include <signal.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/node_table.h"
#include "loom/agent/task_runner.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

// Fetches for every launch whose env has FETCH=1: reports 3 of 10 bytes,
// then waits for `release` and returns `result`.
struct FetchGate {
  absl::Notification release;
  absl::Status result;
  std::atomic<int> fetches{0};
};

class GatedFetchStep : public LaunchStep {
 public:
  explicit GatedFetchStep(FetchGate* gate) : gate_(gate) {}
  std::string_view name() const override { return "gated-fetch"; }
  bool NeedsFetch(const LaunchContext& ctx) const override {
    auto it = ctx.request.env.find("FETCH");
    return it != ctx.request.env.end() && it->second == "1";
  }
  absl::Status Fetch(LaunchContext&, ImagePullMeter& meter) const override {
    ++gate_->fetches;
    meter.phase.store(1);
    meter.bytes_total.store(10);
    meter.bytes_done.store(3);
    gate_->release.WaitForNotification();
    return gate_->result;
  }

 private:
  FetchGate* const gate_;
};

class TaskFetchTest : public ::testing::Test {
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
    options.steps.push_back(std::make_unique<GatedFetchStep>(&gate_));
    options.on_task_ended = [this](AgentNode&) { ++reports_; };
    runner_ = std::make_unique<TaskRunner>(std::move(options), log_.log());
  }
  void TearDown() override {
    if (!gate_.release.HasBeenNotified()) gate_.release.Notify();
    runner_->Shutdown();
  }

  AgentNode& node() { return *nodes_->nodes().front(); }

  static LaunchRequest Request(const std::string& id, bool fetch,
                               int processes = 1) {
    LaunchRequest r;
    r.task_id = id;
    r.job_id = 1;
    r.argv = {"train"};
    r.env = {{"LOOM_FAKE_SECONDS", "60"}, {"FETCH", fetch ? "1" : "0"}};
    r.gpus = {0};
    r.processes = processes;
    return r;
  }
  json StatusOf(const std::string& id, std::vector<std::string>* ended = {}) {
    std::vector<std::string> ended_ids;
    for (const json& t : runner_->Statuses(node(), &ended_ids)) {
      if (t["task_id"] == id) {
        if (ended != nullptr) *ended = ended_ids;
        return t;
      }
    }
    return json();
  }
  size_t Launched() { return node().launcher->List().size(); }

  TempDir dir_;
  CapturedLog log_;
  absl::Time now_ = absl::FromUnixSeconds(1000);
  std::unique_ptr<NodeTable> nodes_;
  FetchGate gate_;
  std::unique_ptr<TaskRunner> runner_;
  std::atomic<int> reports_{0};
};

TEST_F(TaskFetchTest, WithoutAFetchTheLaunchStartsAtOnce) {
  std::string field;
  absl::StatusOr<json> launched =
      runner_->Launch(node(), Request("1.0.0", false), &field);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ((*launched)["state"], "running");
  EXPECT_EQ(gate_.fetches.load(), 0);
  EXPECT_EQ(Launched(), 1u);
}

TEST_F(TaskFetchTest, AcceptedPullingThenStartedOnceFetched) {
  std::string field;
  absl::StatusOr<json> launched =
      runner_->Launch(node(), Request("2.0.0", true, 2), &field);
  ASSERT_TRUE(launched.ok()) << launched.status();
  EXPECT_EQ((*launched)["state"], "pulling");
  EXPECT_EQ((*launched)["node"], "h200-0");
  ASSERT_TRUE(WaitFor(
      [&] { return StatusOf("2.0.0")["pull"].value("bytes_done", 0) == 3; }));
  std::vector<std::string> ended;
  const json pulling = StatusOf("2.0.0", &ended);
  EXPECT_EQ(pulling["state"], "pulling");
  EXPECT_EQ(pulling["pull"]["bytes_total"], 10);
  EXPECT_EQ(pulling["pull"]["phase"], "layers");
  EXPECT_TRUE(ended.empty()) << "a pulling task is not ended";
  EXPECT_EQ(Launched(), 0u) << "no process before the fetch is done";
  // The same id again is known (being pulled), not launched twice.
  EXPECT_TRUE(absl::IsAlreadyExists(
      runner_->Launch(node(), Request("2.0.0", true), &field).status()));

  gate_.release.Notify();
  ASSERT_TRUE(WaitFor([&] { return StatusOf("2.0.0")["state"] == "running"; }));
  EXPECT_EQ(Launched(), 2u);
  EXPECT_FALSE(StatusOf("2.0.0").contains("pull"));
  EXPECT_TRUE(WaitFor([&] { return reports_.load() >= 1; }))
      << "the start is reported soon";
}

TEST_F(TaskFetchTest, AFailedFetchEndsTheTaskRefusedWithTheReason) {
  gate_.result = absl::InvalidArgumentError(
      "pulling image reg:5000/team/x:1 on node h200-0: blob sha256:ab: 404");
  std::string field;
  ASSERT_TRUE(runner_->Launch(node(), Request("3.0.0", true), &field).ok());
  gate_.release.Notify();
  ASSERT_TRUE(WaitFor([&] { return StatusOf("3.0.0")["state"] == "lost"; }));
  std::vector<std::string> ended;
  const json lost = StatusOf("3.0.0", &ended);
  EXPECT_EQ(lost["refused"], true);
  EXPECT_THAT(lost["reason"].get<std::string>(),
              HasSubstr("pulling image reg:5000/team/x:1"));
  EXPECT_EQ(ended, std::vector<std::string>{"3.0.0"});
  EXPECT_EQ(Launched(), 0u);
  EXPECT_GE(reports_.load(), 1);
  // The server's ack forgets it, as any ended task.
  runner_->ApplyServerOrders(node(), {"3.0.0"}, {}, {"3.0.0"});
  EXPECT_TRUE(StatusOf("3.0.0").is_null());
}

TEST_F(TaskFetchTest, AStopWhileItPullsEndsItAndTheLateFetchStartsNothing) {
  std::string field;
  ASSERT_TRUE(runner_->Launch(node(), Request("4.0.0", true), &field).ok());
  ASSERT_TRUE(WaitFor([&] { return gate_.fetches.load() == 1; }));
  absl::StatusOr<json> stopped =
      runner_->Stop(node(), "4.0.0", SIGTERM, absl::Seconds(1));
  ASSERT_TRUE(stopped.ok()) << stopped.status();
  const json ended = StatusOf("4.0.0");
  EXPECT_EQ(ended["state"], "exited");
  EXPECT_EQ(ended["signal"], SIGTERM);
  gate_.release.Notify();
  runner_->Shutdown();  // the fetch thread is done
  EXPECT_EQ(Launched(), 0u);
  EXPECT_EQ(StatusOf("4.0.0")["state"], "exited");
}

TEST_F(TaskFetchTest, FencingAndServerStopsEndPullingTasks) {
  std::string field;
  ASSERT_TRUE(runner_->Launch(node(), Request("5.0.0", true), &field).ok());
  ASSERT_TRUE(runner_->Launch(node(), Request("5.0.1", true), &field).ok());
  ASSERT_TRUE(runner_->Launch(node(), Request("5.0.2", false), &field).ok());
  runner_->ApplyServerOrders(node(), {}, {"5.0.0"}, {});
  EXPECT_EQ(StatusOf("5.0.0")["signal"], SIGTERM);
  EXPECT_EQ(runner_->KillAll(node()), 2) << "5.0.1 pulling, 5.0.2 running";
  EXPECT_EQ(StatusOf("5.0.1")["state"], "exited");
  EXPECT_EQ(StatusOf("5.0.1")["signal"], SIGKILL);
}

}  // namespace
}  // namespace loom
