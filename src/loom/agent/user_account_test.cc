// Tasks run as the user of their job (user_account.h, the user launch
// step), through a whole agent with a fake user database, and the passwd
// lookup itself.

#include "loom/agent/user_account.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/fake_task_launcher.h"
#include "loom/agent/task_launcher.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using ::testing::HasSubstr;

// Records the spec of every launch and passes it on.
class RecordingLauncher : public TaskLauncher {
 public:
  explicit RecordingLauncher(std::unique_ptr<TaskLauncher> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override {
    {
      absl::MutexLock lock(&mu_);
      specs_.push_back(spec);
    }
    return inner_->Launch(spec);
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

  std::vector<TaskSpec> specs() const {
    absl::MutexLock lock(&mu_);
    return specs_;
  }

 private:
  std::unique_ptr<TaskLauncher> inner_;
  mutable absl::Mutex mu_;
  std::vector<TaskSpec> specs_ ABSL_GUARDED_BY(mu_);
};

// An agent that may switch users (as if root), with a fake user database
// ("alice": uid 1234, gid 5678) and a launcher that records specs and runs
// nothing.
struct RunAsUserAgent {
  RunAsUserAgent(const FakeServer& server, const std::string& dir,
                 std::function<void(AgentOptions&)> adjust = nullptr) {
    AgentOptions options = BaseOptions(server, dir);
    options.can_switch_users = true;
    options.lookup_user =
        [this](const std::string& name) -> absl::StatusOr<UserAccount> {
      lookups.fetch_add(1);
      if (name == "broken") return absl::UnavailableError("NSS is down");
      if (name != "alice") return absl::NotFoundError("no such user");
      return UserAccount{"alice", 1234, 5678, "/nonexistent/home/alice"};
    };
    options.launcher_factory = [this](const std::string&, const std::string&)
        -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
      auto recording = std::make_unique<RecordingLauncher>(
          std::make_unique<FakeTaskLauncher>(FakeTaskLauncherOptions{}));
      launcher = recording.get();
      return recording;
    };
    options.log = [this](const std::string& line) {
      absl::MutexLock lock(&mu);
      log.push_back(line);
    };
    if (adjust) adjust(options);
    agent = StartAgent(std::move(options));
  }

  int LogLinesWith(const std::string& text) {
    absl::MutexLock lock(&mu);
    return static_cast<int>(
        std::count_if(log.begin(), log.end(), [&](const std::string& line) {
          return absl::StrContains(line, text);
        }));
  }

  std::atomic<int> lookups{0};
  RecordingLauncher* launcher = nullptr;
  absl::Mutex mu;
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  // Last, so that it is destroyed first: its threads log into `log` and
  // count `lookups` until it stops.
  std::unique_ptr<Agent> agent;
};

TEST(AgentTest, RunsTasksAsTheUserOfTheirJob) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path());
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  json body =
      Launch("30.0.0", {"/bin/true"}, {{"LOOM_CHECKPOINT_DIR", "/ckpt/30"}}, 2);
  body["user"] = "alice";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  std::vector<TaskSpec> specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 2u);
  for (const TaskSpec& spec : specs) {
    EXPECT_EQ(spec.uid, std::optional<uid_t>(1234));
    EXPECT_EQ(spec.gid, std::optional<gid_t>(5678));
    EXPECT_EQ(spec.env.at("HOME"), "/nonexistent/home/alice");
    EXPECT_EQ(spec.env.at("USER"), "alice");
    EXPECT_EQ(spec.env.at("LOGNAME"), "alice");
    // The home directory does not exist here.
    EXPECT_EQ(spec.working_dir, "/");
    EXPECT_EQ(spec.create_dirs, std::vector<std::string>{"/ckpt/30"});
  }

  // What the job sets wins; a working directory is kept.
  body = Launch("30.0.1", {"/bin/true"}, {{"HOME", "/scratch/alice"}});
  body["user"] = "alice";
  body["working_dir"] = "/scratch/alice/run";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[2].env.at("HOME"), "/scratch/alice");
  EXPECT_EQ(specs[2].working_dir, "/scratch/alice/run");
  EXPECT_TRUE(specs[2].create_dirs.empty());

  // A launch that names no user (an older server) runs as the agent.
  res = client.Post("/v1/tasks", Launch("30.0.2", {"/bin/true"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_FALSE(specs[3].uid.has_value());
  EXPECT_FALSE(specs[3].env.contains("USER"));
  EXPECT_EQ(a.LogLinesWith("not running as root"), 0);
}

TEST(AgentTest, AnUnknownUserFailsTheLaunchWithAClearReason) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path());
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  json body = Launch("31.0.0", {"/bin/true"});
  body["user"] = "bob";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["field"], "user");
  EXPECT_EQ(error["message"], "user 'bob' does not exist on node h200-0");
  EXPECT_TRUE(a.launcher->specs().empty());
  res = client.Get("/v1/tasks/31.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(a.LogLinesWith("user 'bob' does not exist on node h200-0"), 1);

  // A user database that cannot be read is the agent's problem: 500.
  body["user"] = "broken";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_THAT(res->body, HasSubstr("cannot look up user 'broken'"));
  EXPECT_THAT(res->body, HasSubstr("NSS is down"));

  // The task id is still free.
  body["user"] = "alice";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;

  body["user"] = 7;
  body["task_id"] = "31.0.1";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"]["field"], "user");
}

TEST(AgentTest, WithoutRootTasksRunAsTheAgentsUser) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path(),
                   [](AgentOptions& o) { o.can_switch_users = false; });
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  for (const char* id : {"32.0.0", "32.0.1"}) {
    json body = Launch(id, {"/bin/true"});
    body["user"] = "bob";  // not even looked up
    httplib::Result res = client.Post("/v1/tasks", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 201) << res->body;
  }
  ASSERT_EQ(a.launcher->specs().size(), 2u);
  EXPECT_FALSE(a.launcher->specs()[0].uid.has_value());
  EXPECT_EQ(a.lookups.load(), 0);
  EXPECT_EQ(a.LogLinesWith("not running as root: tasks run as uid"), 1);

  // Turned off (--run-as-user=false): no switch and nothing to say.
  TempDir dir2;
  RunAsUserAgent off(server, dir2.path(),
                     [](AgentOptions& o) { o.run_as_user = false; });
  ASSERT_NE(off.agent, nullptr);
  AgentClient client2(*off.agent);
  json body = Launch("33.0.0", {"/bin/true"});
  body["user"] = "bob";
  httplib::Result res = client2.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(off.lookups.load(), 0);
  EXPECT_EQ(off.LogLinesWith("not running as root"), 0);
}

TEST(AgentTest, FakeTasksIgnoreTheUser) {
  FakeServer server;
  TempDir dir;
  std::atomic<int> lookups{0};
  AgentOptions options = BaseOptions(server, dir.path());
  options.fake_tasks = true;
  options.can_switch_users = true;
  options.lookup_user = [&](const std::string&) -> absl::StatusOr<UserAccount> {
    lookups.fetch_add(1);
    return absl::NotFoundError("no such user");
  };
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  json body = Launch("34.0.0", {"train"}, {{"LOOM_FAKE_SECONDS", "1"}});
  body["user"] = "bob";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(lookups.load(), 0);
}

TEST(UserAccountTest, LooksUpThePasswdDatabase) {
  absl::StatusOr<UserAccount> root = LookUpSystemUser("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->gid, 0u);
  EXPECT_EQ(root->name, "root");
  EXPECT_FALSE(root->home.empty());
  EXPECT_TRUE(
      absl::IsNotFound(LookUpSystemUser("loom-no-such-user-xyz").status()));
}

}  // namespace
}  // namespace loom
