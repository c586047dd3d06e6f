// The launch steps (launch_steps.h) on an emulated node, without a runner:
// `Prepare` once per task, then `Apply` for each process, as `TaskRunner`
// does, and the specs they make.

#include "loom/agent/launch_steps.h"

#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/node_table.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/user_account.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The specs of `r`'s processes on `node` after every step: what
// `TaskRunner::Launch` gives the launcher.
absl::StatusOr<std::vector<TaskSpec>> RunSteps(const LaunchSteps& steps,
                                               const AgentNode& node,
                                               const LaunchRequest& r,
                                               const AgentLog& log,
                                               std::string* field) {
  LaunchContext ctx{node, r, log, std::nullopt, ""};
  for (const auto& step : steps) {
    if (absl::Status s = step->Prepare(ctx, field); !s.ok()) return s;
  }
  std::vector<TaskSpec> specs;
  for (int k = 0; k < r.processes; ++k) {
    TaskProcess p;
    p.launcher_id = absl::StrCat(r.task_id, ".p", k);
    p.stdout_path = TaskLogPath(node, r.task_id, k, false);
    p.stderr_path = TaskLogPath(node, r.task_id, k, true);
    TaskSpec spec;
    spec.task_id = p.launcher_id;
    spec.argv = r.argv;
    spec.env = r.env;
    spec.working_dir = r.working_dir;
    for (const auto& step : steps) step->Apply(ctx, p, k, spec);
    specs.push_back(std::move(spec));
  }
  return specs;
}

LaunchStepsOptions Options(bool checkpoint_dirs) {
  LaunchStepsOptions o;
  o.checkpoint_dirs = checkpoint_dirs;
  return o;
}

LaunchRequest Request(int processes) {
  LaunchRequest r;
  r.task_id = "42.0.1";
  r.job_id = 42;
  r.task_index = 1;
  r.argv = {"python3", "train.py"};
  r.gpus = {0, 1};
  r.processes = processes;
  return r;
}

class LaunchStepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"h200-0"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
  }
  const AgentNode& node() const { return *nodes_->nodes().front(); }

  // Runs `r` through the default steps with `options` (no checkpoint
  // directories unless asked for).
  absl::StatusOr<std::vector<TaskSpec>> Run(
      const LaunchRequest& r, LaunchStepsOptions options = Options(false)) {
    if (options.server_urls.empty()) {
      options.server_urls = {"http://a:7000", "http://b:7000"};
    }
    field_.clear();
    return RunSteps(DefaultLaunchSteps(options), node(), r, log_.log(),
                    &field_);
  }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
  std::string field_;
};

TEST_F(LaunchStepsTest, StepsInOrder) {
  std::vector<std::string> names;
  for (const auto& step : DefaultLaunchSteps({})) {
    names.emplace_back(step->name());
  }
  EXPECT_THAT(names, ElementsAre("files", "env", "port", "gpus", "mig", "nics",
                                 "limits", "user", "checkpoint", "self", "data",
                                 "image"));
}

TEST_F(LaunchStepsTest, LoomIsTheAgentsOwnBinary) {
  LaunchRequest r = Request(1);
  r.argv = {"loom", "_batch", "--ntasks=1"};
  LaunchStepsOptions options = Options(false);
  options.self_exe = "/opt/loom/bin/loom";
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_THAT((*specs)[0].argv,
              ElementsAre("/opt/loom/bin/loom", "_batch", "--ntasks=1"));
  // Only exactly "loom": a path or another program is left alone.
  r.argv = {"/usr/bin/loom", "x"};
  specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].argv[0], "/usr/bin/loom");
  // Not known: looked up on PATH as any program.
  r.argv = {"loom", "x"};
  specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].argv[0], "loom");
}

TEST_F(LaunchStepsTest, SeveralProcessesGetTheEnvContract) {
  LaunchRequest r = Request(2);
  r.env = {{"WORLD_SIZE", "4"}, {"RANK", "99"}, {"MASTER_ADDR", "h200-3"}};
  r.limits.memory_bytes = 1 << 30;
  r.limits.cpu_millis = 1500;
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 2u);
  for (int k = 0; k < 2; ++k) {
    const TaskSpec& spec = (*specs)[k];
    EXPECT_EQ(spec.env.at("RANK"), absl::StrCat(k)) << k;  // the agent's
    EXPECT_EQ(spec.env.at("LOCAL_RANK"), absl::StrCat(k));
    EXPECT_EQ(spec.env.at("LOCAL_WORLD_SIZE"), "2");
    EXPECT_EQ(spec.env.at("WORLD_SIZE"), "4");
    EXPECT_EQ(spec.env.at("MASTER_ADDR"), "h200-3");
    EXPECT_EQ(spec.env.at("CUDA_VISIBLE_DEVICES"), "0,1");
    EXPECT_EQ(spec.env.at("LOOM_NODE"), "h200-0");
    EXPECT_EQ(spec.env.at("LOOM_SERVER"), "http://a:7000,http://b:7000");
    EXPECT_EQ(spec.stdout_path, TaskLogPath(node(), "42.0.1", k, false));
    EXPECT_EQ(spec.stderr_path, TaskLogPath(node(), "42.0.1", k, true));
    EXPECT_EQ(spec.limits.memory_bytes, 1 << 30);
    EXPECT_EQ(spec.limits.cpu_millis, 1500);
    EXPECT_FALSE(spec.uid.has_value());
    EXPECT_EQ(spec.working_dir, "");
    EXPECT_TRUE(spec.create_dirs.empty());
  }
  EXPECT_EQ((*specs)[1].stdout_path, node().logs_dir + "/42.0.1.p1.out");
}

TEST_F(LaunchStepsTest, RankBase) {
  LaunchRequest r = Request(1);
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  // One process without a rank base: no ranks, no local world.
  for (const char* key : {"RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE"}) {
    EXPECT_FALSE((*specs)[0].env.contains(key)) << key;
  }
  r.rank_base = 4;
  specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].env.at("RANK"), "4");
  EXPECT_EQ((*specs)[0].env.at("LOCAL_RANK"), "0");
  EXPECT_FALSE((*specs)[0].env.contains("LOCAL_WORLD_SIZE"));
  r.processes = 3;
  specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[2].env.at("RANK"), "6");
  EXPECT_EQ((*specs)[2].env.at("LOCAL_RANK"), "2");
  EXPECT_EQ((*specs)[2].env.at("LOCAL_WORLD_SIZE"), "3");
}

TEST_F(LaunchStepsTest, TheRequestsOwnEnvWins) {
  LaunchRequest r = Request(2);
  r.env = {{"CUDA_VISIBLE_DEVICES", "7"},
           {"LOOM_NODE", "mine"},
           {"LOOM_SERVER", "http://elsewhere:1"},
           {"LOCAL_WORLD_SIZE", "16"}};
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  for (const TaskSpec& spec : *specs) {
    EXPECT_EQ(spec.env.at("CUDA_VISIBLE_DEVICES"), "7");
    EXPECT_EQ(spec.env.at("LOOM_NODE"), "mine");
    EXPECT_EQ(spec.env.at("LOOM_SERVER"), "http://elsewhere:1");
    EXPECT_EQ(spec.env.at("LOCAL_WORLD_SIZE"), "16");
  }
  // A task given no GPUs sees none.
  r = Request(1);
  r.gpus.clear();
  specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].env.at("CUDA_VISIBLE_DEVICES"), "");
}

TEST_F(LaunchStepsTest, AGpuBeyondTheNodesFailsPrepare) {
  LaunchRequest r = Request(1);
  r.gpus = {0, 8};
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r);
  EXPECT_TRUE(absl::IsInvalidArgument(specs.status())) << specs.status();
  EXPECT_EQ(field_, "gpus");
  EXPECT_EQ(specs.status().message(),
            "gpus: node h200-0 has 8 GPUs (indices 0 to 7); got 8");
  r.gpus = {7};
  EXPECT_TRUE(Run(r).ok());
  EXPECT_EQ(field_, "");
}

TEST_F(LaunchStepsTest, AnUnknownUserFailsPrepare) {
  LaunchStepsOptions options = Options(false);
  options.switch_users = true;
  options.lookup_user =
      [](const std::string& name) -> absl::StatusOr<UserAccount> {
    if (name == "broken") return absl::UnavailableError("NSS is down");
    return absl::NotFoundError("no such user");
  };
  LaunchRequest r = Request(1);
  r.user = "bob";
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r, options);
  EXPECT_TRUE(absl::IsFailedPrecondition(specs.status())) << specs.status();
  EXPECT_EQ(field_, "user");
  EXPECT_EQ(specs.status().message(),
            "user 'bob' does not exist on node h200-0");
  EXPECT_EQ(log_.LinesWith("launch of task 42.0.1 failed: user 'bob' does "
                           "not exist on node h200-0"),
            1);

  r.user = "broken";
  specs = Run(r, options);
  EXPECT_TRUE(absl::IsUnavailable(specs.status())) << specs.status();
  EXPECT_EQ(field_, "user");
  EXPECT_THAT(std::string(specs.status().message()),
              HasSubstr("cannot look up user 'broken': NSS is down"));
}

TEST_F(LaunchStepsTest, AKnownUserRunsTheProcesses) {
  const std::string home = dir_.path() + "/home/alice";
  ASSERT_TRUE(fs::create_directories(home));
  std::atomic<int> lookups{0};
  LaunchStepsOptions options = Options(false);
  options.switch_users = true;
  options.lookup_user =
      [&](const std::string& name) -> absl::StatusOr<UserAccount> {
    lookups.fetch_add(1);
    if (name != "alice") return absl::NotFoundError("no such user");
    return UserAccount{"alice", 1234, 5678, home};
  };
  LaunchRequest r = Request(2);
  r.user = "alice";
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ(lookups.load(), 1);  // once per task
  for (const TaskSpec& spec : *specs) {
    EXPECT_EQ(spec.uid, std::optional<uid_t>(1234));
    EXPECT_EQ(spec.gid, std::optional<gid_t>(5678));
    EXPECT_EQ(spec.env.at("HOME"), home);
    EXPECT_EQ(spec.env.at("USER"), "alice");
    EXPECT_EQ(spec.env.at("LOGNAME"), "alice");
    EXPECT_EQ(spec.working_dir, home);  // none given: the home
  }
  r.working_dir = "/scratch/run";
  specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_EQ((*specs)[0].working_dir, "/scratch/run");

  // A request that names no user runs as the agent.
  r.user.clear();
  specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_FALSE((*specs)[0].uid.has_value());
  EXPECT_FALSE((*specs)[0].env.contains("USER"));
  // An agent that does not switch users looks nobody up.
  r.user = "bob";
  options.switch_users = false;
  specs = Run(r, options);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_FALSE((*specs)[0].uid.has_value());
  EXPECT_EQ(lookups.load(), 2);
}

TEST_F(LaunchStepsTest, CheckpointDirectories) {
  // The job's own: each process makes it.
  LaunchRequest r = Request(2);
  r.env = {{"LOOM_CHECKPOINT_DIR", "/ckpt/30"}};
  absl::StatusOr<std::vector<TaskSpec>> specs = Run(r, Options(true));
  ASSERT_TRUE(specs.ok()) << specs.status();
  for (const TaskSpec& spec : *specs) {
    EXPECT_EQ(spec.env.at("LOOM_CHECKPOINT_DIR"), "/ckpt/30");
    EXPECT_EQ(spec.create_dirs, std::vector<std::string>{"/ckpt/30"});
  }
  EXPECT_FALSE(fs::exists(node().root + "/checkpoints"));

  // Else one on the node, made at once.
  r.env.clear();
  specs = Run(r, Options(true));
  ASSERT_TRUE(specs.ok()) << specs.status();
  const std::string dir = node().root + "/checkpoints/42";
  for (const TaskSpec& spec : *specs) {
    EXPECT_EQ(spec.env.at("LOOM_CHECKPOINT_DIR"), dir);
    EXPECT_TRUE(spec.create_dirs.empty());
  }
  EXPECT_TRUE(fs::is_directory(dir));

  // None when the agent makes none (fake tasks), or for a job id below 1.
  specs = Run(r);
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_FALSE((*specs)[0].env.contains("LOOM_CHECKPOINT_DIR"));
  r.job_id = 0;
  specs = Run(r, Options(true));
  ASSERT_TRUE(specs.ok()) << specs.status();
  EXPECT_FALSE((*specs)[0].env.contains("LOOM_CHECKPOINT_DIR"));
}

}  // namespace
}  // namespace loom
