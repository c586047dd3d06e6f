// Job arrays in the controller (controller_arrays.cc), with fake agents.

#include <map>
#include <set>
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

JobSpec ArrayJob(const std::string& array, const std::string& extra = "") {
  return testing::Spec(
      "name: sweep\ncommand: [python3, point.py]\n"
      "resources: {gpus: 1}\narray: \"" +
      array + "\"\n" + extra);
}

class ArrayTest : public ::testing::Test {
 protected:
  ArrayTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) { Make(); }
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
      nlohmann::json tasks = nlohmann::json::array();
      for (const auto& [id, a] : live_) {
        if (a.node != "h200-" + std::to_string(n)) continue;
        tasks.push_back({{"task_id", id}, {"state", "running"}});
      }
      auto r = c_->Register(
          {{"name", "h200-" + std::to_string(n)},
           {"address", "127.0.0." + std::to_string(n + 2) + ":7100"},
           {"gpus", gpus},
           {"emulated", true},
           {"tasks", tasks}},
          T(t));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  JobId Submit(const JobSpec& spec, double t) {
    auto j = c_->Submit(spec, "alice", T(t));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? (*j)["id"].get<JobId>() : 0;
  }
  // A tick, and the launches it sent (kept as live tasks).
  std::vector<AgentAction> Tick(double t) {
    c_->Tick(T(t));
    std::vector<AgentAction> out;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind != AgentAction::Kind::kLaunch) continue;
      live_[a.task_id] = a;
      out.push_back(std::move(a));
    }
    return out;
  }
  // Every live task reports; those in `exits` exited with their code.
  void Report(const std::map<std::string, int>& exits, double t) {
    for (const std::string node : {"h200-0", "h200-1"}) {
      nlohmann::json tasks = nlohmann::json::array();
      for (const auto& [id, a] : live_) {
        if (a.node != node) continue;
        auto e = exits.find(id);
        if (e == exits.end()) {
          tasks.push_back({{"task_id", id}, {"state", "running"}});
        } else {
          tasks.push_back(
              {{"task_id", id}, {"state", "exited"}, {"exit_code", e->second}});
        }
      }
      auto r = c_->Heartbeat({{"name", node}, {"tasks", tasks}}, T(t));
      ASSERT_TRUE(r.ok()) << r.status();
    }
    for (const auto& [id, code] : exits) live_.erase(id);
  }
  nlohmann::json Job(JobId id, double t = 100) {
    auto j = c_->GetJob(id, T(t));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? *j : nlohmann::json();
  }
  std::string State(JobId id, double t = 100) { return Job(id, t)["state"]; }
  static std::string Index(const AgentAction& a) {
    return a.body["env"].value("LOOM_ARRAY_TASK_ID", "");
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
  std::map<std::string, AgentAction> live_;  // by task id
};

TEST_F(ArrayTest, MaxRunningCapsElementsAndEveryIndexRunsOnce) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-19%3"), 2);
  EXPECT_EQ(Job(a, 2)["array"]["elements"], 20);
  std::multiset<std::string> seen;
  double t = 3;
  size_t most = 0;
  for (int round = 0; round < 20 && State(a, t) != "succeeded"; ++round) {
    std::vector<AgentAction> started = Tick(t);
    for (const AgentAction& l : started) {
      seen.insert(Index(l));
      EXPECT_EQ(l.body["env"]["LOOM_ARRAY_JOB_ID"], std::to_string(a));
      EXPECT_EQ(l.body["env"]["LOOM_ARRAY_TASK_COUNT"], "20");
    }
    most = std::max(most, live_.size());
    EXPECT_LE(live_.size(), 3u);
    if (round == 0) {
      ASSERT_EQ(started.size(), 3u);
      // The queue shows the array once, by its pending indices, and the
      // three running elements by name.
      nlohmann::json jobs = c_->ListJobs({}, T(t))["jobs"];
      ASSERT_EQ(jobs.size(), 4u);
      EXPECT_EQ(jobs[0]["array"]["pending"], "3-19");
      EXPECT_THAT(jobs[0]["reason"].get<std::string>(),
                  HasSubstr("array limit: 3"));
      EXPECT_EQ(jobs[1]["display_id"], absl::StrCat(a, "_0"));
    }
    std::map<std::string, int> exits;
    for (const auto& [id, l] : live_) exits[id] = 0;
    Report(exits, t + 0.5);
    t += 1;
  }
  Tick(t);
  EXPECT_EQ(most, 3u);
  EXPECT_EQ(State(a, t), "succeeded");
  ASSERT_EQ(seen.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(seen.count(std::to_string(i)), 1u);
  EXPECT_EQ(Job(a, t)["array"]["succeeded"], 20);
  // Ids after the array's: its elements took theirs.
  EXPECT_EQ(Submit(testing::Spec("name: x\ncommand: [true]\n"), t), a + 21);
}

TEST_F(ArrayTest, TenThousandElementsAreOneRecordAndOneWindowQueued) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-9999"), 2);
  auto records = store_.List("/jobs/");
  ASSERT_TRUE(records.ok());
  EXPECT_EQ(records->size(), 1u);
  Tick(3);
  EXPECT_EQ(live_.size(), 16u);  // 16 GPUs
  // Only a window waits in the scheduler, never all 10,000.
  EXPECT_LE(c_->CurrentUtilization().pending_jobs, 256);
  EXPECT_EQ(Job(a, 3)["array"]["pending_count"], 10000 - 16);
  // An element not made yet is found by name, pending.
  absl::StatusOr<JobId> e = c_->ResolveJobRef(absl::StrCat(a, "_9000"));
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(*e, a + 1 + 9000);
  EXPECT_EQ(State(*e, 3), "pending");
  EXPECT_THAT(Job(*e, 3)["reason"].get<std::string>(),
              HasSubstr("an element of array"));
  EXPECT_FALSE(c_->ResolveJobRef(absl::StrCat(a, "_10000")).ok());
  EXPECT_FALSE(c_->ResolveJobRef("999_1").ok());
}

TEST_F(ArrayTest, TheWindowRefillsAsElementsStart) {
  // 600 one-GPU elements, no %max, on 2 x 8 GPUs: once 16 run, a window
  // of 256 waits; more start as soon as GPUs free up.
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-599"), 2);
  EXPECT_EQ(Tick(3).size(), 16u);
  EXPECT_EQ(c_->CurrentUtilization().pending_jobs, 256 - 16);
  // The next tick tops the window up, though nothing ended.
  Report({}, 3.5);
  EXPECT_TRUE(Tick(4).empty());
  EXPECT_EQ(c_->CurrentUtilization().pending_jobs, 256);
  std::map<std::string, int> exits;
  for (const auto& [id, l] : live_) exits[id] = 0;
  Report(exits, 4.5);
  EXPECT_EQ(Tick(5).size(), 16u);
  EXPECT_EQ(Job(a, 5)["array"]["pending_count"], 600 - 32);
}

TEST_F(ArrayTest, CancelOneElementThenTheRest) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-99%4"), 2);
  Tick(3);
  ASSERT_EQ(live_.size(), 4u);
  // One not made yet, then one running.
  const JobId e50 = *c_->ResolveJobRef(absl::StrCat(a, "_50"));
  auto r = c_->Cancel(e50, T(4));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["state"], "cancelled");
  EXPECT_EQ(State(e50, 4), "cancelled");
  EXPECT_THAT(Job(a, 4)["array"]["pending"].get<std::string>(),
              ::testing::StrEq("4-49,51-99"));
  const JobId e0 = *c_->ResolveJobRef(absl::StrCat(a, "_0"));
  ASSERT_TRUE(c_->Cancel(e0, T(4)).ok());
  EXPECT_EQ(State(e0, 4), "stopping");
  // The rest: pending ones at once, running ones stop.
  r = c_->Cancel(a, T(5));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)["array"]["pending_count"], 0);
  std::map<std::string, int> exits;
  for (const auto& [id, l] : live_) exits[id] = 143;
  Report(exits, 6);
  Tick(7);
  EXPECT_EQ(State(a, 7), "cancelled");
  EXPECT_TRUE(Tick(8).empty());
  EXPECT_EQ(Job(a, 8)["array"]["cancelled"], 100);
}

TEST_F(ArrayTest, HoldAndReleaseTheArrayAndOneElement) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-3"), 2);
  const JobId e2 = *c_->ResolveJobRef(absl::StrCat(a, "_2"));
  auto h = c_->Hold(e2, T(2));
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ((*h)["state"], "held");
  ASSERT_TRUE(c_->Hold(a, T(2)).ok());
  EXPECT_TRUE(Tick(3).empty());
  EXPECT_EQ(State(a, 3), "held");
  ASSERT_TRUE(c_->Release(a, T(4)).ok());
  Report({}, 4.5);  // the nodes stay up
  std::vector<AgentAction> started = Tick(5);
  ASSERT_EQ(started.size(), 3u);
  for (const AgentAction& l : started) EXPECT_NE(Index(l), "2");
  ASSERT_TRUE(c_->Release(e2, T(6)).ok());
  Report({}, 6.5);
  started = Tick(7);
  ASSERT_EQ(started.size(), 1u);
  EXPECT_EQ(Index(started[0]), "2");
}

TEST_F(ArrayTest, ARestartedServerGoesOnWithoutRunningAnIndexTwice) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-39%5"), 2);
  std::set<std::string> seen;
  for (const AgentAction& l : Tick(3)) seen.insert(Index(l));
  std::map<std::string, int> exits;
  int k = 0;
  for (const auto& [id, l] : live_) {
    if (k++ < 2) exits[id] = 0;
  }
  Report(exits, 4);
  // The server dies and comes back on the same store.
  Make();
  RegisterAll(5);
  double t = 6;
  for (int round = 0; round < 40 && State(a, t) != "succeeded"; ++round) {
    for (const AgentAction& l : Tick(t)) {
      EXPECT_TRUE(seen.insert(Index(l)).second) << "index twice: " << Index(l);
    }
    EXPECT_LE(live_.size(), 5u);
    exits.clear();
    for (const auto& [id, l] : live_) exits[id] = 0;
    Report(exits, t + 0.5);
    t += 1;
  }
  Tick(t);
  EXPECT_EQ(State(a, t), "succeeded");
  EXPECT_EQ(seen.size(), 40u);
}

TEST_F(ArrayTest, ADependencyOnAnArrayWaitsForEveryElement) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-2", "restart: {max: 0}\n"), 2);
  const JobId b =
      Submit(testing::Spec(absl::StrCat("name: merge\ncommand: [true]\n"
                                        "resources: {gpus: 1}\n"
                                        "dependency: afterok:",
                                        a, "\n")),
             2);
  Tick(3);
  ASSERT_EQ(live_.size(), 3u);
  std::map<std::string, int> exits;
  int k = 0;
  for (const auto& [id, l] : live_) exits[id] = k++ == 0 ? 1 : 0;
  Report(exits, 4);
  Tick(5);
  EXPECT_EQ(State(a, 5), "failed");
  EXPECT_THAT(Job(a, 5)["reason"].get<std::string>(), HasSubstr("1 failed"));
  Tick(6);
  EXPECT_EQ(State(b, 6), "pending");
  EXPECT_THAT(Job(b, 6)["reason"].get<std::string>(), HasSubstr("never"));
}

TEST_F(ArrayTest, ADependencyOnOneElement) {
  RegisterAll(1);
  const JobId a = Submit(ArrayJob("0-9%1"), 2);
  const std::string e1 = absl::StrCat(a, "_1");
  const JobId b = Submit(
      testing::Spec("name: after-one\ncommand: [true]\nresources: {gpus: 1}\n"
                    "dependency: afterok:" +
                    e1 + "\n"),
      2);
  EXPECT_EQ(Job(b, 2)["dependency"], "afterok:" + e1);
  Tick(3);  // element 0 runs; 1 is not made yet
  EXPECT_THAT(Job(b, 3)["reason"].get<std::string>(),
              HasSubstr("waiting for job " + e1 + " (pending) to succeed"));
  for (int i = 0; i < 2; ++i) {
    std::map<std::string, int> exits;
    for (const auto& [id, l] : live_) exits[id] = 0;
    Report(exits, 4 + i);
    Tick(4.5 + i);
  }
  Tick(7);
  // b started once element 1 succeeded, while the array goes on.
  EXPECT_EQ(State(b, 7), "running");
  EXPECT_EQ(State(a, 7), "pending");
  // One not made yet, then cancelled: never satisfied.
  const std::string e9 = absl::StrCat(a, "_9");
  const JobId c = Submit(testing::Spec("name: after-nine\ncommand: [true]\n"
                                       "dependency: afterok:" +
                                       e9 + "\n"),
                         7);
  ASSERT_TRUE(c_->Cancel(*c_->ResolveJobRef(e9), T(8)).ok());
  Tick(9);
  EXPECT_THAT(Job(c, 9)["reason"].get<std::string>(),
              HasSubstr("never satisfied: job " + e9));
  // An element that is not there is refused at submit.
  auto bad = c_->Submit(testing::Spec(absl::StrCat("name: x\ncommand: [true]\n"
                                                   "dependency: afterok:",
                                                   a, "_10\n")),
                        "alice", T(9));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("has no index 10"));
}

TEST_F(ArrayTest, BadArraysAreRefused) {
  auto j = c_->Submit(ArrayJob("0-3"), "alice", T(1));
  ASSERT_TRUE(j.ok());
  JobSpec bad = ArrayJob("0-3");
  bad.array = "3-1";
  j = c_->Submit(bad, "alice", T(1));
  ASSERT_FALSE(j.ok());
  EXPECT_THAT(j.status().message(), HasSubstr("reversed"));
}

}  // namespace
}  // namespace loom
