#include "loom/server/controller.h"

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

using testing::Spec;

JobSpec Gang(int gpus, int nodes = 0) {
  std::string yaml =
      "name: train\ncommand: [python3, train.py]\n"
      "resources: {gpus: " +
      std::to_string(gpus);
  if (nodes > 0) yaml += ", nodes: " + std::to_string(nodes);
  yaml += "}\n";
  return Spec(yaml);
}

nlohmann::json Gpus(int n, const std::string& model = "h200") {
  nlohmann::json g = nlohmann::json::array();
  for (int i = 0; i < n; ++i) g.push_back({{"index", i}, {"model", model}});
  return g;
}

class ControllerTest : public ::testing::Test {
 protected:
  ControllerTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) { Make(); }
  void Make() {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  nlohmann::json Register(int node, nlohmann::json tasks, double t) {
    nlohmann::json body = {
        {"name", "h200-" + std::to_string(node)},
        {"address", "127.0.0." + std::to_string(node + 2) + ":7100"},
        {"gpus", Gpus(8)},
        {"emulated", true},
        {"tasks", tasks}};
    auto r = c_->Register(body, T(t));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nlohmann::json();
  }
  nlohmann::json Beat(int node, nlohmann::json tasks, double t) {
    auto r = c_->Heartbeat(
        {{"name", "h200-" + std::to_string(node)}, {"tasks", tasks}}, T(t));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : nlohmann::json();
  }
  std::string State(JobId id, double t = 100) {
    return (*c_->GetJob(id, T(t)))["state"];
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(ControllerTest, SubmitIsDurableAndWaitsForNodes) {
  auto j = c_->Submit(Gang(8), "alice", T(1));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["id"], 1);
  EXPECT_EQ((*j)["user"], "alice");
  EXPECT_TRUE(store_.Get(JobKey(1)).ok());
  c_->Tick(T(2));
  EXPECT_EQ(State(1), "pending");
  const std::string reason = (*c_->GetJob(1, T(2)))["reason"];
  EXPECT_NE(reason.find("no schedulable nodes"), std::string::npos) << reason;

  EXPECT_TRUE(c_->TakeActions().empty());
}

// A submission retried with the same idempotency key (its answer was lost)
// gets the first job back, also from a controller started afterwards (a new
// leader); a bad key is refused.
TEST_F(ControllerTest, RetriedSubmissionGetsTheSameJob) {
  bool created = false;
  auto first = c_->Submit(Gang(8), "alice", T(1), "key-1", &created);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(created);
  auto again = c_->Submit(Gang(8), "alice", T(2), "key-1", &created);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(created);
  EXPECT_EQ((*again)["id"], (*first)["id"]);
  auto other = c_->Submit(Gang(8), "alice", T(3), "key-2", &created);
  ASSERT_TRUE(other.ok());
  EXPECT_TRUE(created);
  EXPECT_NE((*other)["id"], (*first)["id"]);
  Make();  // a new controller on the same store
  auto after = c_->Submit(Gang(8), "alice", T(4), "key-1", &created);
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_FALSE(created);
  EXPECT_EQ((*after)["id"], (*first)["id"]);
  EXPECT_EQ(c_->ListJobs({}, T(5))["jobs"].size(), 2u);
  EXPECT_EQ(c_->Submit(Gang(8), "alice", T(5), "bad key!").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      c_->Submit(Gang(8), "alice", T(5), std::string(257, 'k')).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(ControllerTest, RejectsBadAndInfeasibleJobs) {
  JobSpec bad = Gang(8);
  bad.gpu_model = "v100";
  EXPECT_EQ(c_->Submit(bad, "a", T(1)).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto big = c_->Submit(Gang(64), "a", T(1));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(big.status().message().find("infeasible"), std::string::npos);
  EXPECT_FALSE(store_.Get(JobKey(1)).ok());  // nothing stored
}

TEST_F(ControllerTest, GangRunsWithTheTrainingContractAndSucceeds) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(16), "alice", T(2)).ok());
  c_->Tick(T(2));
  EXPECT_EQ(State(1), "running");
  std::vector<AgentAction> actions = c_->TakeActions();
  ASSERT_EQ(actions.size(), 2u);
  for (const AgentAction& a : actions) {
    EXPECT_EQ(a.kind, AgentAction::Kind::kLaunch);
    const nlohmann::json& env = a.body["env"];
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.2");
    EXPECT_EQ(env["CUDA_VISIBLE_DEVICES"], "0,1,2,3,4,5,6,7");
    EXPECT_EQ(env["LOOM_JOB_ID"], "1");
    EXPECT_EQ(env["LOOM_RESTART_COUNT"], "0");
    EXPECT_EQ(a.body["argv"], nlohmann::json({"python3", "train.py"}));
  }
  EXPECT_EQ(actions[0].body["env"]["NODE_RANK"], "0");
  EXPECT_EQ(actions[1].body["env"]["NODE_RANK"], "1");
  EXPECT_EQ(actions[0].address, "127.0.0.2:7100");
  const std::string t0 = actions[0].task_id, t1 = actions[1].task_id;
  Beat(0, {{{"task_id", t0}, {"state", "running"}}}, 3);
  Beat(1, {{{"task_id", t1}, {"state", "running"}}}, 3);
  auto r =
      Beat(0, {{{"task_id", t0}, {"state", "exited"}, {"exit_code", 0}}}, 4);
  EXPECT_EQ(r["ack"], nlohmann::json({t0}));
  EXPECT_EQ(State(1), "running");
  Beat(1, {{{"task_id", t1}, {"state", "exited"}, {"exit_code", 0}}}, 5);
  EXPECT_EQ(State(1), "succeeded");
  EXPECT_EQ((*c_->GetJob(1, T(5)))["exit_code"], 0);
  // The GPUs are free again.
  ASSERT_TRUE(c_->Submit(Gang(16), "bob", T(6)).ok());
  c_->Tick(T(6));
  EXPECT_EQ(State(2), "running");
}

TEST_F(ControllerTest, OneFailedTaskStopsTheGang) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(16), "alice", T(2)).ok());
  c_->Tick(T(2));
  auto actions = c_->TakeActions();
  Beat(0,
       {{{"task_id", actions[0].task_id},
         {"state", "exited"},
         {"exit_code", 3}}},
       3);
  EXPECT_EQ(State(1), "stopping");
  auto stops = c_->TakeActions();
  // The other task is stopped, and its node asked whether its agent is
  // there (controller_liveness_test.cc).
  ASSERT_EQ(stops.size(), 2u);
  EXPECT_EQ(stops[1].kind, AgentAction::Kind::kProbe);
  stops.pop_back();
  EXPECT_EQ(stops[0].kind, AgentAction::Kind::kStop);
  EXPECT_EQ(stops[0].task_id, actions[1].task_id);
  Beat(1,
       {{{"task_id", actions[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       4);
  auto job = *c_->GetJob(1, T(4));
  EXPECT_EQ(job["state"], "failed");
  EXPECT_EQ(job["exit_code"], 3);
}

TEST_F(ControllerTest, RestartPolicyRequeuesTheWholeGang) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  JobSpec spec = Gang(16);
  spec.restart.max = 1;
  spec.restart.backoff = absl::Seconds(5);
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  c_->Tick(T(2));
  auto first = c_->TakeActions();
  ASSERT_EQ(first.size(), 2u);
  // Task 0 fails; task 1 is stopped; then the gang waits out the backoff.
  Beat(0,
       {{{"task_id", first[0].task_id}, {"state", "exited"}, {"exit_code", 3}}},
       3);
  c_->TakeActions();
  Beat(1,
       {{{"task_id", first[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       4);
  auto job = *c_->GetJob(1, T(4));
  EXPECT_EQ(job["state"], "pending");
  EXPECT_NE(job["reason"].get<std::string>().find(
                "restart 1 of 1 after: task 0 exited with code 3"),
            std::string::npos)
      << job["reason"];
  c_->Tick(T(8));  // backoff not over: nothing starts
  for (const AgentAction& a : c_->TakeActions()) {
    EXPECT_EQ(a.kind, AgentAction::Kind::kProbe);  // both nodes are silent
  }
  EXPECT_EQ(State(1, 8), "pending");
  // A new controller keeps the backoff and the count.
  Make();
  Register(0, nlohmann::json::array(), 8);
  Register(1, nlohmann::json::array(), 8);
  c_->Tick(T(9.5));
  auto second = c_->TakeActions();
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].body["env"]["LOOM_RESTART_COUNT"], "1");
  EXPECT_NE(second[0].task_id, first[0].task_id);
  EXPECT_EQ(second[0].body["env"]["LOOM_CHECKPOINT_DIR"],
            first[0].body["env"]["LOOM_CHECKPOINT_DIR"]);
  for (const AgentAction& a : second)
    c_->ActionDone(a, absl::OkStatus(), T(9.6));
  EXPECT_EQ(State(1, 9.6), "running");
  // A lost node is not the job's failure: queued again (`requeue`), the
  // restart policy (used up) untouched.
  Register(0, nlohmann::json::array(), 10);  // agent 0 lost its task
  c_->TakeActions();
  Beat(1,
       {{{"task_id", second[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       11);
  job = *c_->GetJob(1, T(11));
  EXPECT_EQ(job["state"], "pending") << job.dump();
  EXPECT_EQ(job["requeues"], 1);
  EXPECT_EQ(job["restart_count"], 2);
  // Queued at once (no backoff); the event says why.
  EXPECT_NE(job.dump().find(
                "requeued: task 0 was lost: the agent of h200-0 registered "
                "again without it"),
            std::string::npos)
      << job.dump(1);
  // Its own failure now does use up the policy: failed.
  c_->Tick(T(12));
  auto third = c_->TakeActions();
  ASSERT_EQ(third.size(), 2u);
  for (const AgentAction& a : third) c_->ActionDone(a, absl::OkStatus(), T(12));
  Beat(0,
       {{{"task_id", third[0].task_id}, {"state", "exited"}, {"exit_code", 1}}},
       13);
  c_->TakeActions();
  Beat(1,
       {{{"task_id", third[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       14);
  EXPECT_EQ(State(1, 14), "failed");
}

// The logs of a run that failed stay readable after the job restarts:
// while it waits to run again (by default) and later by its number, also
// across a restart of the server; the last `kKeptPastRuns` are kept.
TEST_F(ControllerTest, EarlierRunsKeepTheirLogs) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  JobSpec spec = Gang(16);
  spec.restart.max = 10;
  spec.restart.backoff = absl::Seconds(5);
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  EXPECT_EQ(c_->TaskLogs(1, 0).status().message(),
            "job 1 has not started, so it has no logs");
  c_->Tick(T(2));
  auto first = c_->TakeActions();
  ASSERT_EQ(first.size(), 2u);
  for (const AgentAction& a : first) c_->ActionDone(a, absl::OkStatus(), T(2));
  Beat(0,
       {{{"task_id", first[0].task_id}, {"state", "exited"}, {"exit_code", 3}}},
       3);
  c_->TakeActions();
  Beat(1,
       {{{"task_id", first[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       4);
  ASSERT_EQ(State(1, 4), "pending");
  // Waiting to run again: the run that failed.
  absl::StatusOr<Controller::TaskLogSource> logs = c_->TaskLogs(1, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->task_id, first[0].task_id);
  EXPECT_EQ(logs->node, first[0].node);
  EXPECT_EQ(logs->address, "127.0.0.2:7100");
  EXPECT_FALSE(logs->live);
  logs = c_->TaskLogs(1, 1, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->task_id, first[1].task_id);
  EXPECT_EQ(c_->TaskLogs(1, 0, 3).status().message(),
            "job 1 has no run 3 whose logs are kept (runs kept: 0)");
  EXPECT_EQ(c_->TaskLogs(1, 2, 0).status().message(),
            "run 0 of job 1 has no task 2");

  // A new server knows the past run; the next run is the current one.
  Make();
  Register(0, nlohmann::json::array(), 8);
  Register(1, nlohmann::json::array(), 8);
  c_->Tick(T(9.5));
  auto second = c_->TakeActions();
  ASSERT_EQ(second.size(), 2u);
  for (const AgentAction& a : second) {
    c_->ActionDone(a, absl::OkStatus(), T(9.6));
  }
  logs = c_->TaskLogs(1, 0);
  ASSERT_TRUE(logs.ok()) << logs.status();
  EXPECT_EQ(logs->task_id, second[0].task_id);
  EXPECT_TRUE(logs->live);
  EXPECT_EQ(c_->TaskLogs(1, 0, 1)->task_id, second[0].task_id);
  EXPECT_EQ(c_->TaskLogs(1, 0, 0)->task_id, first[0].task_id);
  EXPECT_EQ(c_->TaskLogs(1, 0, 4).status().message(),
            "job 1 has no run 4 whose logs are kept (runs kept: 0, 1)");

  // Only the last 5 past runs are kept.
  std::vector<AgentAction> run = second;
  for (int r = 1; r <= 6; ++r) {
    const double t = 10 + 10 * r;
    Beat(0,
         {{{"task_id", run[0].task_id}, {"state", "exited"}, {"exit_code", 1}}},
         t);
    c_->TakeActions();
    Beat(1,
         {{{"task_id", run[1].task_id}, {"state", "exited"}, {"signal", 15}}},
         t + 1);
    Beat(0, nlohmann::json::array(), t + 6.5);  // not silent
    Beat(1, nlohmann::json::array(), t + 6.5);
    c_->Tick(T(t + 7));
    run = c_->TakeActions();
    ASSERT_EQ(run.size(), 2u) << "run " << r;
    for (const AgentAction& a : run)
      c_->ActionDone(a, absl::OkStatus(), T(t + 7));
  }
  EXPECT_EQ(c_->TaskLogs(1, 0, 1).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(c_->TaskLogs(1, 0, 2)->task_id, "1.0.2");
  EXPECT_EQ(c_->TaskLogs(1, 0, 6)->task_id, "1.0.6");
  EXPECT_EQ(c_->TaskLogs(1, 0, 7)->task_id, run[0].task_id);
}

// A job token's run (issue 15, item 7): valid while the run is the job's
// current one and runs; not before, not after a restart, not once it ended.
TEST_F(ControllerTest, OnlyTheCurrentLiveRunChecksOut) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  JobSpec spec = Gang(16);
  spec.restart.max = 1;
  spec.restart.backoff = absl::Seconds(1);
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  EXPECT_FALSE(c_->CheckRun(1, 0).ok());  // pending: no run yet
  EXPECT_EQ(c_->CheckRun(9, 0).code(), absl::StatusCode::kNotFound);
  c_->Tick(T(2));
  auto first = c_->TakeActions();
  ASSERT_EQ(first.size(), 2u);
  EXPECT_EQ(first[0].run, 0);
  EXPECT_TRUE(c_->CheckRun(1, 0).ok());
  EXPECT_FALSE(c_->CheckRun(1, 1).ok());
  Beat(0,
       {{{"task_id", first[0].task_id}, {"state", "exited"}, {"exit_code", 3}}},
       3);
  EXPECT_TRUE(c_->CheckRun(1, 0).ok());  // stopping: may still checkpoint
  c_->TakeActions();
  Beat(1,
       {{{"task_id", first[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       4);
  EXPECT_FALSE(c_->CheckRun(1, 0).ok());  // requeued: run 0 is over
  c_->Tick(T(6));
  auto second = c_->TakeActions();
  ASSERT_EQ(second.size(), 2u);
  EXPECT_EQ(second[0].run, 1);
  EXPECT_TRUE(c_->CheckRun(1, 1).ok());
  EXPECT_FALSE(c_->CheckRun(1, 0).ok());
  ASSERT_TRUE(c_->Cancel(1, T(7)).ok());
  c_->TakeActions();
  for (int n = 0; n < 2; ++n) {
    Beat(
        n,
        {{{"task_id", second[n].task_id}, {"state", "exited"}, {"signal", 15}}},
        8);
  }
  EXPECT_EQ(State(1, 8), "cancelled");
  EXPECT_FALSE(c_->CheckRun(1, 1).ok());
}

TEST_F(ControllerTest, CheckpointsAreRecorded) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  EXPECT_EQ(c_->Checkpoint(1, 5, T(2)).status().code(),
            absl::StatusCode::kFailedPrecondition);  // not running yet
  c_->Tick(T(2));
  auto j = c_->Checkpoint(1, 120, T(3));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["checkpoint"]["step"], 120);
  EXPECT_EQ((*j)["checkpoint"]["run"], 0);
  EXPECT_EQ(c_->Checkpoint(9, 1, T(3)).status().code(),
            absl::StatusCode::kNotFound);
  Make();  // durable
  EXPECT_EQ((*c_->GetJob(1, T(4)))["checkpoint"]["step"], 120);
}

TEST_F(ControllerTest, CancelRunningAndPending) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  ASSERT_TRUE(c_->Cancel(2, T(3)).ok());
  EXPECT_EQ(State(2), "cancelled");
  ASSERT_TRUE(c_->Cancel(1, T(3)).ok());
  EXPECT_EQ(State(1), "stopping");
  auto stop = c_->TakeActions();
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].body["signal"], SIGTERM);
  EXPECT_EQ(stop[0].body["grace_ms"], 30000);
  Beat(0,
       {{{"task_id", launch[0].task_id}, {"state", "exited"}, {"signal", 15}}},
       4);
  EXPECT_EQ(State(1), "cancelled");
}

TEST_F(ControllerTest, HoldAndRelease) {
  JobSpec s = Gang(1);
  s.hold = true;
  ASSERT_TRUE(c_->Submit(s, "a", T(1)).ok());
  EXPECT_EQ(State(1), "held");
  EXPECT_EQ(c_->Release(1, T(2)).status().code(), absl::StatusCode::kOk);
  EXPECT_EQ(State(1), "pending");
  EXPECT_EQ(c_->Release(1, T(2)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(c_->Release(9, T(2)).status().code(), absl::StatusCode::kNotFound);

  // Several at once, one write: each id gets its own outcome.
  ASSERT_TRUE(c_->Submit(s, "a", T(3)).ok());
  ASSERT_TRUE(c_->Submit(s, "a", T(3)).ok());
  std::vector<absl::Status> errors;
  c_->ReleaseMany({2, 1, 3, 9}, T(4), &errors);
  ASSERT_EQ(errors.size(), 4u);
  EXPECT_TRUE(errors[0].ok());
  EXPECT_EQ(errors[1].code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(errors[2].ok());
  EXPECT_EQ(errors[3].code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(State(2), "pending");
  EXPECT_EQ(State(3), "pending");
  EXPECT_NE(store_.Get(JobKey(3))->value.find("\"pending\""),
            std::string::npos);
}

TEST_F(ControllerTest, RestartKeepsJobsAndRunningTasks) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());  // runs
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());  // waits
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  Beat(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 3);
  // A new controller on the same store: nothing lost, nothing doubled.
  Make();
  EXPECT_EQ(State(1), "running");
  EXPECT_EQ(State(2), "pending");
  Register(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 10);
  c_->Tick(T(10));
  EXPECT_TRUE(c_->TakeActions().empty());  // job 2 must not take job 1's GPUs
  EXPECT_EQ(State(2), "pending");
  ASSERT_TRUE(c_->Submit(Gang(1), "a", T(11)).ok());
  EXPECT_EQ((*c_->GetJob(3, T(11)))["id"], 3);
}

TEST_F(ControllerTest, LaunchLostWithTheServerIsSentAgain) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  // The server dies after writing the start, before sending the launch.
  Make();
  EXPECT_EQ(State(1), "running");
  Register(0, nlohmann::json::array(), 10);
  auto again = c_->TakeActions();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].kind, AgentAction::Kind::kLaunch);
  EXPECT_EQ(again[0].task_id, launch[0].task_id);
  EXPECT_EQ(again[0].body, launch[0].body);
  // The agent confirms it: the job is running, then succeeds.
  c_->ActionDone(again[0], absl::OkStatus(), T(10));
  EXPECT_FALSE((*c_->GetJob(1, T(10)))["running_time"].is_null());
  Beat(
      0,
      {{{"task_id", launch[0].task_id}, {"state", "exited"}, {"exit_code", 0}}},
      11);
  EXPECT_EQ(State(1), "succeeded");
}

TEST_F(ControllerTest, RefusedLaunchFailsTheJobWithoutRestarts) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  JobSpec spec = Gang(16);
  spec.restart.max = 3;
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 2u);
  // Task 1 starts; the agent of task 0 refuses it (HTTP 400).
  c_->ActionDone(launch[1], absl::OkStatus(), T(2.1));
  c_->ActionDone(launch[0],
                 absl::InvalidArgumentError(
                     "agent h200-0 answered 400: \"user 'x' does not exist on "
                     "node h200-0\""),
                 T(2.2));
  EXPECT_EQ(State(1, 2.2), "stopping");
  auto stop = c_->TakeActions();
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_EQ(stop[0].kind, AgentAction::Kind::kStop);
  Beat(launch[1].node == "h200-0" ? 0 : 1,
       {{{"task_id", launch[1].task_id}, {"state", "exited"}, {"signal", 15}}},
       3);
  auto job = *c_->GetJob(1, T(3));
  EXPECT_EQ(job["state"], "failed") << job.dump();
  EXPECT_EQ(job["restart_count"], 0);
  const std::string reason = job["reason"];
  EXPECT_NE(reason.find("launch of task 0 on h200-0 refused: agent h200-0 "
                        "answered 400: \"user 'x' does not exist"),
            std::string::npos)
      << reason;
  EXPECT_NE(reason.find("not queued again"), std::string::npos) << reason;
  // It stays failed across a restart of the controller.
  Make();
  EXPECT_EQ(State(1), "failed");
}

TEST_F(ControllerTest, LaunchThatFailedOtherwiseIsRestarted) {
  Register(0, nlohmann::json::array(), 1);
  JobSpec spec = Gang(8);
  spec.restart.max = 1;
  ASSERT_TRUE(c_->Submit(spec, "alice", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  c_->ActionDone(launch[0],
                 absl::UnavailableError("agent h200-0 at 127.0.0.2:7100 "
                                        "unreachable: Connection"),
                 T(2.1));
  auto job = *c_->GetJob(1, T(2.1));
  EXPECT_EQ(job["state"], "pending") << job.dump();
  EXPECT_EQ(job["restart_count"], 1);
  EXPECT_NE(job["reason"].get<std::string>().find("launch of task 0 on "
                                                  "h200-0 failed: agent"),
            std::string::npos)
      << job["reason"];
}

TEST_F(ControllerTest, LaunchAnAgentWasNotReadyForIsQueuedAgainAsAMove) {
  // 503 (Aborted): the agent registered but has not taken in its server's
  // key yet. Not the job's fault: no restart is used, even with none left.
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "alice", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  c_->ActionDone(launch[0],
                 absl::AbortedError("agent h200-0 answered 503: \"this agent "
                                    "does not know its loom server's key "
                                    "yet\""),
                 T(2.1));
  auto job = *c_->GetJob(1, T(2.1));
  EXPECT_EQ(job["state"], "pending") << job.dump();
  EXPECT_EQ(job["restart_count"], 1);
  // It never ran there: no requeue counted either (`requeue.max`), and no
  // past run kept (there is no output to read).
  EXPECT_EQ(job["requeues"], 0);
  EXPECT_EQ(job["past_runs"], nlohmann::json::array());
  c_->Tick(T(3));
  EXPECT_EQ(State(1), "running");
}

// Losing a node is not the job's fault (issue 20): a plain job (no
// restart policy) is queued again; with `requeue: {max: 0}` (sbatch's
// --no-requeue) it fails.
TEST_F(ControllerTest, AgentThatLostItsTasksRequeuesTheJob) {
  Register(0, nlohmann::json::array(), 1);
  JobSpec no_requeue = Gang(8);
  no_requeue.requeue.max = 0;
  ASSERT_TRUE(c_->Submit(no_requeue, "a", T(2)).ok());
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);  // one node: one job at a time
  EXPECT_EQ(launch[0].job, 1);
  Beat(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 3);
  Register(0, nlohmann::json::array(), 4);  // restarted with nothing
  auto job = *c_->GetJob(1, T(4));
  EXPECT_EQ(job["state"], "failed") << job.dump();
  EXPECT_NE(job["reason"].get<std::string>().find("not queued again"),
            std::string::npos)
      << job["reason"];
  // The plain job runs next, and is lost too: queued again.
  c_->Tick(T(5));
  launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 1u);
  EXPECT_EQ(launch[0].job, 2);
  Beat(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 6);
  Register(0, nlohmann::json::array(), 7);
  job = *c_->GetJob(2, T(7));
  EXPECT_EQ(job["state"], "pending") << job.dump();
  EXPECT_EQ(job["restart_count"], 1);
  EXPECT_EQ(job["requeues"], 1);
  c_->Tick(T(8));
  EXPECT_EQ(c_->TakeActions().size(), 1u);  // and runs again
}

TEST_F(ControllerTest, SilentNodeGoesDownAndUnknownTasksAreStopped) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(8), "a", T(2)).ok());
  c_->Tick(T(2));
  auto launch = c_->TakeActions();
  Beat(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 3);
  c_->Tick(T(20));                 // no heartbeat for 17 s
  EXPECT_EQ(State(1), "pending");  // queued again: not the job's fault
  auto node = *c_->GetNode("h200-0", T(20));
  EXPECT_EQ(node["state"], "down");
  EXPECT_EQ(
      c_->Heartbeat({{"name", "h200-0"}, {"tasks", nlohmann::json::array()}},
                    T(21))
          .status()
          .code(),
      absl::StatusCode::kFailedPrecondition);
  // It comes back still running the old task: told to stop it.
  auto r =
      Register(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 22);
  EXPECT_EQ(r["stop"], nlohmann::json({launch[0].task_id}));
}

TEST_F(ControllerTest, RegisterChecksTheSpec) {
  EXPECT_FALSE(
      c_->Register(
            {{"name", "ghost"}, {"address", "127.0.0.9:1"}, {"gpus", Gpus(8)}},
            T(1))
          .ok());
  EXPECT_FALSE(
      c_->Register(
            {{"name", "h200-0"}, {"address", "127.0.0.2:1"}, {"gpus", Gpus(4)}},
            T(1))
          .ok());
  EXPECT_FALSE(c_->Register({{"name", "h200-0"},
                             {"address", "127.0.0.2:1"},
                             {"gpus", Gpus(8, "a100")}},
                            T(1))
                   .ok());
}

TEST_F(ControllerTest, CordonAndDrain) {
  Register(0, nlohmann::json::array(), 1);
  Register(1, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->SetNodeMode("h200-0", "cordon", T(1)).ok());
  ASSERT_TRUE(c_->Submit(Gang(16), "a", T(2)).ok());
  c_->Tick(T(2));
  EXPECT_EQ(State(1), "pending");
  ASSERT_TRUE(c_->SetNodeMode("h200-0", "uncordon", T(3)).ok());
  c_->Tick(T(3));
  EXPECT_EQ(State(1), "running");
  ASSERT_TRUE(c_->SetNodeMode("h200-1", "drain", T(4)).ok());
  EXPECT_EQ((*c_->GetNode("h200-1", T(4)))["state"], "draining");
  EXPECT_FALSE(c_->SetNodeMode("h200-1", "explode", T(4)).ok());
  // Settings survive a restart; the node is drained once its job is done.
  auto launch = c_->TakeActions();
  ASSERT_EQ(launch.size(), 2u);
  Make();
  Register(0, {{{"task_id", launch[0].task_id}, {"state", "running"}}}, 5);
  Register(1, {{{"task_id", launch[1].task_id}, {"state", "running"}}}, 5);
  EXPECT_EQ((*c_->GetNode("h200-1", T(5)))["state"], "draining");
  Beat(
      0,
      {{{"task_id", launch[0].task_id}, {"state", "exited"}, {"exit_code", 0}}},
      6);
  Beat(
      1,
      {{{"task_id", launch[1].task_id}, {"state", "exited"}, {"exit_code", 0}}},
      6);
  EXPECT_EQ(State(1), "succeeded");
  EXPECT_EQ((*c_->GetNode("h200-1", T(6)))["state"], "drained");
}

// A node whose agent says a GPU's change of MIG mode waits (`mig_waits`)
// takes no new work, says why, and keeps what runs; it is back once a
// heartbeat no longer names the GPU.
TEST_F(ControllerTest, ANodeWhoseMigModeChangeWaitsTakesNoNewWork) {
  Register(0, nlohmann::json::array(), 1);
  ASSERT_TRUE(c_->Submit(Gang(4), "alice", T(1)).ok());
  c_->Tick(T(1));
  ASSERT_EQ(State(1), "running");
  auto r = c_->Heartbeat({{"name", "h200-0"},
                          {"tasks", nlohmann::json::array()},
                          {"mig_waits", {2, "x", 99, -1, 2}}},
                         T(2));
  ASSERT_TRUE(r.ok()) << r.status();
  nlohmann::json node = *c_->GetNode("h200-0", T(2));
  EXPECT_EQ(node["state"], "cordoned");
  EXPECT_EQ(node["mig_waits"], nlohmann::json::array({2}));
  EXPECT_EQ(node["reason"].get<std::string>().rfind(
                "GPU 2: a change of MIG mode waits until the GPU is idle or "
                "reset",
                0),
            0u)
      << node["reason"];
  EXPECT_EQ(State(1), "running");
  ASSERT_TRUE(c_->Submit(Gang(2), "bob", T(2)).ok());
  c_->Tick(T(3));
  EXPECT_EQ(State(2), "pending");
  // An operator's uncordon does not clear what the agent reports.
  ASSERT_TRUE(c_->SetNodeMode("h200-0", "uncordon", T(3)).ok());
  c_->Tick(T(3));
  EXPECT_EQ(State(2), "pending");
  Beat(0, nlohmann::json::array(), 4);  // no `mig_waits`: none
  node = *c_->GetNode("h200-0", T(4));
  EXPECT_EQ(node["state"], "up");
  EXPECT_EQ(node["reason"], "");
  c_->Tick(T(4));
  EXPECT_EQ(State(2), "running");
}

}  // namespace
}  // namespace loom
