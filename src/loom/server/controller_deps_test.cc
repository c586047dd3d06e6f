// Job dependencies in the controller (controller_deps.cc), with fake agents.

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using testing::MakeCluster;
using testing::T;

// A one-node job (8 GPUs) named `name` with `extra` YAML lines.
JobSpec DepJob(const std::string& extra = "",
               const std::string& name = "train") {
  return testing::Spec("name: " + name +
                       "\ncommand: [python3, train.py]\n"
                       "resources: {gpus: 8}\n" +
                       extra);
}

class DependencyTest : public ::testing::Test {
 protected:
  DependencyTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) { Make(); }
  void Make() {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  void RegisterAll(double t) {
    for (int n = 0; n < 2; ++n) {
      nlohmann::json gpus = nlohmann::json::array();
      for (int i = 0; i < 8; ++i) {
        gpus.push_back({{"index", i}, {"model", "h200"}});
      }
      auto r = c_->Register(
          {{"name", "h200-" + std::to_string(n)},
           {"address", "127.0.0." + std::to_string(n + 2) + ":7100"},
           {"gpus", gpus},
           {"emulated", true},
           {"tasks", nlohmann::json::array()}},
          T(t));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  JobId Submit(const JobSpec& spec, double t,
               const std::string& user = "alice") {
    auto j = c_->Submit(spec, user, T(t));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? (*j)["id"].get<JobId>() : 0;
  }
  // The launches of the last ticks, by job.
  std::vector<AgentAction> Launches() {
    std::vector<AgentAction> out;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind == AgentAction::Kind::kLaunch) out.push_back(std::move(a));
    }
    return out;
  }
  // The agent says the task of `launch` exited with `code`.
  void Exit(const AgentAction& launch, int code, double t) {
    auto r = c_->Heartbeat({{"name", launch.node},
                            {"tasks",
                             {{{"task_id", launch.task_id},
                               {"state", "exited"},
                               {"exit_code", code}}}}},
                           T(t));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  nlohmann::json Job(JobId id, double t = 100) {
    auto j = c_->GetJob(id, T(t));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : nlohmann::json();
  }
  std::string State(JobId id, double t = 100) { return Job(id, t)["state"]; }
  std::string Reason(JobId id, double t = 100) { return Job(id, t)["reason"]; }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(DependencyTest, AfterOkStartsOnlyOnceTheOtherSucceeded) {
  RegisterAll(1);
  const JobId a = Submit(DepJob(), 2);
  const JobId b = Submit(DepJob("dependency: afterok:1\n", "eval"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);  // a only, though b would fit too
  EXPECT_EQ(first[0].job, a);
  EXPECT_EQ(State(b, 3), "pending");
  EXPECT_EQ(Reason(b, 3), "waiting for job 1 (running) to succeed");
  EXPECT_EQ(Job(b, 3)["dependency"], "afterok:1");
  EXPECT_EQ(c_->ListJobs({}, T(3))["jobs"][1]["reason"],
            "waiting for job 1 (running) to succeed");
  c_->Tick(T(4));
  EXPECT_TRUE(Launches().empty());
  Exit(first[0], 0, 5);
  EXPECT_EQ(State(a, 5), "succeeded");
  c_->Tick(T(6));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, b);
  EXPECT_EQ(State(b, 6), "running");
}

TEST_F(DependencyTest, AfterAnyRunsAfterAFailure) {
  RegisterAll(1);
  Submit(DepJob(), 2);
  const JobId b = Submit(DepJob("dependency: afterany:1\n"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(Reason(b, 3), "waiting for job 1 (running) to end");
  Exit(first[0], 3, 4);
  c_->Tick(T(5));
  ASSERT_EQ(Launches().size(), 1u);
  EXPECT_EQ(State(b, 5), "running");
}

TEST_F(DependencyTest, AfterNotOkRunsAfterAFailureAndNeverAfterASuccess) {
  RegisterAll(1);
  Submit(DepJob(), 2);             // 1: fails
  Submit(DepJob("", "other"), 2);  // 2: succeeds
  const JobId c = Submit(DepJob("dependency: afternotok:1\n"), 2);
  const JobId d = Submit(DepJob("dependency: afternotok:2\n"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(Reason(c, 3), "waiting for job 1 (running) to fail");
  for (const AgentAction& a : first) Exit(a, a.job == 1 ? 1 : 0, 4);
  c_->Tick(T(5));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, c);
  EXPECT_EQ(State(d, 5), "pending");
  EXPECT_EQ(Reason(d, 5),
            "dependency never satisfied: job 2 succeeded (afternotok)");
  c_->Tick(T(6));
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(State(d, 6), "pending");
}

TEST_F(DependencyTest, AfterStartsOnceTheOtherStarted) {
  const JobId a = Submit(DepJob(), 1);
  const JobId b = Submit(DepJob("dependency: after:1\n"), 1);
  c_->Tick(T(2));  // no nodes yet
  EXPECT_EQ(Reason(b, 2), "waiting for job 1 to start");
  RegisterAll(3);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].job, a);
  c_->Tick(T(4));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, b);
  EXPECT_EQ(State(a, 4), "running");  // a still runs
}

TEST_F(DependencyTest, SingletonWaitsForEarlierJobsOfTheSameNameAndUser) {
  RegisterAll(1);
  const JobId a = Submit(DepJob(), 2);
  const JobId b = Submit(DepJob("dependency: singleton\n"), 2);
  const JobId bob = Submit(DepJob("dependency: singleton\n"), 2, "bob");
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 2u);  // a, and bob's job: another user
  EXPECT_EQ(State(bob, 3), "running");
  EXPECT_EQ(Reason(b, 3),
            "waiting for job 1 of the same name (running) to end (singleton)");
  for (const AgentAction& l : first) {
    if (l.job == a) Exit(l, 0, 4);
  }
  c_->Tick(T(5));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, b);
}

TEST_F(DependencyTest, NeverSatisfiedCancelsWithKillOnInvalidDep) {
  RegisterAll(1);
  Submit(DepJob(), 2);
  const JobId b =
      Submit(DepJob("dependency: afterok:1\nkill_on_invalid_dep: true\n"), 2);
  const JobId c = Submit(DepJob("dependency: afterok:2\n"), 2);
  const JobId d = Submit(DepJob("dependency: afterok:1\n"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);
  Exit(first[0], 2, 4);
  c_->Tick(T(5));
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(State(b, 5), "cancelled");
  EXPECT_EQ(Reason(b, 5), "dependency never satisfied: job 1 failed (afterok)");
  // c waited for b, which never succeeds now; without the flag it stays.
  EXPECT_EQ(State(c, 5), "pending");
  EXPECT_EQ(Reason(c, 5),
            "dependency never satisfied: job 2 was cancelled (afterok)");
  EXPECT_EQ(State(d, 5), "pending");
  EXPECT_EQ(Reason(d, 5), "dependency never satisfied: job 1 failed (afterok)");
  // It can still be cancelled.
  ASSERT_TRUE(c_->Cancel(d, T(6)).ok());
  EXPECT_EQ(State(d, 6), "cancelled");
}

TEST_F(DependencyTest, AnyOfSeveral) {
  RegisterAll(1);
  Submit(DepJob(), 2);
  Submit(DepJob("", "other"), 2);
  const JobId c = Submit(DepJob("dependency: afterok:1?afterok:2\n"), 2);
  const JobId d = Submit(DepJob("dependency: afterok:1,afterok:2\n"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(Reason(c, 3), "waiting for job 1 (running) to succeed (or 1 more)");
  EXPECT_EQ(Reason(d, 3),
            "waiting for job 1 (running) to succeed (and 1 more)");
  for (const AgentAction& a : first) {
    if (a.job == 2) Exit(a, 0, 4);
  }
  c_->Tick(T(5));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, c);
  EXPECT_EQ(Reason(d, 5), "waiting for job 1 (running) to succeed");
}

TEST_F(DependencyTest, UnknownJobIsRefused) {
  Submit(DepJob(), 1);
  auto j = c_->Submit(DepJob("dependency: afterok:1:42\n"), "alice", T(2));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(j.status().message(),
              HasSubstr("dependency: 'afterok:1:42': there is no job 42"));
  EXPECT_FALSE(store_.Get(JobKey(2)).ok());
}

TEST_F(DependencyTest, HeldJobWaitsForItsDependencyOnceReleased) {
  RegisterAll(1);
  Submit(DepJob(), 2);
  const JobId b = Submit(DepJob("dependency: afterok:1\nhold: true\n"), 2);
  c_->Tick(T(3));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);
  ASSERT_TRUE(c_->Release(b, T(4)).ok());
  c_->Tick(T(4));
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(Reason(b, 4), "waiting for job 1 (running) to succeed");
  Exit(first[0], 0, 5);
  c_->Tick(T(6));
  ASSERT_EQ(Launches().size(), 1u);
}

TEST_F(DependencyTest, WaitingJobStillWaitsAfterARestart) {
  const JobId a = Submit(DepJob(), 1);
  const JobId b = Submit(DepJob("dependency: afterok:1\n"), 1);
  c_->Tick(T(2));
  Make();  // a new controller over the same store
  EXPECT_EQ(State(b, 3), "pending");
  EXPECT_EQ(Reason(b, 3), "waiting for job 1 (pending) to succeed");
  RegisterAll(3);
  c_->Tick(T(4));
  std::vector<AgentAction> first = Launches();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].job, a);
  c_->Tick(T(5));
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(Reason(b, 5), "waiting for job 1 (running) to succeed");
  Exit(first[0], 0, 6);
  c_->Tick(T(7));
  std::vector<AgentAction> second = Launches();
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(second[0].job, b);
}

}  // namespace
}  // namespace loom
