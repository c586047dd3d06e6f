// The MIG launch step (mig_step.h) on an emulated H200 node of fake tasks:
// a MIG task sees only its instance (`CUDA_VISIBLE_DEVICES=MIG-...`), a
// share gets `LOOM_GPU_MEMORY_LIMIT`, a repartition under a running task is
// refused with nothing changed, malformed slices are refused naming their
// field, a whole-GPU task turns MIG mode off, a change of mode that waits
// is Aborted and asked again by the health rounds; the flag of the emulated
// MIG log, and the registration's `mig`.

#include "loom/agent/mig_step.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_command.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/emulated_mig_control.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/node_table.h"
#include "loom/agent/task_runner.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::BaseOptions;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::FakeServer;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

// A layout as the server sends it: [[name, start], ...] (built by hand:
// nlohmann makes a braced list of [string, x] pairs an object).
json L(const std::vector<std::pair<std::string, int>>& layout) {
  json out = json::array();
  for (const auto& [name, start] : layout) {
    out.push_back(json::array({name, start}));
  }
  return out;
}

json Seven1gLayout() {
  json layout = json::array();
  for (int s = 0; s < 7; ++s) layout.push_back(json::array({"1g.18gb", s}));
  return layout;
}

// A launch body of a task on part of GPU `gpu`.
json SliceBody(const std::string& id, int gpu, json slice) {
  return {{"task_id", id},
          {"job_id", 7},
          {"argv", json::array({"train"})},
          {"env", {{"LOOM_FAKE_SECONDS", "60"}, {"CUDA_VISIBLE_DEVICES", "0"}}},
          {"gpus", json::array({gpu})},
          {"slice", std::move(slice)}};
}

json Mig1g(int start) {
  return {{"mig", "1g.18gb"},
          {"profile", 0},
          {"start", start},
          {"layout", Seven1gLayout()}};
}

class MigStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"h200-0"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
    LaunchStepsOptions steps;
    steps.checkpoint_dirs = false;
    TaskRunnerOptions options;
    options.steps = DefaultLaunchSteps(steps);
    runner_ = std::make_unique<TaskRunner>(std::move(options), log_.log());
  }

  AgentNode& node() { return *nodes_->nodes().front(); }

  absl::StatusOr<json> Launch(const json& body) {
    field_.clear();
    absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(body, &field_);
    if (!r.ok()) return r.status();
    return runner_->Launch(node(), *r, &field_);
  }

  // The env of process 0 of `body` after every step.
  std::map<std::string, std::string> EnvAfterSteps(const json& body) {
    LaunchRequest r = ParseLaunchRequest(body).value();
    const LaunchSteps steps = DefaultLaunchSteps({});
    LaunchContext ctx{node(), r, log_.log(), std::nullopt, ""};
    std::string field;
    for (const auto& step : steps) {
      absl::Status s = step->Prepare(ctx, &field);
      EXPECT_TRUE(s.ok()) << s;
    }
    TaskProcess p;
    p.launcher_id = r.task_id;
    TaskSpec spec;
    spec.task_id = r.task_id;
    spec.argv = r.argv;
    spec.env = r.env;
    for (const auto& step : steps) step->Apply(ctx, p, 0, spec);
    return spec.env;
  }

  std::string UuidAt(int gpu, int start) {
    const std::vector<MigInstanceInfo> instances =
        node().mig->List(gpu).value();
    for (const MigInstanceInfo& in : instances) {
      if (in.start == start) return in.uuid;
    }
    return "";
  }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<TaskRunner> runner_;
  std::string field_;
};

TEST_F(MigStepTest, AMigTaskSeesOnlyItsInstance) {
  ASSERT_NE(node().mig, nullptr);
  const std::map<std::string, std::string> env =
      EnvAfterSteps(SliceBody("1.0.0", 2, Mig1g(3)));
  const std::string uuid = UuidAt(2, 3);
  ASSERT_TRUE(absl::StartsWith(uuid, "MIG-")) << uuid;
  // The request's own CUDA_VISIBLE_DEVICES=0 is overridden.
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), uuid);
  EXPECT_EQ(env.at("LOOM_MIG_PROFILE"), "1g.18gb");
  EXPECT_FALSE(env.contains("LOOM_GPU_MEMORY_LIMIT"));
  EXPECT_NE(UuidAt(2, 4), uuid);

  // A launch through the runner keeps the instance with the task.
  absl::StatusOr<json> launched = Launch(SliceBody("1.0.1", 2, Mig1g(5)));
  ASSERT_TRUE(launched.ok()) << launched.status();
  absl::MutexLock lock(&node().mu);
  EXPECT_EQ(node().units.at("1.0.1").mig_uuid, UuidAt(2, 5));
}

TEST_F(MigStepTest, AShareGetsItsMemoryLimit) {
  json body = SliceBody("2.0.0", 1, {{"share_bytes", 20 * int64_t{1} << 30}});
  body["env"]["CUDA_VISIBLE_DEVICES"] = "1";
  const std::map<std::string, std::string> env = EnvAfterSteps(body);
  EXPECT_EQ(env.at("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(env.at("LOOM_GPU_MEMORY_LIMIT"), "21474836480");
  EXPECT_FALSE(env.contains("LOOM_MIG_PROFILE"));
  EXPECT_FALSE(node().mig->Describe(1)->enabled);  // a share changes nothing
}

TEST_F(MigStepTest, RefusesARepartitionUnderARunningTask) {
  ASSERT_TRUE(Launch(SliceBody("3.0.0", 0, Mig1g(2))).ok());
  const std::vector<MigInstanceInfo> before = node().mig->List(0).value();
  ASSERT_EQ(before.size(), 7u);

  const json threeg = {{"mig", "3g.71gb"},
                       {"profile", 3},
                       {"start", 4},
                       {"layout", L({{"3g.71gb", 0}, {"3g.71gb", 4}})}};
  absl::StatusOr<json> refused = Launch(SliceBody("4.0.0", 0, threeg));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(field_, "slice");
  EXPECT_THAT(refused.status().message(), HasSubstr("task 3.0.0"));
  EXPECT_THAT(
      refused.status().message(),
      HasSubstr("would destroy MIG instance 1g.18gb at memory slice 2"));
  EXPECT_EQ(node().mig->List(0).value(), before);  // nothing changed
  {
    absl::MutexLock lock(&node().mu);
    EXPECT_FALSE(node().units.contains("4.0.0"));
  }

  // The same layout: another instance, beside the running task.
  absl::StatusOr<json> beside = Launch(SliceBody("5.0.0", 0, Mig1g(3)));
  ASSERT_TRUE(beside.ok()) << beside.status();
  EXPECT_EQ(node().mig->List(0).value(), before);
  // A layout that keeps 1g.18gb@2 (the running task's) may change the rest.
  const json keep = {
      {"mig", "3g.71gb"},
      {"profile", 3},
      {"start", 4},
      {"layout", L({{"1g.18gb", 2}, {"1g.18gb", 3}, {"3g.71gb", 4}})}};
  absl::StatusOr<json> around = Launch(SliceBody("6.0.0", 0, keep));
  ASSERT_TRUE(around.ok()) << around.status();
  EXPECT_EQ(UuidAt(0, 2), before[2].uuid);

  // A GPU a task uses whole cannot become MIG under it.
  json whole = SliceBody("7.0.0", 5, Mig1g(0));
  whole.erase("slice");
  ASSERT_TRUE(Launch(whole).ok());
  refused = Launch(SliceBody("8.0.0", 5, Mig1g(0)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("running task 7.0.0"));
  EXPECT_FALSE(node().mig->Describe(5)->enabled);
}

// A GPU that a MIG task of a dynamic pool left in MIG mode is turned back
// for a task that uses it whole, once no task runs in its instances.
TEST_F(MigStepTest, AWholeGpuTaskTurnsMigOff) {
  ASSERT_TRUE(Launch(SliceBody("10.0.0", 4, Mig1g(0))).ok());
  ASSERT_TRUE(node().mig->Describe(4)->enabled);
  json whole = SliceBody("11.0.0", 4, Mig1g(0));
  whole.erase("slice");
  absl::StatusOr<json> refused = Launch(whole);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(field_, "gpus");
  EXPECT_THAT(refused.status().message(),
              HasSubstr("GPU 4: turning MIG mode off would destroy MIG "
                        "instance 1g.18gb at memory slice 0"));
  EXPECT_TRUE(node().mig->Describe(4)->enabled);

  ASSERT_TRUE(runner_->Stop(node(), "10.0.0", 9, absl::ZeroDuration()).ok());
  ASSERT_TRUE(WaitFor([&] {
    runner_->Poll(node());
    absl::MutexLock lock(&node().mu);
    const TaskUnit& u = node().units.at("10.0.0");
    return std::all_of(u.procs.begin(), u.procs.end(),
                       [](const TaskProcess& p) { return p.ended(); });
  }));
  absl::StatusOr<json> launched = Launch(whole);
  ASSERT_TRUE(launched.ok()) << launched.status();
  const MigState state = node().mig->Describe(4).value();
  EXPECT_FALSE(state.enabled);
  EXPECT_THAT(state.instances, ::testing::IsEmpty());
  EXPECT_EQ(log_.LinesWith("GPU 4: MIG mode turned off for task 11.0.0"), 1);
  // GPUs never in MIG mode are left alone.
  json other = whole;
  other["task_id"] = "12.0.0";
  other["gpus"] = json::array({5, 6});
  ASSERT_TRUE(Launch(other).ok());
  EXPECT_EQ(node().mig_waits.load(), 0u);
}

// A change of MIG mode that waits (another process holds the GPU open) is
// not the task's fault: Aborted (503), the GPU noted in `mig_waits` until a
// health round finds the change made.
TEST_F(MigStepTest, AModeChangeThatWaitsIsAbortedAndAskedAgain) {
  auto* mig = dynamic_cast<EmulatedMigControl*>(node().mig.get());
  ASSERT_NE(mig, nullptr);
  ASSERT_TRUE(mig->Hold(2, true).ok());
  absl::StatusOr<json> waits = Launch(SliceBody("20.0.0", 2, Mig1g(3)));
  EXPECT_EQ(waits.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(field_, "slice");
  EXPECT_THAT(waits.status().message(),
              HasSubstr("node h200-0: GPU 2: MIG mode must be turned on for "
                        "this task, and the change waits"));
  EXPECT_EQ(node().mig_waits.load(), 1u << 2);
  {
    absl::MutexLock lock(&node().mu);
    EXPECT_FALSE(node().units.contains("20.0.0"));
  }
  // Still held: a round asks again, and it still waits.
  EXPECT_FALSE(SettleMigModes(node(), log_.log()));
  EXPECT_EQ(node().mig_waits.load(), 1u << 2);
  // Let go: the next round makes the change and forgets the GPU.
  ASSERT_TRUE(mig->Hold(2, false).ok());
  EXPECT_TRUE(SettleMigModes(node(), log_.log()));
  EXPECT_EQ(node().mig_waits.load(), 0u);
  EXPECT_TRUE(node().mig->Describe(2)->enabled);
  EXPECT_EQ(log_.LinesWith("GPU 2: MIG mode is on now"), 1);
  ASSERT_TRUE(Launch(SliceBody("21.0.0", 2, Mig1g(3))).ok());

  // Turning it off for a whole-GPU task may wait too (field `gpus`).
  ASSERT_TRUE(runner_->Stop(node(), "21.0.0", 9, absl::ZeroDuration()).ok());
  ASSERT_TRUE(WaitFor([&] {
    runner_->Poll(node());
    absl::MutexLock lock(&node().mu);
    const TaskUnit& u = node().units.at("21.0.0");
    return std::all_of(u.procs.begin(), u.procs.end(),
                       [](const TaskProcess& p) { return p.ended(); });
  }));
  ASSERT_TRUE(mig->Hold(2, true).ok());
  json whole = SliceBody("22.0.0", 2, Mig1g(0));
  whole.erase("slice");
  waits = Launch(whole);
  EXPECT_EQ(waits.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(field_, "gpus");
  EXPECT_THAT(waits.status().message(), HasSubstr("must be turned off"));
  EXPECT_EQ(node().mig_waits.load(), 1u << 2);
  // A reset by hand: the next round sees it done.
  ASSERT_TRUE(mig->Reset(2).ok());
  EXPECT_TRUE(SettleMigModes(node(), log_.log()));
  EXPECT_FALSE(node().mig->Describe(2)->enabled);
  EXPECT_TRUE(Launch(whole).ok());
}

TEST_F(MigStepTest, MalformedSlicesAreRefusedNamingTheField) {
  struct Case {
    json slice;
    std::vector<int> gpus;
    std::string field;
  };
  const json layout = Seven1gLayout();
  const std::vector<Case> cases = {
      {"1g.18gb", {0}, "slice"},
      {json::object(), {0}, "slice"},
      {{{"share_bytes", 5}, {"mig", "1g.18gb"}}, {0}, "slice"},
      {{{"share_bytes", 0}}, {0}, "slice.share_bytes"},
      {{{"share_bytes", "5Gi"}}, {0}, "slice.share_bytes"},
      {{{"mig", 3}, {"profile", 0}, {"start", 0}, {"layout", layout}},
       {0},
       "slice.mig"},
      {{{"mig", "1g.18gb"}, {"start", 0}, {"layout", layout}},
       {0},
       "slice.profile"},
      {{{"mig", "1g.18gb"}, {"profile", 0}, {"start", 8}, {"layout", layout}},
       {0},
       "slice.start"},
      {{{"mig", "1g.18gb"}, {"profile", 0}, {"start", 0}, {"layout", "7x1g"}},
       {0},
       "slice.layout"},
      {{{"mig", "1g.18gb"},
        {"profile", 0},
        {"start", 0},
        {"layout", json::array({json::array({"1g.18gb"})})}},
       {0},
       "slice.layout[0]"},
      {{{"mig", "1g.18gb"},
        {"profile", 0},
        {"start", 0},
        {"layout", L({{"1g.18gb", 1}})}},
       {0},
       "slice.layout"},  // lacks the task's own instance
      {Mig1g(0), {0, 1}, "slice"},
      {Mig1g(0), {}, "slice"},
  };
  for (const Case& c : cases) {
    json body = SliceBody("9.0.0", 0, c.slice);
    body["gpus"] = c.gpus;
    std::string field;
    absl::StatusOr<LaunchRequest> r = ParseLaunchRequest(body, &field);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << c.slice.dump();
    EXPECT_EQ(field, c.field) << c.slice.dump() << ": " << r.status();
  }

  // Well-formed, but not what this GPU has.
  const std::vector<std::pair<json, std::string>> against_gpu = {
      {{{"mig", "1g.18gb"}, {"profile", 1}, {"start", 0}, {"layout", layout}},
       "slice.profile"},
      {{{"mig", "1g.10gb"},
        {"profile", 0},
        {"start", 0},
        {"layout", L({{"1g.10gb", 0}})}},
       "slice.profile"},
      {{{"mig", "1g.18gb"},
        {"profile", 0},
        {"start", 0},
        {"layout", L({{"1g.18gb", 0}, {"1g.10gb", 1}})}},
       "slice.layout[1]"},
      {{{"mig", "1g.18gb"},
        {"profile", 0},
        {"start", 0},
        {"layout", L({{"1g.18gb", 0}, {"7g.141gb", 0}})}},
       "slice.layout"},
  };
  for (const auto& [slice, field] : against_gpu) {
    absl::StatusOr<json> r = Launch(SliceBody("9.0.1", 0, slice));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument)
        << slice.dump();
    EXPECT_EQ(field_, field) << slice.dump() << ": " << r.status();
  }
  EXPECT_FALSE(node().mig->Describe(0)->enabled);
}

TEST(MigUuidOfProcessTest, ReadsTheEnvironmentOfAProcess) {
  TempDir proc;
  const std::string dir = absl::StrCat(proc.path(), "/42");
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  {
    std::ofstream out(absl::StrCat(dir, "/environ"), std::ios::binary);
    out << std::string("A=1\0CUDA_VISIBLE_DEVICES=MIG-abc,MIG-def\0B=2\0", 44);
  }
  EXPECT_EQ(MigUuidOfProcess(42, proc.path()), "MIG-abc");
  EXPECT_EQ(MigUuidOfProcess(43, proc.path()), "");
  {
    std::ofstream out(absl::StrCat(dir, "/environ"), std::ios::binary);
    out << std::string("CUDA_VISIBLE_DEVICES=0,1\0", 25);
  }
  EXPECT_EQ(MigUuidOfProcess(42, proc.path()), "");
}

TEST(MigFlagsTest, EmulateMigLogNeedsEmulate) {
  AgentFlags f;
  f.servers = "127.0.0.1:7000";
  f.listen = "127.0.0.2:0";
  f.data_dir = "/tmp/x";
  f.emulate_mig_log = "/tmp/mig.log";
  EXPECT_FALSE(AgentOptionsFromFlags(f).ok());
  f.emulate = "8xH200";
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->emulation->mig_log, "/tmp/mig.log");
}

TEST(MigInventoryTest, TheRegistrationSaysEachGpusMig) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registration_count("h200-0"); }));
  const json r = server.registrations().front();
  ASSERT_EQ(r["gpus"].size(), 8u);
  for (const json& g : r["gpus"]) {
    EXPECT_EQ(g["mig"], json::parse(R"({"capable": true, "mode": "disabled",
        "pending": "disabled", "instances": []})"))
        << g.dump();
  }
}

}  // namespace
}  // namespace loom
