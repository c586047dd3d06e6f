// History and usage in the controller (controller_retention.cc,
// usage_ledger.cc): the usage ledger written with the end of each run,
// finished jobs moved to the accounting store after their retention, and
// what survives a restart. Fake agents; stores in memory.

#include <map>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/common/metrics_text.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/usage_ledger.h"
#include "loom/store/fault_injecting_state_store.h"
#include "loom/store/key_value_accounting_store.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;
using testing::MakeCluster;
using testing::T;

TEST(UsageLedgerTest, SplitsASpanAtHourBoundaries) {
  const absl::Time start = absl::FromUnixSeconds(3 * 3600 + 1800);  // 03:30
  const absl::Time end = absl::FromUnixSeconds(5 * 3600 + 900);     // 05:15
  std::vector<std::pair<absl::Time, double>> parts =
      SplitByHour({start, end, 8});
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].first, absl::FromUnixSeconds(3 * 3600));
  EXPECT_DOUBLE_EQ(parts[0].second, 8 * 1800.0);
  EXPECT_DOUBLE_EQ(parts[1].second, 8 * 3600.0);
  EXPECT_EQ(parts[2].first, absl::FromUnixSeconds(5 * 3600));
  EXPECT_DOUBLE_EQ(parts[2].second, 8 * 900.0);
  EXPECT_TRUE(SplitByHour({end, start, 8}).empty());
  EXPECT_TRUE(SplitByHour({start, end, 0}).empty());
}

TEST(UsageLedgerTest, KeysSortByHourAndReportsGroupThem) {
  EXPECT_LT(UsageKey("zeta", "a", absl::FromUnixSeconds(3600)),
            UsageKey("alpha", "a", absl::FromUnixSeconds(7200)));
  const absl::Time day1 = absl::FromUnixSeconds(0);
  const absl::Time day2 = absl::FromUnixSeconds(86400 + 3600);
  std::vector<UsageEntry> entries = {{"search", "ana", day1, 100},
                                     {"search", "bo", day1, 50},
                                     {"research", "ana", day2, 10},
                                     {"search", "ana", day2, 1}};
  absl::StatusOr<UsageGrouping> by_project = ParseUsageGrouping("project", "");
  ASSERT_TRUE(by_project.ok());
  nlohmann::json r = UsageReport(entries, *by_project);
  ASSERT_EQ(r["rows"].size(), 2u);
  EXPECT_EQ(r["rows"][0]["project"], "research");
  EXPECT_DOUBLE_EQ(r["rows"][1]["gpu_seconds"].get<double>(), 151);
  EXPECT_TRUE(r["rows"][0]["period"].is_null());
  EXPECT_DOUBLE_EQ(r["total_gpu_seconds"].get<double>(), 161);
  absl::StatusOr<UsageGrouping> daily = ParseUsageGrouping("user", "day");
  ASSERT_TRUE(daily.ok());
  r = UsageReport(entries, *daily);
  ASSERT_EQ(r["rows"].size(), 3u);  // ana and bo on day 1, ana on day 2
  EXPECT_EQ(r["rows"][2]["period"], "1970-01-02T00:00:00.000Z");
  EXPECT_DOUBLE_EQ(r["rows"][2]["gpu_seconds"].get<double>(), 11);
  EXPECT_FALSE(r["rows"][0].contains("project"));
  EXPECT_FALSE(ParseUsageGrouping("team", "").ok());
  EXPECT_FALSE(ParseUsageGrouping("user", "week").ok());
}

TEST(UsageLedgerTest, ChargesAddUpInTheStoreAndTheTotals) {
  MemoryStateStore store;
  UsageLedger ledger;
  ASSERT_TRUE(ledger.Load(store).ok());
  for (int round = 0; round < 2; ++round) {
    std::vector<Condition> c;
    std::vector<Mutation> m;
    ASSERT_TRUE(
        ledger.AddWrites(store, {{"search", "ana", {T(0), T(100), 2}}}, &c, &m)
            .ok());
    ASSERT_TRUE(store.Commit(c, m).ok());
    ledger.Finish(true);
  }
  // A commit that failed is not in the totals.
  std::vector<Condition> c;
  std::vector<Mutation> m;
  ASSERT_TRUE(
      ledger.AddWrites(store, {{"search", "ana", {T(0), T(5), 1}}}, &c, &m)
          .ok());
  ledger.Finish(false);
  EXPECT_DOUBLE_EQ((ledger.totals().at({"search", "ana"}).gpu_seconds), 400);
  UsageLedger again;
  ASSERT_TRUE(again.Load(store).ok());
  EXPECT_DOUBLE_EQ((again.totals().at({"search", "ana"}).gpu_seconds), 400);
  absl::StatusOr<std::vector<UsageEntry>> e =
      UsageLedger::Read(store, T(0), T(3600));
  ASSERT_TRUE(e.ok());
  ASSERT_EQ(e->size(), 1u);
  EXPECT_DOUBLE_EQ((*e)[0].gpu_seconds, 400);
  // A garbage entry is skipped, never fatal.
  ASSERT_TRUE(
      store.Commit({}, {Mutation::Put("/usage/0000000000/x/y", "{")}).ok());
  int skipped = 0;
  ASSERT_TRUE(again.Load(store, &skipped).ok());
  EXPECT_EQ(skipped, 1);
}

// A 2-node cluster of 8 GPUs each, with accounting.
class RetentionTest : public ::testing::Test {
 protected:
  RetentionTest()
      : cluster_(MakeCluster({{2, 0}}, 2, 8)),
        faulty_(&store_),
        accounting_(&accounting_kv_) {
    options_.job_retention = absl::Seconds(60);
    // Nodes registered at 0 stay up without heartbeats.
    options_.heartbeat_timeout = absl::Hours(1);
    options_.suspect_after = absl::Minutes(30);
    options_.fence_after = absl::Minutes(50);
    Make();
  }
  void Make() {
    c_.reset();
    auto c =
        Controller::Create(cluster_, &faulty_, options_, T(0), &accounting_);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    for (int n = 0; n < 2; ++n) {
      auto r = c_->Register(
          testing::EmulatedNode("h200-" + std::to_string(n),
                                "127.0.0." + std::to_string(n + 2) + ":7100"),
          T(0));
      ASSERT_TRUE(r.ok()) << r.status();
    }
  }
  JobId Submit(const std::string& extra, double t,
               const std::string& user = "ana") {
    auto j = c_->Submit(testing::Spec("name: train\nproject: default\n"
                                      "command: [python3, train.py]\n" +
                                      extra),
                        user, T(t));
    EXPECT_TRUE(j.ok()) << j.status();
    return j.ok() ? (*j)["id"].get<JobId>() : 0;
  }
  std::vector<AgentAction> Launches() {
    std::vector<AgentAction> out;
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind == AgentAction::Kind::kLaunch) out.push_back(std::move(a));
    }
    return out;
  }
  void Exit(const AgentAction& launch, int code, double t) {
    auto r = c_->Heartbeat({{"name", launch.node},
                            {"tasks",
                             {{{"task_id", launch.task_id},
                               {"state", "exited"},
                               {"exit_code", code}}}}},
                           T(t));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // Runs one 8-GPU job from `start` to `end` with exit `code`.
  JobId RunJob(double start, double end, int code = 0,
               const std::string& extra = "") {
    const JobId id = Submit("resources: {gpus: 8}\n" + extra, start);
    c_->Tick(T(start));
    std::vector<AgentAction> l = Launches();
    EXPECT_EQ(l.size(), 1u);
    if (l.size() != 1) return id;
    Exit(l[0], code, end);
    return id;
  }
  // loom_gpu_seconds_total of ana in project default.
  double Counter(double t) {
    std::string text;
    MetricsWriter w(&text);
    c_->WriteMetrics(w, T(t));
    const std::string key =
        "loom_gpu_seconds_total{project=\"default\",user=\"ana\"} ";
    const size_t at = text.find(key);
    if (at == std::string::npos) return 0;
    return std::stod(text.substr(at + key.size()));
  }
  nlohmann::json Sacct(FinishedJobQuery q, double t) {
    auto r = c_->AccountingJobs(q, T(t));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)["jobs"] : nlohmann::json::array();
  }
  double Usage(double t) {
    absl::StatusOr<UsageGrouping> g = ParseUsageGrouping("project,user", "");
    auto r = c_->ReportUsage(*g, T(-3600), T(t), T(t));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? (*r)["total_gpu_seconds"].get<double>() : -1;
  }

  Cluster cluster_;
  MemoryStateStore store_;
  FaultInjectingStateStore faulty_;
  MemoryStateStore accounting_kv_;
  KeyValueAccountingStore accounting_;
  ControllerOptions options_;
  std::unique_ptr<Controller> c_;
};

TEST_F(RetentionTest, ARunsGpuSecondsGoToTheLedgerWithItsEnd) {
  const JobId id = Submit("resources: {gpus: 8}\n", 10);
  c_->Tick(T(10));
  std::vector<AgentAction> l = Launches();
  ASSERT_EQ(l.size(), 1u);
  EXPECT_DOUBLE_EQ(Counter(50), 8 * 40.0);  // running: counted live
  EXPECT_DOUBLE_EQ(Usage(50), 8 * 40.0);
  Exit(l[0], 0, 110);
  EXPECT_DOUBLE_EQ(Counter(200), 800);
  EXPECT_DOUBLE_EQ(Usage(200), 800);
  absl::StatusOr<std::vector<KeyValue>> kvs = store_.List(kUsagePrefix);
  ASSERT_TRUE(kvs.ok());
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_THAT((*kvs)[0].value, HasSubstr("\"gpu_seconds\":800"));
  nlohmann::json rows = Sacct({}, 200);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], id);
  EXPECT_EQ(rows[0]["live"], true);
  EXPECT_EQ(rows[0]["state"], "succeeded");
  EXPECT_DOUBLE_EQ(rows[0]["gpu_seconds"].get<double>(), 800);
  EXPECT_DOUBLE_EQ(rows[0]["elapsed_seconds"].get<double>(), 100);
  EXPECT_EQ(rows[0]["nodes"].size(), 1u);
}

TEST_F(RetentionTest, AFailedWriteKeepsTheRunForTheNextOne) {
  const JobId id = Submit("resources: {gpus: 8}\n", 10);
  c_->Tick(T(10));
  std::vector<AgentAction> l = Launches();
  ASSERT_EQ(l.size(), 1u);
  faulty_.FailNextCommits(1, absl::UnavailableError("disk busy"));
  Exit(l[0], 0, 110);
  // Not on disk, but counted (the counter never goes back).
  EXPECT_DOUBLE_EQ(Counter(120), 800);
  absl::StatusOr<std::vector<KeyValue>> kvs = store_.List(kUsagePrefix);
  ASSERT_TRUE(kvs.ok());
  EXPECT_TRUE(kvs->empty());
  // The next pass writes it, once.
  EXPECT_EQ(c_->PurgeExpiredJobs(T(130)), 0);
  kvs = store_.List(kUsagePrefix);
  ASSERT_TRUE(kvs.ok());
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_DOUBLE_EQ(Counter(140), 800);
  Make();  // a restart reads it back
  EXPECT_DOUBLE_EQ(Counter(140), 800);
  EXPECT_EQ(Sacct({}, 140)[0]["id"], id);
}

TEST_F(RetentionTest, AnInfiniteRetentionKeepsFinishedJobs) {
  // `loom server --job-retention 0`, as Slurm's MinJobAge=0: never purged.
  options_.job_retention = absl::InfiniteDuration();
  Make();
  const JobId id = RunJob(100, 110);
  EXPECT_EQ(c_->PurgeExpiredJobs(T(1e9)), 0);
  EXPECT_TRUE(c_->GetJob(id, T(1e9)).ok());
}

TEST_F(RetentionTest, FinishedJobsMoveToAccountingAfterTheirRetention) {
  const JobId ok = RunJob(10, 110);
  const JobId bad = RunJob(120, 130, 3);
  const JobId running = Submit("resources: {gpus: 8}\n", 140);
  c_->Tick(T(140));
  ASSERT_EQ(Launches().size(), 1u);
  EXPECT_EQ(c_->PurgeExpiredJobs(T(150)), 0);    // not 60 s since they ended
  EXPECT_EQ(c_->PurgeExpiredJobs(T(171)), 1);    // the first only
  EXPECT_EQ(c_->PurgeExpiredJobs(T(171.5)), 0);  // at most one scan a second
  EXPECT_EQ(c_->PurgeExpiredJobs(T(200)), 1);
  // Out of the live state and the store, into accounting.
  auto gone = c_->GetJob(ok, T(200));
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(gone.status().message(),
              HasSubstr("succeeded and has left the live state"));
  EXPECT_THAT(gone.status().message(), HasSubstr("loom sacct -j"));
  EXPECT_EQ(c_->ListJobs({}, T(200))["jobs"].size(), 1u);
  EXPECT_FALSE(store_.Get(JobKey(ok)).ok());
  absl::StatusOr<int64_t> n = accounting_.Count();
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(*n, 2);
  std::string metrics;
  MetricsWriter w(&metrics);
  c_->WriteMetrics(w, T(200));
  EXPECT_THAT(metrics, HasSubstr("\nloom_jobs_purged_total 2\n"));
  // sacct shows all three, the running one live.
  nlohmann::json rows = Sacct({}, 200);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0]["id"], ok);
  EXPECT_EQ(rows[0]["live"], false);
  EXPECT_DOUBLE_EQ(rows[0]["gpu_seconds"].get<double>(), 800);
  EXPECT_EQ(rows[1]["state"], "failed");
  EXPECT_EQ(rows[1]["exit_code"], 3);
  EXPECT_EQ(rows[2]["id"], running);
  EXPECT_EQ(rows[2]["live"], true);
  // Filters apply to both.
  FinishedJobQuery failed;
  failed.states = {"failed"};
  rows = Sacct(failed, 200);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["id"], bad);
  FinishedJobQuery window;
  window.since = T(115);
  rows = Sacct(window, 200);
  ASSERT_EQ(rows.size(), 2u);  // the first ended before 115
  // The counter and the report keep every GPU-second.
  EXPECT_DOUBLE_EQ(Counter(200), 800 + 80 + 8 * 60);
  EXPECT_DOUBLE_EQ(Usage(200), 800 + 80 + 8 * 60);
  // And so does a restart, which never gives a purged job's ID again.
  Make();
  EXPECT_GE(Counter(200), 800 + 80 + 8 * 60);
  EXPECT_EQ(Sacct({}, 200).size(), 3u);
  EXPECT_GT(Submit("resources: {gpus: 8}\n", 201), running);
}

TEST_F(RetentionTest, ADependencyOnAPurgedJobIsJudgedByItsEnd) {
  const JobId ok = RunJob(10, 20);
  ASSERT_EQ(c_->PurgeExpiredJobs(T(100)), 1);
  // afterok on a purged job that succeeded: met, it runs.
  const JobId next = Submit(
      "resources: {gpus: 8}\ndependency: afterok:" + std::to_string(ok) + "\n",
      101);
  c_->Tick(T(101));
  EXPECT_EQ(Launches().size(), 1u);
  auto j = c_->GetJob(next, T(102));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["state"], "running");
  // afternotok: never.
  const JobId never = Submit("resources: {gpus: 8}\ndependency: afternotok:" +
                                 std::to_string(ok) + "\n",
                             103);
  c_->Tick(T(103));
  j = c_->GetJob(never, T(104));
  ASSERT_TRUE(j.ok()) << j.status();
  EXPECT_EQ((*j)["state"], "pending");
  EXPECT_THAT((*j)["reason"].get<std::string>(), HasSubstr("succeeded"));
  // A job that never was is still refused.
  auto none = c_->Submit(
      testing::Spec("name: x\ncommand: [x]\ndependency: afterok:999\n"), "ana",
      T(105));
  EXPECT_FALSE(none.ok());
}

TEST_F(RetentionTest, AnArrayMovesWithAllItsElements) {
  const JobId a = Submit("resources: {gpus: 8}\narray: 0-2\n", 10);
  for (int round = 0; round < 3; ++round) {
    c_->Tick(T(10 + round));
    for (const AgentAction& l : Launches()) Exit(l, 0, 10.5 + round);
  }
  c_->Tick(T(20));
  auto j = c_->GetJob(a, T(20));
  ASSERT_TRUE(j.ok());
  ASSERT_EQ((*j)["state"], "succeeded") << j->dump();
  EXPECT_EQ(c_->PurgeExpiredJobs(T(100)), 4);  // the array and 3 elements
  nlohmann::json rows = Sacct({}, 100);
  ASSERT_EQ(rows.size(), 3u);  // the elements, not the array's record
  EXPECT_EQ(rows[0]["ref"], std::to_string(a) + "_0");
  EXPECT_EQ(rows[2]["ref"], std::to_string(a) + "_2");
  EXPECT_TRUE(c_->ListJobs({}, T(100))["jobs"].empty());
  // Nothing runs again after a restart, and no ID is given twice.
  Make();
  c_->Tick(T(101));
  EXPECT_TRUE(Launches().empty());
  EXPECT_EQ(Submit("resources: {gpus: 8}\n", 102), a + 4);
  auto purged = c_->GetJob(a, T(103));
  ASSERT_FALSE(purged.ok());
  EXPECT_THAT(purged.status().message(), HasSubstr("left the live state"));
}

// As sacct -j: an array's ID stands for its elements and "A_I" for one,
// while the array is live and once it is purged (then from the store).
TEST_F(RetentionTest, SacctNamesArraysAndElementsLiveAndPurged) {
  const JobId other = RunJob(5, 6);
  const JobId a = Submit("resources: {gpus: 8}\narray: 3,5,7\n", 10);
  for (int round = 0; round < 3; ++round) {
    c_->Tick(T(10 + round));
    for (const AgentAction& l : Launches()) {
      // Index 5 fails.
      Exit(l, l.body["env"].value("LOOM_ARRAY_TASK_ID", "") == "5" ? 2 : 0,
           10.5 + round);
    }
  }
  c_->Tick(T(20));
  auto refs = [](const nlohmann::json& rows) {
    std::vector<std::string> out;
    for (const nlohmann::json& r : rows) out.push_back(r["ref"]);
    return out;
  };
  auto sacct = [&](std::vector<int64_t> ids,
                   std::vector<ArrayElementRef> elements, double t,
                   std::vector<std::string> states = {}) {
    FinishedJobQuery q;
    q.ids = std::move(ids);
    q.states = std::move(states);
    auto r = c_->AccountingJobs(q, T(t), elements);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? refs((*r)["jobs"]) : std::vector<std::string>{};
  };
  const std::string p = std::to_string(a) + "_";
  for (double t : {30.0, 200.0}) {
    if (t == 200) {
      ASSERT_EQ(c_->PurgeExpiredJobs(T(t)), 5) << "the array, 3 elements, "
                                                  "the other job";
      ASSERT_FALSE(c_->GetJob(a, T(t)).ok());
    }
    EXPECT_EQ(sacct({a}, {}, t),
              (std::vector<std::string>{p + "3", p + "5", p + "7"}))
        << "at " << t;
    EXPECT_EQ(sacct({}, {{a, 5}}, t), (std::vector<std::string>{p + "5"}));
    EXPECT_EQ(sacct({other}, {{a, 7}}, t),
              (std::vector<std::string>{std::to_string(other), p + "7"}));
    // Other filters still apply; an index the array lacks is nothing.
    EXPECT_EQ(sacct({a}, {}, t, {"failed"}),
              (std::vector<std::string>{p + "5"}));
    EXPECT_TRUE(sacct({}, {{a, 4}}, t).empty());
    EXPECT_TRUE(sacct({}, {{a + 100, 1}}, t).empty());
  }
}

TEST_F(RetentionTest, AFailedMoveLeavesTheJobsLive) {
  const JobId id = RunJob(10, 20);
  faulty_.FailNextCommits(1, absl::UnavailableError("disk busy"));
  EXPECT_EQ(c_->PurgeExpiredJobs(T(100)), 0);
  // In accounting already, still live: shown once.
  nlohmann::json rows = Sacct({}, 100);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["live"], true);
  EXPECT_TRUE(c_->GetJob(id, T(100)).ok());
  EXPECT_EQ(c_->PurgeExpiredJobs(T(102)), 1);
  rows = Sacct({}, 103);
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]["live"], false);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST_F(RetentionTest, PurgedJobsLeaveTheUsersJobLimit) {
  options_.max_jobs_per_user = 2;
  Make();
  RunJob(10, 20);
  RunJob(21, 30);
  ASSERT_EQ(c_->PurgeExpiredJobs(T(100)), 2);
  // Two more: the purged ones no longer count as unfinished.
  EXPECT_NE(Submit("resources: {gpus: 8}\n", 101), 0);
  EXPECT_NE(Submit("resources: {gpus: 8}\n", 102), 0);
}

TEST_F(RetentionTest, ALargeArrayMovesOverSeveralPasses) {
  const JobId a = Submit("resources: {gpus: 1}\narray: 0-2499\n", 10);
  double t = 10;
  for (int round = 0; round < 400; ++round) {
    c_->Tick(T(t));
    std::vector<AgentAction> l = Launches();
    if (l.empty() && round > 0) break;
    // Both nodes report their tasks' ends in one heartbeat each.
    std::map<std::string, nlohmann::json> ends;
    for (const AgentAction& x : l) {
      ends[x.node].push_back(
          {{"task_id", x.task_id}, {"state", "exited"}, {"exit_code", 0}});
    }
    t += 0.5;
    for (auto& [node, tasks] : ends) {
      ASSERT_TRUE(c_->Heartbeat({{"name", node}, {"tasks", tasks}}, T(t)).ok());
    }
    t += 0.5;
  }
  c_->Tick(T(t));
  auto j = c_->GetJob(a, T(t));
  ASSERT_TRUE(j.ok());
  ASSERT_EQ((*j)["state"], "succeeded") << (*j)["array"].dump();
  EXPECT_EQ(c_->PurgeExpiredJobs(T(t + 100)), 2000);  // elements only
  EXPECT_TRUE(c_->GetJob(a, T(t + 100)).ok());
  // A dependency on a moved element of the half-moved array is judged from
  // accounting, not taken for a pending element.
  const JobId dep = Submit(
      "resources: {gpus: 8}\ndependency: afterok:" + std::to_string(a) + "_5\n",
      t + 100);
  c_->Tick(T(t + 100));
  auto d = c_->GetJob(dep, T(t + 100));
  ASSERT_TRUE(d.ok());
  EXPECT_EQ((*d)["state"], "running") << d->dump();
  EXPECT_EQ(c_->PurgeExpiredJobs(T(t + 102)), 501);  // the rest, then it
  EXPECT_FALSE(c_->GetJob(a, T(t + 102)).ok());
  EXPECT_EQ(Sacct({}, t + 102).size(), 2501u);  // the elements and `dep`
}

}  // namespace
}  // namespace loom
