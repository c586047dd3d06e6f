#include "loom/cli/maintain_verbs.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/cli/cli_test_util.h"

namespace loom {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

// One node of a maintenance's `node_status`.
Json MaintNode(const std::string& name, int batch, const std::string& phase,
               const std::string& message = "", absl::Duration ago = {}) {
  return {{"name", name},         {"batch", batch},
          {"phase", phase},       {"since", Rfc3339(kNow - ago)},
          {"exit_code", nullptr}, {"message", message},
          {"output", ""}};
}

// Maintenance 3 of pool h200 (4 nodes, batches of 2) in batch `current`.
Json MaintSnapshot(const std::string& state, int current,
                   std::vector<Json> nodes, const std::string& reason = "") {
  Json counts = {
      {"pending", 0}, {"in_progress", 0}, {"done", 0}, {"failed", 0}};
  for (const Json& n : nodes) {
    const std::string phase = n["phase"];
    // As the server counts them: a skipped node is pending.
    if (phase == "pending" || phase == "skipped") {
      counts["pending"] = counts["pending"].get<int>() + 1;
    } else if (phase == "done") {
      counts["done"] = counts["done"].get<int>() + 1;
    } else if (phase == "failed") {
      counts["failed"] = counts["failed"].get<int>() + 1;
    } else {
      counts["in_progress"] = counts["in_progress"].get<int>() + 1;
    }
  }
  return {
      {"id", 3},
      {"state", state},
      {"reason", reason},
      {"author", "alice"},
      {"created", Rfc3339(kNow - absl::Minutes(20))},
      {"updated", Rfc3339(kNow)},
      {"ended",
       state == "running" || state == "paused" ? Json() : Json(Rfc3339(kNow))},
      {"command", "apt-get install -y nvidia-driver-550"},
      {"pool", "h200"},
      {"batch", 2},
      {"max_unavailable", 2},
      {"drain_timeout_s", 0},
      {"ready_timeout_s", 600},
      {"on_failure", "stop"},
      {"batches_total", 2},
      {"batch_current", current},
      {"counts", counts},
      {"node_status", nodes}};
}

// The snapshots of a maintenance that fails in its second batch.
std::vector<Json> FailingRun() {
  Json failed = MaintNode("h200-3", 2, "failed", "command exited 3");
  failed["exit_code"] = 3;
  failed["output"] = "Reading package lists...\nE: Unable to locate package\n";
  return {
      // A node's batch is 0 until its batch starts.
      MaintSnapshot(
          "running", 0,
          {MaintNode("h200-0", 0, "pending"), MaintNode("h200-1", 0, "pending"),
           MaintNode("h200-2", 0, "pending"),
           MaintNode("h200-3", 0, "pending")}),
      MaintSnapshot(
          "running", 1,
          {MaintNode("h200-0", 1, "draining", "moving 1 job off"),
           MaintNode("h200-1", 1, "running", "running the command"),
           MaintNode("h200-2", 0, "pending", "waiting for batch 1 to end"),
           MaintNode("h200-3", 0, "pending")},
          "batch 1: draining h200-0"),
      MaintSnapshot(
          "running", 2,
          {MaintNode("h200-0", 1, "done"), MaintNode("h200-1", 1, "done"),
           MaintNode("h200-2", 2, "checking",
                     "waiting for h200-2 to come back"),
           failed},
          "batch 2"),
      MaintSnapshot(
          "failed", 2,
          {MaintNode("h200-0", 1, "done"), MaintNode("h200-1", 1, "done"),
           MaintNode("h200-2", 2, "done"), failed},
          "h200-3 failed: command exited 3"),
  };
}

TEST(MaintenanceRequest, BuildsTheBody) {
  MaintainFlags f;
  f.pool = "h200";
  f.command = "apt-get install -y nvidia-driver-550";
  f.batch = "2";
  absl::StatusOr<Json> r = MaintenanceRequest(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Json({{"pool", "h200"},
                      {"command", "apt-get install -y nvidia-driver-550"},
                      {"batch", 2}}));
  f.pool = "";
  f.nodes = {"h200-0", "h200-1"};
  f.max_unavailable = "3";
  f.drain_timeout = "10m";
  f.ready_timeout = "1.5s";
  f.on_failure = "continue";
  r = MaintenanceRequest(f);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, Json({{"nodes", {"h200-0", "h200-1"}},
                      {"command", "apt-get install -y nvidia-driver-550"},
                      {"batch", 2},
                      {"max_unavailable", 3},
                      {"drain_timeout_s", 600},
                      {"ready_timeout_s", 1.5},
                      {"on_failure", "continue"}}));
  EXPECT_EQ(r->dump().find("600.0"), std::string::npos);
}

TEST(MaintenanceRequest, ErrorsNameTheFlag) {
  const auto error = [](auto change) {
    MaintainFlags f;
    f.pool = "h200";
    f.command = "true";
    f.batch = "2";
    change(f);
    absl::StatusOr<Json> r = MaintenanceRequest(f);
    return r.ok() ? std::string("ok") : std::string(r.status().message());
  };
  EXPECT_EQ(error([](MaintainFlags&) {}), "ok");
  EXPECT_EQ(error([](MaintainFlags& f) { f.nodes = {"a"}; }),
            "--pool and --nodes: give one of them, not both");
  EXPECT_THAT(error([](MaintainFlags& f) { f.pool = ""; }),
              HasSubstr("--pool POOL or --nodes N1,N2"));
  EXPECT_THAT(error([](MaintainFlags& f) {
                f.pool = "";
                f.nodes = {"a", "", "b"};
              }),
              HasSubstr("--nodes: an empty name"));
  EXPECT_EQ(error([](MaintainFlags& f) {
              f.pool = "";
              f.nodes = {"a", "a"};
            }),
            "--nodes: a is named twice");
  EXPECT_THAT(error([](MaintainFlags& f) { f.command = "  "; }),
              HasSubstr("--run: give the command"));
  EXPECT_THAT(error([](MaintainFlags& f) { f.batch = ""; }),
              HasSubstr("--batch: give how many"));
  EXPECT_EQ(error([](MaintainFlags& f) { f.batch = "0"; }),
            "--batch: '0' is not a whole number >= 1");
  EXPECT_EQ(error([](MaintainFlags& f) { f.batch = "two"; }),
            "--batch: 'two' is not a whole number >= 1");
  EXPECT_EQ(error([](MaintainFlags& f) { f.max_unavailable = "-1"; }),
            "--max-unavailable: '-1' is not a whole number >= 1");
  EXPECT_THAT(error([](MaintainFlags& f) { f.drain_timeout = "soon"; }),
              HasSubstr("--drain-timeout: 'soon' is not a duration"));
  EXPECT_THAT(error([](MaintainFlags& f) { f.ready_timeout = "1h1h"; }),
              HasSubstr("--ready-timeout: "));
  EXPECT_EQ(error([](MaintainFlags& f) { f.drain_timeout = "0"; }), "ok");
  EXPECT_THAT(error([](MaintainFlags& f) { f.on_failure = "retry"; }),
              HasSubstr("--on-failure: 'retry'"));
}

TEST(FormatMaintenanceStarted, PoolOrNodes) {
  EXPECT_EQ(FormatMaintenanceStarted(FailingRun()[0]),
            "maintenance 3 started: 4 nodes of pool h200 in 2 batches of 2 "
            "(at most 2 out at once)");
  Json m = {{"id", 4},
            {"pool", ""},
            {"batch", 1},
            {"max_unavailable", 1},
            {"batches_total", 1},
            {"node_status", {MaintNode("a100-7", 1, "pending")}}};
  EXPECT_EQ(FormatMaintenanceStarted(m),
            "maintenance 4 started: 1 node (a100-7) in 1 batch of 1 (at most "
            "1 out at once)");
  // Without `node_status`, the counts say how many.
  m.erase("node_status");
  m["counts"] = {{"pending", 5}, {"in_progress", 1}};
  m["batches_total"] = 6;
  EXPECT_EQ(FormatMaintenanceStarted(m),
            "maintenance 4 started: 6 nodes in 6 batches of 1 (at most 1 out "
            "at once)");
}

TEST(FormatMaintenanceStatus, HeaderTableAndFailures) {
  std::vector<Json> run = FailingRun();
  Json m = run[2];
  m["node_status"][0]["since"] = Rfc3339(kNow - absl::Minutes(4));
  // Listed in batch order, else in the server's order.
  std::swap(m["node_status"][0], m["node_status"][3]);
  EXPECT_EQ(FormatMaintenanceStatus(m, kNow),
            "maintenance 3 running, batch 2 of 2: 2 done, 1 in progress, 0 "
            "pending, 1 failed; batch 2\n"
            "  pool h200, batches of 2 (at most 2 out), on failure stop, by "
            "alice, started 20m ago\n"
            "  run: apt-get install -y nvidia-driver-550\n"
            "\n"
            "NODE    BATCH  PHASE     SINCE   MESSAGE\n"
            "h200-1  1      done      0s ago  -\n"
            "h200-0  1      done      4m ago  -\n"
            "h200-3  2      failed    0s ago  command exited 3\n"
            "h200-2  2      checking  0s ago  waiting for h200-2 to come "
            "back\n"
            "\n"
            "h200-3, last output:\n"
            "    Reading package lists...\n"
            "    E: Unable to locate package\n");
  EXPECT_THAT(FormatMaintenanceStatus(run[1], kNow),
              HasSubstr("h200-1  1      running   0s ago  running the "
                        "command\n"
                        "h200-2  -      pending   0s ago  waiting for batch 1 "
                        "to end\n"
                        "h200-3  -      pending   0s ago  -\n"));
  EXPECT_EQ(FormatMaintenanceHeader(run[0]),
            "maintenance 3 running, no batch started yet (2 batches): 0 "
            "done, 0 in progress, 4 pending, 0 failed");
  EXPECT_THAT(FormatMaintenanceStatus(run[3], kNow),
              HasSubstr("started 20m ago, ended 0s ago\n"));
  // A summary (as listed) has no nodes: no table.
  Json summary = run[1];
  summary.erase("node_status");
  EXPECT_THAT(FormatMaintenanceStatus(summary, kNow), Not(HasSubstr("NODE")));
  // Whatever is missing, it formats.
  EXPECT_EQ(FormatMaintenanceStatus(Json::object(), kNow),
            "maintenance 0 , no batch started yet (0 batches): 0 done, 0 in "
            "progress, 0 pending, 0 failed\n"
            "  nodes, batches of 0 (at most 0 out), on failure stop\n"
            "  run: \n");
}

TEST(FormatMaintenanceProgress, LinesPerChange) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  const absl::Time at = absl::FromUnixSeconds(1795969203);  // 16:20:03Z
  std::vector<Json> run = FailingRun();
  EXPECT_EQ(FormatMaintenanceProgress(run[0], run[0], at, utc), "");
  EXPECT_EQ(FormatMaintenanceProgress(run[0], run[1], at, utc),
            "16:20:03 batch 1 of 2 started: h200-0, h200-1\n"
            "16:20:03 batch 1 h200-0 draining: moving 1 job off\n"
            "16:20:03 batch 1 h200-1 running: running the command\n");
  EXPECT_EQ(FormatMaintenanceProgress(run[1], run[2], at, utc),
            "16:20:03 batch 1 h200-0 done\n"
            "16:20:03 batch 1 h200-1 done\n"
            "16:20:03 batch 1 of 2 ended: 2 done\n"
            "16:20:03 batch 2 of 2 started: h200-2, h200-3\n"
            "16:20:03 batch 2 h200-2 checking: waiting for h200-2 to come "
            "back\n"
            "16:20:03 batch 2 h200-3 failed: command exited 3\n"
            "    Reading package lists...\n"
            "    E: Unable to locate package\n");
  EXPECT_EQ(FormatMaintenanceProgress(run[2], run[3], at, utc),
            "16:20:03 batch 2 h200-2 done\n"
            "16:20:03 batch 2 of 2 ended: 1 done, 1 failed\n"
            "16:20:03 maintenance 3 failed: 3 done, 0 in progress, 0 "
            "pending, 1 failed; h200-3 failed: command exited 3\n");
  // Pause and resume; a message that changes within a phase is no line.
  Json paused = run[1];
  paused["state"] = "paused";
  paused["reason"] = "paused by alice";
  paused["node_status"][0]["message"] = "moving 0 jobs off";
  EXPECT_EQ(FormatMaintenanceProgress(run[1], paused, at, utc),
            "16:20:03 maintenance 3 paused: paused by alice\n");
  Json resumed = run[1];
  resumed["reason"] = "";
  EXPECT_EQ(FormatMaintenanceProgress(paused, resumed, at, utc),
            "16:20:03 maintenance 3 resumed\n");
  // An abort: the nodes not started are skipped, in one line; the run is
  // over once its node in flight has ended.
  Json aborted = run[1];
  aborted["state"] = "aborted";
  aborted["reason"] =
      "aborted by carol; nodes whose command was sent are followed to their "
      "end";
  aborted["ended"] = nullptr;
  for (int i : {0, 2, 3}) {
    aborted["node_status"][i]["phase"] = "skipped";
    aborted["node_status"][i]["message"] = "aborted by carol";
  }
  EXPECT_FALSE(MaintenanceOver(aborted));
  EXPECT_EQ(FormatMaintenanceProgress(run[1], aborted, at, utc),
            "16:20:03 batch 1 h200-0 skipped: aborted by carol\n"
            "16:20:03 h200-2, h200-3 skipped: aborted by carol\n"
            "16:20:03 maintenance 3 aborted: aborted by carol; nodes whose "
            "command was sent are followed to their end\n");
  Json over = aborted;
  over["node_status"][1]["phase"] = "done";
  over["node_status"][1]["message"] = "back in service";
  over["ended"] = Rfc3339(kNow);
  over["counts"] = {
      {"pending", 0}, {"in_progress", 0}, {"done", 1}, {"failed", 3}};
  EXPECT_TRUE(MaintenanceOver(over));
  EXPECT_EQ(FormatMaintenanceProgress(aborted, over, at, utc),
            "16:20:03 batch 1 h200-1 done: back in service\n"
            "16:20:03 batch 1 of 2 ended: 1 done, 1 skipped\n"
            "16:20:03 maintenance 3 aborted: 1 done, 0 in progress, 0 "
            "pending, 3 failed; aborted by carol; nodes whose command was "
            "sent are followed to their end\n");
  // Resumed after a stop on failure; a done one's reason is not repeated.
  EXPECT_THAT(FormatMaintenanceProgress(run[3], run[2], at, utc),
              HasSubstr("16:20:03 maintenance 3 resumed: batch 2\n"));
  Json done = run[3];
  done["state"] = "done";
  done["reason"] = "done: 4 nodes maintained";
  EXPECT_THAT(FormatMaintenanceProgress(run[2], done, at, utc),
              HasSubstr("maintenance 3 done: 3 done, 0 in progress, 0 "
                        "pending, 1 failed; 4 nodes maintained\n"));
  EXPECT_EQ(FormatMaintenanceHeader(done),
            "maintenance 3 done, batch 2 of 2: 3 done, 0 in progress, 0 "
            "pending, 1 failed; 4 nodes maintained");
  // Many nodes in a batch: the first 8 named.
  Json big = MaintSnapshot("running", 1, {});
  for (int i = 0; i < 10; ++i) {
    big["node_status"].push_back(
        MaintNode(absl::StrCat("n", i), 1, "draining"));
  }
  EXPECT_THAT(FormatMaintenanceProgress(run[0], big, at, utc),
              HasSubstr("started: n0, n1, n2, n3, n4, n5, n6, n7 and 2 "
                        "more\n"));
  // Not objects: nothing, no exception.
  EXPECT_EQ(FormatMaintenanceProgress(Json(), Json::array(), at, utc), "");
}

// The verbs against a fake server holding maintenance 3 (and 2, older):
// each GET of maintenance 3 answers the next of `snapshots_`.
class MaintainVerbTest : public VerbTest {
 protected:
  void SetUp() override {
    httplib::Server& s = fake_.server();
    s.Post("/v1/maintenance", [this](const httplib::Request& req,
                                     httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = Json::parse(req.body, nullptr, false);
      if (started_.value("pool", "") == "busy") {
        res.status = 409;
        res.set_content(Json({{"error",
                               {{"code", "conflict"},
                                {"message", "maintenance 2 is running"}}}})
                            .dump(),
                        "application/json");
        return;
      }
      res.status = 201;
      res.set_content(snapshots_[0].dump(), "application/json");
    });
    s.Get("/v1/maintenance",
          [this](const httplib::Request&, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu_);
            Json list = Json::array();
            if (!none_) list = {{{"id", 2}}, {{"id", 3}}};
            res.set_content(Json({{"maintenances", list}}).dump(),
                            "application/json");
          });
    s.Get(R"(/v1/maintenance/(\d+))", [this](const httplib::Request& req,
                                             httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (req.matches[1] != "3") {
        res.status = 404;
        res.set_content(
            Json({{"error",
                   {{"code", "not_found"},
                    {"message", absl::StrCat("no maintenance ",
                                             std::string(req.matches[1]))}}}})
                .dump(),
            "application/json");
        return;
      }
      const size_t i = std::min(gets_++, snapshots_.size() - 1);
      res.set_content(snapshots_[i].dump(), "application/json");
    });
    s.Post(R"(/v1/maintenance/(\d+)/(\w+))", [this](const httplib::Request& req,
                                                    httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      actions_.push_back(absl::StrCat(std::string(req.matches[1]), " ",
                                      std::string(req.matches[2])));
      if (req.matches[2] == "resume") {
        res.status = 409;
        res.set_content(Json({{"error",
                               {{"code", "conflict"},
                                {"message",
                                 "maintenance 3 is done; there is nothing to "
                                 "resume"}}}})
                            .dump(),
                        "application/json");
        return;
      }
      Json m = snapshots_[1];
      m["state"] = req.matches[2] == "pause" ? "paused" : "aborted";
      m["reason"] =
          req.matches[2] == "pause" ? "paused by carol" : "aborted by carol";
      res.set_content(m.dump(), "application/json");
    });
    VerbTest::SetUp();
  }

  std::vector<Json> snapshots_ = FailingRun();
  Json started_;
  size_t gets_ = 0;
  bool none_ = false;
  std::vector<std::string> actions_;
};

TEST_F(MaintainVerbTest, StartsAndSaysHowToFollow) {
  CliResult r = Run({"maintain", "--pool", "h200", "--batch", "2", "--run",
                     "apt-get install -y nvidia-driver-550", "--drain-timeout",
                     "90s", "--on-failure", "continue"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "maintenance 3 started: 4 nodes of pool h200 in 2 batches of 2 "
            "(at most 2 out at once)\n"
            "`loom maintain status 3 -w` follows it.\n");
  EXPECT_EQ(started_, Json({{"pool", "h200"},
                            {"command", "apt-get install -y nvidia-driver-550"},
                            {"batch", 2},
                            {"drain_timeout_s", 90},
                            {"on_failure", "continue"}}));
  EXPECT_EQ(gets_, 0u);

  r = Run({"maintain", "--pool", "busy", "--batch", "2", "--run", "true"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom maintain: maintenance 2 is running\n");
}

TEST_F(MaintainVerbTest, WaitFollowsUntilItEnds) {
  CliResult r = Run({"maintain", "--nodes", "h200-0,h200-1,h200-2,h200-3",
                     "--batch", "2", "--run", "upgrade", "--wait"});
  EXPECT_EQ(r.rc, 1) << r.err;  // it failed
  EXPECT_EQ(started_["nodes"], Json({"h200-0", "h200-1", "h200-2", "h200-3"}));
  EXPECT_THAT(r.out, HasSubstr("maintenance 3 started: 4 nodes of pool h200"));
  EXPECT_THAT(r.out, Not(HasSubstr("follows it")));
  EXPECT_THAT(r.out, ContainsRegex("\n[0-9:]{8} batch 1 of 2 started: "
                                   "h200-0, h200-1\n"));
  EXPECT_THAT(r.out, ContainsRegex("\n[0-9:]{8} batch 2 h200-3 failed: "
                                   "command exited 3\n    Reading"));
  EXPECT_THAT(r.out, ContainsRegex("\n[0-9:]{8} maintenance 3 failed: .*; "
                                   "h200-3 failed: command exited 3\n$"));

  // Done: exit 0.
  snapshots_.back()["state"] = "done";
  gets_ = 0;
  r = Run({"maintain", "--pool", "h200", "--batch", "2", "--run", "upgrade",
           "--wait"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, ContainsRegex("maintenance 3 done: 3 done"));
}

TEST_F(MaintainVerbTest, StatusOfTheNewestOrOne) {
  gets_ = 2;
  CliResult r = Run({"maintain", "status"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("maintenance 3 running, batch 2 of 2: 2 done"));
  EXPECT_THAT(r.out, ContainsRegex("h200-3 +2 +failed +0s ago +command "
                                   "exited 3\n"));
  r = Run({"maintain", "status", "3", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["state"], "failed");

  r = Run({"maintain", "status", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom maintain status: no maintenance 9\n");
  r = Run({"maintain", "status", "x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "loom maintain status: 'x' is not a maintenance ID\n");

  none_ = true;
  r = Run({"maintain", "status"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr("no maintenance has been started"));
}

TEST_F(MaintainVerbTest, StatusWatchPrintsEachChange) {
  CliResult r = Run({"maintain", "status", "-w"});
  EXPECT_EQ(r.rc, 1) << r.err;
  // The status first, then one line per change.
  EXPECT_THAT(r.out, ::testing::StartsWith(
                         "maintenance 3 running, no batch started yet"));
  EXPECT_THAT(r.out, ContainsRegex("\n[0-9:]{8} batch 1 h200-0 draining: "
                                   "moving 1 job off\n"));
  EXPECT_THAT(r.out, ContainsRegex("\n[0-9:]{8} batch 1 of 2 ended: 2 done\n"));
  EXPECT_EQ(gets_, 4u);

  // Interrupted: 130, and the maintenance goes on.
  std::atomic<bool> stop{true};
  gets_ = 0;
  r = Run({"maintain", "status", "--watch"}, &stop);
  EXPECT_EQ(r.rc, 130);
  EXPECT_THAT(r.err, HasSubstr("interrupted; maintenance 3 goes on"));

  // An ended one: its status, and the exit its end says.
  gets_ = 3;
  r = Run({"maintain", "status", "-w", "3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.out, HasSubstr("maintenance 3 failed"));
}

TEST_F(MaintainVerbTest, PauseResumeAbort) {
  CliResult r = Run({"maintain", "pause"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "maintenance 3 paused, batch 1 of 2: 0 done, 2 in progress, 2 "
            "pending, 0 failed; paused by carol\n");
  r = Run({"maintain", "abort", "3"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("maintenance 3 aborted"));
  r = Run({"maintain", "resume", "3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err,
            "loom maintain resume: maintenance 3 is done; there is nothing to "
            "resume\n");
  EXPECT_EQ(actions_,
            (std::vector<std::string>{"3 pause", "3 abort", "3 resume"}));
}

TEST_F(MaintainVerbTest, UsageErrors) {
  // `maintain` alone: what to give, and the usage.
  CliResult r = Run({"maintain"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom maintain: give --pool or --nodes"));
  EXPECT_THAT(r.err, HasSubstr("usage: loom maintain (--pool POOL"));
  r = Run({"maintain", "--pool", "h200", "--nodes", "h200-0", "--batch", "1",
           "--run", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--pool and --nodes: give one of them"));
  EXPECT_THAT(r.err, HasSubstr("usage:"));
  r = Run({"maintain", "--pool", "h200", "--run", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--batch: give how many"));
  r = Run({"maintain", "--pool", "h200", "--batch", "0", "--run", "true"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "loom maintain: --batch: '0' is not a whole number >= 1\n");
  r = Run({"maintain", "--pool", "h200", "--batch", "1", "--run", "true",
           "--ready-timeout", "ten"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--ready-timeout: 'ten' is not a duration"));
  // CLI11 checks --on-failure and names it.
  r = Run({"maintain", "--pool", "h200", "--batch", "1", "--run", "true",
           "--on-failure", "retry"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--on-failure"));
  // Start flags with an action.
  r = Run({"maintain", "--pool", "h200", "status"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom maintain status: --pool, --nodes"));
  r = Run({"maintain", "--wait", "abort"});
  EXPECT_EQ(r.rc, 2);
  // Not an action; an action's flag elsewhere; two actions.
  EXPECT_EQ(Run({"maintain", "restart"}).rc, 2);
  EXPECT_EQ(Run({"maintain", "pause", "-w"}).rc, 2);
  EXPECT_EQ(Run({"maintain", "-w"}).rc, 2);
  EXPECT_EQ(Run({"maintain", "pause", "resume"}).rc, 2);
  EXPECT_EQ(Run({"maintain", "pause", "0"}).rc, 2);
  EXPECT_TRUE(actions_.empty());
  EXPECT_EQ(started_, Json());
}

TEST_F(MaintainVerbTest, Help) {
  CliResult r = Run({"maintain", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* flag :
       {"--pool", "--nodes", "--batch", "--max-unavailable", "--run",
        "--drain-timeout", "--ready-timeout", "--on-failure", "--wait",
        "--server", "status", "pause", "resume", "abort", "Exit status"}) {
    EXPECT_THAT(r.out, HasSubstr(flag)) << flag;
  }
  for (const char* action : {"status", "pause", "resume", "abort"}) {
    r = Run({"maintain", action, "--help"});
    EXPECT_EQ(r.rc, 0) << action;
    EXPECT_THAT(r.out, HasSubstr("--server")) << action;
    EXPECT_THAT(r.out, HasSubstr("Exit status")) << action;
    EXPECT_THAT(r.out, Not(HasSubstr("--batch"))) << action;
  }
  EXPECT_THAT(Run({"maintain", "status", "--help"}).out, HasSubstr("--watch"));
}

}  // namespace
}  // namespace loom
