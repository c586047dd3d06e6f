// Image pulls at the server (docs/images.md, "Pulling" and "Images on
// nodes"): a container task whose node pulls its image is `pulling` with its
// progress in the job's reason, events and /metrics; a pull that fails fails
// the job without a restart and leaves the node up; the images agents report,
// and the pulls `loom image pull` asks of them.

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/common/metrics_text.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;
using testing::Spec;
using testing::T;

constexpr char kPullDigest[] =
    "sha256:3333333333333333333333333333333333333333333333333333333333333333";

class ImagePullTest : public ::testing::Test {
 protected:
  void SetUp() override {
    Cluster cluster = testing::MakeCluster({{2, 0}}, 2, 8);
    auto c = Controller::Create(cluster, &store_, ControllerOptions{}, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    for (const char* node : {"h200-0", "h200-1"}) {
      ASSERT_TRUE(
          c_->Register(testing::EmulatedNode(node, "127.0.0.2:7100"), T(1))
              .ok());
    }
  }

  // Submits a one-task job in an image and starts it: its launch action.
  AgentAction StartContainerJob() {
    JobSpec spec = Spec(
        "name: t\ncommand: [python, t.py]\n"
        "container: {image: 'localhost:5000/team/train:1.4'}\n");
    spec.container->image_digest = kPullDigest;
    EXPECT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
    c_->Tick(T(3));
    std::vector<AgentAction> actions = c_->TakeActions();
    EXPECT_EQ(actions.size(), 1u);
    return actions.empty() ? AgentAction() : actions[0];
  }
  json Heartbeat(const std::string& node, json tasks, json extra = json(),
                 double at = 5) {
    json body = {{"name", node}, {"tasks", std::move(tasks)}};
    if (extra.is_object()) body.update(extra);
    absl::StatusOr<json> reply = c_->Heartbeat(body, T(at));
    EXPECT_TRUE(reply.ok()) << reply.status();
    return reply.ok() ? *reply : json();
  }
  json Job() {
    absl::StatusOr<json> j = c_->GetJob(1, T(10));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : json();
  }
  std::string Metrics() {
    std::string text;
    MetricsWriter w(&text);
    c_->WriteMetrics(w, T(10));
    return text;
  }
  static std::string Events(const json& job) {
    std::string all;
    for (const json& e : job["events"]) {
      all += e.value("message", "") + "\n";
    }
    return all;
  }

  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(ImagePullTest, APullIsAPhaseOfTheStartWithItsProgress) {
  const AgentAction launch = StartContainerJob();
  const std::string node = launch.node;
  c_->ActionDone(launch, absl::OkStatus(), T(3.1), /*started=*/false);
  json job = Job();
  EXPECT_EQ(job["state"], "running");
  EXPECT_EQ(job["placement"]["tasks"][0]["state"], "pulling");
  EXPECT_EQ(job["reason"], "pulling image on " + node);
  EXPECT_THAT(Events(job), HasSubstr("node " + node + " pulls image"));

  // The heartbeat says how far it is.
  const json reply = Heartbeat(node, {{{"task_id", launch.task_id},
                                       {"state", "pulling"},
                                       {"pull",
                                        {{"phase", "layers"},
                                         {"bytes_done", 1'200'000'000},
                                         {"bytes_total", 3'400'000'000}}}}});
  EXPECT_TRUE(reply["ack"].empty()) << "a pulling task is not acknowledged";
  EXPECT_TRUE(reply["stop"].empty());
  job = Job();
  EXPECT_EQ(job["reason"], "pulling image: 1.2 of 3.4 GB on " + node);
  EXPECT_EQ(job["placement"]["tasks"][0]["pull"]["bytes_total"], 3'400'000'000);
  EXPECT_THAT(Metrics(), HasSubstr("loom_tasks_pulling_image 1\n"));

  Heartbeat(node, {{{"task_id", launch.task_id}, {"state", "running"}}}, {},
            7.5);
  job = Job();
  EXPECT_EQ(job["placement"]["tasks"][0]["state"], "running");
  EXPECT_EQ(job["reason"], "");
  EXPECT_THAT(Events(job), HasSubstr("node " + node +
                                     " pulled its image in 4.4 s (3.4 GB)"));
  const std::string metrics = Metrics();
  EXPECT_THAT(metrics, HasSubstr("loom_tasks_pulling_image 0\n"));
  EXPECT_THAT(metrics, HasSubstr("loom_image_pulls_total{result=\"ok\"} 1\n"));
  EXPECT_THAT(metrics, HasSubstr("loom_image_pull_seconds_count 1\n"));
}

TEST_F(ImagePullTest, AFailedPullFailsTheJobWithoutARestartAndKeepsTheNode) {
  JobSpec spec = Spec(
      "name: t\ncommand: [x]\nrestart: {max: 3, backoff: 1s}\n"
      "container: {image: 'localhost:5000/team/train:1.4'}\n");
  spec.container->image_digest = kPullDigest;
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  c_->Tick(T(3));
  std::vector<AgentAction> actions = c_->TakeActions();
  ASSERT_EQ(actions.size(), 1u);
  c_->ActionDone(actions[0], absl::OkStatus(), T(3.1), /*started=*/false);
  const json reply = Heartbeat(
      actions[0].node,
      {{{"task_id", actions[0].task_id},
        {"state", "lost"},
        {"refused", true},
        {"reason", "pulling image localhost:5000/team/train:1.4 on node " +
                       actions[0].node + ": blob sha256:ab: not found"}}});
  EXPECT_EQ(reply["ack"], json::array({actions[0].task_id}));
  const json job = Job();
  EXPECT_EQ(job["state"], "failed");
  EXPECT_THAT(
      job["reason"].get<std::string>(),
      HasSubstr("refused: pulling image localhost:5000/team/train:1.4"));
  EXPECT_EQ(job["restart_count"], 0);
  absl::StatusOr<json> node = c_->GetNode(actions[0].node, T(10));
  ASSERT_TRUE(node.ok());
  EXPECT_EQ((*node)["state"], "up");
  EXPECT_THAT(Metrics(),
              HasSubstr("loom_image_pulls_total{result=\"failed\"} 1\n"));
}

TEST_F(ImagePullTest, ABadRefusedFieldOrReasonIsNoCrash) {
  const AgentAction launch = StartContainerJob();
  Heartbeat(launch.node, {{{"task_id", launch.task_id},
                           {"state", "lost"},
                           {"refused", "yes"},
                           {"reason", 42}}});
  const json job = Job();
  // Not a refusal (the field is no boolean): lost, so restarted or failed
  // by the restart policy, as any lost task.
  EXPECT_NE(job["state"], "running");
}

TEST_F(ImagePullTest, NodesReportTheirImagesAndMalformedEntriesAreDropped) {
  Heartbeat("h200-0", json::array(),
            {{"images",
              {{{"digest", kPullDigest},
                {"refs", {"localhost:5000/team/train:1.4"}},
                {"bytes", 1000}},
               {{"digest", "sha256:nothex"}, {"bytes", 5}},
               "garbage",
               {{"digest", kPullDigest}, {"bytes", -3}, {"refs", 7}}}}});
  absl::StatusOr<json> images = c_->ListImages("h200-0");
  ASSERT_TRUE(images.ok()) << images.status();
  const json& node = (*images)["nodes"][0];
  EXPECT_EQ(node["node"], "h200-0");
  ASSERT_EQ(node["images"].size(), 2u);
  EXPECT_EQ(node["images"][0]["refs"][0], "localhost:5000/team/train:1.4");
  EXPECT_EQ(node["images"][1]["bytes"], 0);
  EXPECT_EQ(node["bytes"], 1000);
  // A heartbeat without the key leaves the list as it was.
  Heartbeat("h200-0", json::array());
  EXPECT_EQ((*c_->ListImages("h200-0"))["nodes"][0]["images"].size(), 2u);
  EXPECT_TRUE(absl::IsNotFound(c_->ListImages("nope").status()));
  EXPECT_EQ((*c_->ListImages(""))["nodes"].size(), 2u);
}

TEST_F(ImagePullTest, PullsAreAskedOfTheNodesNamedOrAPool) {
  const std::string pinned =
      std::string("localhost:5000/team/train@") + kPullDigest;
  EXPECT_TRUE(absl::IsInvalidArgument(
      c_->PullImage(pinned, "t:1", {"h200-9"}, "").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      c_->PullImage(pinned, "t:1", {}, "a100").status()));

  absl::StatusOr<json> asked = c_->PullImage(pinned, "t:1", {}, "");
  ASSERT_TRUE(asked.ok()) << asked.status();
  EXPECT_EQ((*asked)["nodes"], json({"h200-0", "h200-1"}));
  std::vector<AgentAction> actions = c_->TakeActions();
  ASSERT_EQ(actions.size(), 2u);
  EXPECT_EQ(actions[0].kind, AgentAction::Kind::kPullImage);
  EXPECT_EQ(actions[0].body["image"], pinned);
  // Until the agent says more: asked.
  json pulls = (*c_->ListImages("h200-0"))["nodes"][0]["pulls"];
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0]["phase"], "asked");
  // h200-0 holds it already (200); h200-1 cannot be reached.
  c_->ActionDone(actions[0], absl::OkStatus(), T(4), /*started=*/true);
  c_->ActionDone(actions[1], absl::UnavailableError("agent unreachable"), T(4));
  EXPECT_TRUE((*c_->ListImages("h200-0"))["nodes"][0]["pulls"].empty());
  pulls = (*c_->ListImages("h200-1"))["nodes"][0]["pulls"];
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0]["state"], "failed");
  EXPECT_THAT(pulls[0]["error"].get<std::string>(),
              HasSubstr("agent unreachable"));
  // The agent's own word replaces the server's.
  Heartbeat("h200-1", json::array(), {{"image_pulls", json::array()}});
  EXPECT_TRUE((*c_->ListImages("h200-1"))["nodes"][0]["pulls"].empty());
}

}  // namespace
}  // namespace loom
