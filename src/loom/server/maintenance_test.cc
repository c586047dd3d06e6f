#include "loom/server/maintenance.h"

#include <algorithm>

#include "gtest/gtest.h"

namespace loom {
namespace {

using Phase = MaintenanceNode::Phase;
using State = Maintenance::State;

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);

Maintenance MakeRun(int nodes, int batch, int max_unavailable) {
  Maintenance m;
  m.id = 7;
  m.author = "alice";
  m.created = kT0;
  m.settings.command = "upgrade";
  m.settings.batch = batch;
  m.settings.max_unavailable = max_unavailable;
  m.settings.ready_timeout = absl::Minutes(1);
  for (int i = 0; i < nodes; ++i) {
    MaintenanceNode n;
    n.name = "n" + std::to_string(i);
    m.settings.nodes.push_back(n.name);
    m.nodes.push_back(n);
  }
  return m;
}

// A small world: nodes that are up and in line unless told otherwise, and
// an agent that runs a command as soon as it is sent.
struct World {
  std::vector<MaintenanceFacts> facts;
  explicit World(int nodes) : facts(nodes) {
    for (MaintenanceFacts& f : facts) {
      f.known = true;
      f.up = true;
    }
  }
  int Index(const std::string& name) const { return std::stoi(name.substr(1)); }
  // Applies `ops` as the controller would.
  void Apply(const Maintenance& m, const MaintenanceOps& ops) {
    for (const std::string& n : ops.cordon) facts[Index(n)].draining = true;
    for (const std::string& n : ops.evict) facts[Index(n)].jobs = 0;
    for (const std::string& n : ops.send) {
      MaintenanceFacts& f = facts[Index(n)];
      f.report_id = m.CommandId(n);
      f.report_state = "exited";
      f.report_exit_code = 0;
    }
    for (const std::string& n : ops.restore) facts[Index(n)].draining = false;
  }
};

int InFlight(const Maintenance& m) {
  return static_cast<int>(std::count_if(
      m.nodes.begin(), m.nodes.end(), [](const MaintenanceNode& n) {
        return n.phase == Phase::kDraining || n.phase == Phase::kRunning ||
               n.phase == Phase::kChecking;
      }));
}

TEST(Maintenance, BatchesOfTwoNeverMoreThanTwoOutAndEveryNodeDone) {
  Maintenance m = MakeRun(8, 2, 2);
  World w(8);
  int max_out = 0;
  std::vector<int> batch_sizes(5, 0);
  absl::Time now = kT0;
  for (int step = 0; step < 100 && m.state == State::kRunning; ++step) {
    MaintenanceOps ops = StepMaintenance(m, w.facts, now);
    w.Apply(m, ops);
    max_out = std::max(max_out, InFlight(m));
    now += absl::Seconds(1);
  }
  EXPECT_EQ(m.state, State::kDone) << m.reason;
  EXPECT_LE(max_out, 2);
  EXPECT_EQ(m.batch_current, 4);
  for (const MaintenanceNode& n : m.nodes) {
    EXPECT_EQ(n.phase, Phase::kDone) << n.name << ": " << n.message;
    ASSERT_GE(n.batch, 1);
    ASSERT_LE(n.batch, 4);
    ++batch_sizes[n.batch];
  }
  for (int b = 1; b <= 4; ++b) EXPECT_EQ(batch_sizes[b], 2) << "batch " << b;
  ASSERT_TRUE(m.ended.has_value());
  EXPECT_FALSE(m.Active());
}

// The server drained a node, then died before it stored the run: after the
// restart the node is found drained with the run's own reason. It was in
// service before, and goes back to service at the end (not left drained).
TEST(Maintenance, ANodeDrainedByThisRunBeforeACrashGoesBackToService) {
  Maintenance m = MakeRun(1, 1, 1);
  World w(1);
  w.facts[0].draining = true;
  w.facts[0].mode_reason = MaintenanceDrainReason(m);
  EXPECT_EQ(w.facts[0].mode_reason, "maintenance 7 (alice)");
  MaintenanceOps ops = StepMaintenance(m, w.facts, kT0);
  ASSERT_EQ(ops.cordon, std::vector<std::string>{"n0"});
  EXPECT_FALSE(m.nodes[0].was_draining);
  EXPECT_EQ(m.nodes[0].was_reason, "");
  // Drained for another reason (an operator's), it stays so afterwards.
  Maintenance other = MakeRun(1, 1, 1);
  World v(1);
  v.facts[0].draining = true;
  v.facts[0].mode_reason = "bad fan";
  (void)StepMaintenance(other, v.facts, kT0);
  EXPECT_TRUE(other.nodes[0].was_draining);
  EXPECT_EQ(other.nodes[0].was_reason, "bad fan");
}

TEST(Maintenance, EmptiestNodesGoFirstAndBusyOnesLast) {
  Maintenance m = MakeRun(4, 2, 2);
  World w(4);
  w.facts[0].gpus_allocated = 8;
  w.facts[1].gpus_allocated = 8;
  MaintenanceOps ops = StepMaintenance(m, w.facts, kT0);
  std::sort(ops.cordon.begin(), ops.cordon.end());
  EXPECT_EQ(ops.cordon, (std::vector<std::string>{"n2", "n3"}));
  EXPECT_EQ(m.nodes[0].batch, 0);
  EXPECT_EQ(m.nodes[2].batch, 1);
}

TEST(Maintenance, JobsAreMovedAtOnceOrAfterTheDrainTimeout) {
  Maintenance m = MakeRun(1, 1, 1);
  m.settings.drain_timeout = absl::Seconds(30);
  World w(1);
  w.facts[0].jobs = 2;
  MaintenanceOps ops = StepMaintenance(m, w.facts, kT0);
  EXPECT_EQ(ops.cordon, std::vector<std::string>{"n0"});
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(10));
  EXPECT_TRUE(ops.evict.empty());
  EXPECT_NE(m.nodes[0].message.find("for 2 jobs to end"), std::string::npos)
      << m.nodes[0].message;
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(31));
  EXPECT_EQ(ops.evict, std::vector<std::string>{"n0"});
  EXPECT_TRUE(ops.send.empty());  // not while jobs are still there
  w.facts[0].jobs = 0;
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(32));
  EXPECT_EQ(ops.send, std::vector<std::string>{"n0"});
  EXPECT_EQ(m.nodes[0].phase, Phase::kRunning);

  Maintenance now_run = MakeRun(1, 1, 1);
  World w2(1);
  w2.facts[0].jobs = 1;
  StepMaintenance(now_run, w2.facts, kT0);
  ops = StepMaintenance(now_run, w2.facts, kT0);
  EXPECT_EQ(ops.evict, std::vector<std::string>{"n0"});
}

TEST(Maintenance, ANodeWaitsUntilItIsUpToDateOrFailsAfterTheReadyTimeout) {
  Maintenance m = MakeRun(2, 1, 1);
  World w(2);
  StepMaintenance(m, w.facts, kT0);             // n0 cordoned
  auto ops = StepMaintenance(m, w.facts, kT0);  // command sent
  ASSERT_EQ(ops.send.size(), 1u);
  const int first = w.Index(ops.send[0]);
  w.facts[first].report_id = m.CommandId(ops.send[0]);
  w.facts[first].report_state = "exited";
  w.facts[first].report_exit_code = 0;
  w.facts[first].not_ready = "outdated: driver 550 (pool wants 560)";
  StepMaintenance(m, w.facts, kT0 + absl::Seconds(1));
  EXPECT_EQ(m.nodes[first].phase, Phase::kChecking);
  StepMaintenance(m, w.facts, kT0 + absl::Seconds(30));
  EXPECT_EQ(m.nodes[first].phase, Phase::kChecking);
  EXPECT_NE(m.nodes[first].message.find("outdated"), std::string::npos);
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(62));
  EXPECT_EQ(m.nodes[first].phase, Phase::kFailed);
  EXPECT_TRUE(ops.restore.empty());  // a failed node stays cordoned
  EXPECT_EQ(m.state, State::kFailed);
  EXPECT_NE(m.reason.find("resume"), std::string::npos) << m.reason;
  EXPECT_TRUE(m.Active());  // a node still to do: resume or abort first
  // Nothing else starts while stopped.
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(63));
  EXPECT_TRUE(ops.cordon.empty());
  ASSERT_TRUE(ResumeMaintenance(m, "bob", kT0).ok());
  // The failed node is out (cordoned), and max-unavailable is 1: the next
  // one waits for it.
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(64));
  EXPECT_TRUE(ops.cordon.empty());
  EXPECT_NE(m.nodes[1 - first].message.find("max-unavailable 1"),
            std::string::npos)
      << m.nodes[1 - first].message;
}

TEST(Maintenance, AFailedCommandStopsTheRunOrNotWithContinue) {
  for (bool stop : {true, false}) {
    Maintenance m = MakeRun(2, 1, 2);
    m.settings.stop_on_failure = stop;
    World w(2);
    StepMaintenance(m, w.facts, kT0);
    auto ops = StepMaintenance(m, w.facts, kT0);
    ASSERT_EQ(ops.send.size(), 1u);
    MaintenanceFacts& f = w.facts[w.Index(ops.send[0])];
    f.report_id = m.CommandId(ops.send[0]);
    f.report_state = "exited";
    f.report_exit_code = 3;
    f.report_output = "E: package not found\n";
    StepMaintenance(m, w.facts, kT0 + absl::Seconds(1));
    const MaintenanceNode& failed = m.nodes[w.Index(ops.send[0])];
    EXPECT_EQ(failed.phase, Phase::kFailed);
    EXPECT_EQ(failed.message, "command exited 3");
    EXPECT_EQ(failed.exit_code, 3);
    EXPECT_EQ(failed.output, "E: package not found\n");
    if (stop) {
      EXPECT_EQ(m.state, State::kFailed);
    } else {
      for (int i = 0; i < 10 && m.state == State::kRunning; ++i) {
        w.Apply(m, StepMaintenance(m, w.facts, kT0 + absl::Seconds(2 + i)));
      }
      EXPECT_EQ(m.state, State::kFailed);  // ended, with a failure
      EXPECT_FALSE(m.Active());
      EXPECT_EQ(m.nodes[1 - w.Index(ops.send[0])].phase, Phase::kDone);
      EXPECT_NE(m.reason.find("failed: "), std::string::npos) << m.reason;
    }
  }
}

TEST(Maintenance, ACommandWithNoReportIsSentAgainUnderTheSameId) {
  Maintenance m = MakeRun(1, 1, 1);
  World w(1);
  StepMaintenance(m, w.facts, kT0);
  auto ops = StepMaintenance(m, w.facts, kT0);
  ASSERT_EQ(ops.send.size(), 1u);
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(5));
  EXPECT_TRUE(ops.send.empty());
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(11));
  EXPECT_EQ(ops.send, std::vector<std::string>{"n0"});
  // Running on the agent: not sent again.
  w.facts[0].report_id = m.CommandId("n0");
  w.facts[0].report_state = "running";
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(30));
  EXPECT_TRUE(ops.send.empty());
  // The agent restarted while it ran (a reboot): checked like a success.
  w.facts[0].report_state = "lost";
  StepMaintenance(m, w.facts, kT0 + absl::Seconds(31));
  EXPECT_EQ(m.nodes[0].phase, Phase::kChecking);
  ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(32));
  EXPECT_EQ(m.nodes[0].phase, Phase::kDone);
  EXPECT_EQ(ops.restore, std::vector<std::string>{"n0"});
}

TEST(Maintenance, MaxUnavailableCountsNodesOutForOtherReasons) {
  Maintenance m = MakeRun(4, 2, 2);
  World w(4);
  w.facts[3].unavailable = true;  // down, say
  w.facts[3].gpus_allocated = 8;  // so it is not in the first batch
  MaintenanceOps ops = StepMaintenance(m, w.facts, kT0);
  EXPECT_EQ(ops.cordon.size(), 1u);  // 1 out already + 1 = 2
}

TEST(Maintenance, PauseLetsNodesUnderWayFinishAndAbortReturnsDrainingOnes) {
  Maintenance m = MakeRun(4, 2, 2);
  World w(4);
  w.facts[1].jobs = 1;
  m.settings.drain_timeout = absl::Hours(1);
  StepMaintenance(m, w.facts, kT0);  // n0 and n1 cordoned
  ASSERT_TRUE(PauseMaintenance(m, "bob", kT0).ok());
  EXPECT_FALSE(PauseMaintenance(m, "bob", kT0).ok());
  auto ops = StepMaintenance(m, w.facts, kT0 + absl::Seconds(1));
  EXPECT_EQ(ops.send, std::vector<std::string>{"n0"});  // under way: goes on
  w.Apply(m, ops);
  for (int i = 0; i < 3; ++i) {
    w.Apply(m, StepMaintenance(m, w.facts, kT0 + absl::Seconds(2 + i)));
  }
  EXPECT_EQ(m.nodes[0].phase, Phase::kDone);
  EXPECT_EQ(m.nodes[2].phase, Phase::kPending);  // nothing new while paused
  std::vector<std::string> restore;
  ASSERT_TRUE(AbortMaintenance(m, "bob", kT0, &restore).ok());
  EXPECT_EQ(restore, std::vector<std::string>{"n1"});
  EXPECT_EQ(m.nodes[1].phase, Phase::kSkipped);
  EXPECT_EQ(m.nodes[3].phase, Phase::kSkipped);
  EXPECT_EQ(m.state, State::kAborted);
  EXPECT_FALSE(m.Active());
  EXPECT_FALSE(ResumeMaintenance(m, "bob", kT0).ok());
  EXPECT_FALSE(AbortMaintenance(m, "bob", kT0, &restore).ok());
}

TEST(Maintenance, RecordRoundTripsEverything) {
  Maintenance m = MakeRun(3, 2, 1);
  m.settings.pool = "h200";
  m.settings.drain_timeout = absl::Seconds(90);
  m.settings.stop_on_failure = false;
  World w(3);
  w.facts[0].cordoned = true;
  w.facts[0].mode_reason = "rack work";
  StepMaintenance(m, w.facts, kT0);
  StepMaintenance(m, w.facts, kT0 + absl::Seconds(1));
  absl::StatusOr<Maintenance> back =
      ReadMaintenanceRecord(MaintenanceRecord(m));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(MaintenanceJson(*back), MaintenanceJson(m));
  EXPECT_EQ(back->settings.nodes, m.settings.nodes);
  for (size_t i = 0; i < m.nodes.size(); ++i) {
    EXPECT_EQ(back->nodes[i].was_cordoned, m.nodes[i].was_cordoned);
    EXPECT_EQ(back->nodes[i].was_reason, m.nodes[i].was_reason);
    EXPECT_EQ(back->nodes[i].sent, m.nodes[i].sent);
  }
  EXPECT_FALSE(ReadMaintenanceRecord("{").ok());
  EXPECT_FALSE(ReadMaintenanceRecord(R"({"id": "x"})").ok());
  EXPECT_FALSE(ReadMaintenanceRecord("[]").ok());
}

TEST(Maintenance, RequestsAreCheckedFieldByField) {
  const std::vector<std::pair<std::string, std::vector<std::string>>> pools = {
      {"h200", {"h200-0", "h200-1"}}, {"a100", {"a100-0"}}};
  const std::vector<std::string> all = {"h200-0", "h200-1", "a100-0"};
  auto parse = [&](const char* text) {
    return ParseMaintenanceRequest(nlohmann::json::parse(text), pools, all);
  };
  absl::StatusOr<MaintenanceSettings> ok =
      parse(R"({"pool": "h200", "batch": 1, "command": "true"})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->nodes, (std::vector<std::string>{"h200-0", "h200-1"}));
  EXPECT_EQ(ok->max_unavailable, 1);
  EXPECT_TRUE(ok->stop_on_failure);
  ok = parse(R"({"nodes": ["a100-0"], "batch": 2, "max_unavailable": 3,
                 "command": "x", "drain_timeout_s": 30, "on_failure": "continue"})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->drain_timeout, absl::Seconds(30));
  EXPECT_FALSE(ok->stop_on_failure);
  for (
      const auto& [text, field] :
      std::vector<std::pair<const char*, const char*>>{
          {R"({"batch": 1, "command": "x"})", "pool, nodes"},
          {R"({"pool": "h200", "nodes": ["a100-0"], "batch": 1, "command": "x"})",
           "pool, nodes"},
          {R"({"pool": "v100", "batch": 1, "command": "x"})", "pool:"},
          {R"({"nodes": ["zz"], "batch": 1, "command": "x"})", "nodes:"},
          {R"({"nodes": ["a100-0", "a100-0"], "batch": 1, "command": "x"})",
           "nodes:"},
          {R"({"pool": "h200", "batch": 0, "command": "x"})", "batch:"},
          {R"({"pool": "h200", "batch": 1})", "command:"},
          {R"({"pool": "h200", "batch": 1, "command": ""})", "command:"},
          {R"({"pool": "h200", "batch": 1, "command": "x", "max_unavailable": 0})",
           "max_unavailable:"},
          {R"({"pool": "h200", "batch": 1, "command": "x", "drain_timeout_s": -1})",
           "drain_timeout_s:"},
          {R"({"pool": "h200", "batch": 1, "command": "x", "ready_timeout_s": 0})",
           "ready_timeout_s:"},
          {R"({"pool": "h200", "batch": 1, "command": "x", "on_failure": "retry"})",
           "on_failure:"},
          {R"({"pool": "h200", "batch": 1, "command": "x", "bach": 2})",
           "bach:"},
      }) {
    absl::StatusOr<MaintenanceSettings> bad = parse(text);
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
    EXPECT_EQ(bad.status().message().rfind(field, 0), 0u)
        << text << ": " << bad.status().message();
  }
}

}  // namespace
}  // namespace loom
