// `loom sacct` and `loom report usage` (accounting_verbs.cc), and the time
// points of their --since/--until (time_arg.cc).

#include "loom/cli/accounting_verbs.h"

#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/cli/cli_test_util.h"
#include "loom/cli/time_arg.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using Json = nlohmann::json;

absl::Time AcctUtc(int y, int mo, int d, int h = 0, int mi = 0, int s = 0) {
  return absl::FromCivil(absl::CivilSecond(y, mo, d, h, mi, s),
                         absl::UTCTimeZone());
}

// What `cli::ParseTimeArg` answers, as text: the time in RFC 3339 or the
// error's message.
std::string AcctParse(const std::string& text) {
  absl::StatusOr<absl::Time> t = cli::ParseTimeArg(text, kNow);
  if (!t.ok()) return std::string(t.status().message());
  return cli::FormatQueryTime(*t);
}

TEST(AcctTimeArg, Rfc3339) {
  EXPECT_EQ(AcctParse("2026-12-03T10:00:00Z"), "2026-12-03T10:00:00.000Z");
  EXPECT_EQ(AcctParse("2026-12-03T10:00:00.25Z"), "2026-12-03T10:00:00.250Z");
  EXPECT_EQ(AcctParse("2026-12-03T12:00:00+02:00"), "2026-12-03T10:00:00.000Z");
  EXPECT_EQ(AcctParse("2026-12-03T08:30:00.5-01:30"),
            "2026-12-03T10:00:00.500Z");
  EXPECT_EQ(AcctParse("2026-12-03T10:00Z"), "2026-12-03T10:00:00.000Z");
  EXPECT_EQ(AcctParse(" 2026-12-03T10:00:00Z "), "2026-12-03T10:00:00.000Z");
}

TEST(AcctTimeArg, DatesAndTimesAreUtc) {
  EXPECT_EQ(AcctParse("2026-12-03"), "2026-12-03T00:00:00.000Z");
  EXPECT_EQ(AcctParse("2026-12-03T10:00"), "2026-12-03T10:00:00.000Z");
  EXPECT_EQ(AcctParse("2026-12-03T10:00:30"), "2026-12-03T10:00:30.000Z");
  EXPECT_EQ(AcctParse("2024-02-29"), "2024-02-29T00:00:00.000Z");
}

TEST(AcctTimeArg, NowAndRelative) {
  ASSERT_EQ(Rfc3339(kNow), "2026-11-29T16:20:00.000Z");
  EXPECT_EQ(AcctParse("now"), "2026-11-29T16:20:00.000Z");
  EXPECT_EQ(AcctParse("NOW"), "2026-11-29T16:20:00.000Z");
  EXPECT_EQ(AcctParse("now-7d"), "2026-11-22T16:20:00.000Z");
  EXPECT_EQ(AcctParse("now-12h"), "2026-11-29T04:20:00.000Z");
  EXPECT_EQ(AcctParse("now+1h30m"), "2026-11-29T17:50:00.000Z");
  EXPECT_EQ(AcctParse("now-90s"), "2026-11-29T16:18:30.000Z");
  EXPECT_EQ(AcctParse("now-90"), "2026-11-29T16:18:30.000Z");  // seconds
  EXPECT_EQ(AcctParse("now - 1w"), "2026-11-22T16:20:00.000Z");
}

TEST(AcctTimeArg, ErrorsNameTheTextAndTheForms) {
  for (const char* bad :
       {"yesterday", "2026-02-30", "2026-13-01", "2026-12-03T25:00",
        "12/03/2026", "2026-12-03 10:00", "2026-12-03T10", "now7d", "nowhere",
        "+2026-12-03", "2026-12-03T10:00:00+2"}) {
    const std::string error = AcctParse(bad);
    EXPECT_THAT(error,
                StartsWith(absl::StrCat("'", bad, "' is not a time: give")))
        << bad;
    EXPECT_THAT(error, HasSubstr("RFC 3339")) << bad;
    EXPECT_THAT(error, HasSubstr("2026-12-03T10:00")) << bad;
    EXPECT_THAT(error, HasSubstr("now-7d")) << bad;
  }
  EXPECT_THAT(AcctParse(""), StartsWith("empty time: give RFC 3339"));
  EXPECT_THAT(AcctParse("  "), StartsWith("empty time"));
  // A bad duration: ParseDuration's own message.
  EXPECT_EQ(AcctParse("now-7x"),
            "'now-7x' is not a time: '7x' has an unknown unit 'x' (use ms, s, "
            "m, h, d or w)");
  EXPECT_THAT(AcctParse("now-"), StartsWith("'now-' is not a time: "));
  EXPECT_THAT(AcctParse("now-1h1h"), HasSubstr("twice"));
}

TEST(AcctTimeArg, DayAndMonthStarts) {
  EXPECT_EQ(cli::UtcDayStart(kNow), AcctUtc(2026, 11, 29));
  EXPECT_EQ(cli::UtcMonthStart(kNow), AcctUtc(2026, 11, 1));
  EXPECT_EQ(cli::UtcDayStart(AcctUtc(2026, 12, 3)), AcctUtc(2026, 12, 3));
  EXPECT_EQ(cli::FormatQueryTime(AcctUtc(2026, 1, 2, 3, 4, 5) +
                                 absl::Milliseconds(678)),
            "2026-01-02T03:04:05.678Z");
}

std::string AcctStates(const std::string& text) {
  absl::StatusOr<std::vector<std::string>> s = ParseSacctStates(text);
  if (!s.ok()) return std::string(s.status().message());
  return absl::StrJoin(*s, ",");
}

TEST(SacctStates, SlurmAndLoomNames) {
  EXPECT_EQ(AcctStates("CD,F,CA,R,PD"),
            "succeeded,failed,cancelled,running,pending");
  EXPECT_EQ(AcctStates("completed,Failed,CANCELLED,running,PENDING"),
            "succeeded,failed,cancelled,running,pending");
  EXPECT_EQ(AcctStates("held, stopping ,succeeded"), "held,stopping,succeeded");
  EXPECT_EQ(AcctStates("cd,pd"), "succeeded,pending");
  // Each once, in the order first given; empty items are skipped.
  EXPECT_EQ(AcctStates("CD,succeeded,,F,completed"), "succeeded,failed");
}

TEST(SacctStates, UnknownStatesAreNamed) {
  EXPECT_THAT(AcctStates("CD,TO"), StartsWith("unknown state 'TO' (loom's: "));
  EXPECT_THAT(AcctStates("CD,TO"), HasSubstr("Slurm's: CD, F, CA, R, PD"));
  EXPECT_THAT(AcctStates("done"), StartsWith("unknown state 'done'"));
  EXPECT_THAT(AcctStates("CANCELED"), StartsWith("unknown state 'CANCELED'"));
  EXPECT_THAT(AcctStates(""), StartsWith("give one or more states"));
  EXPECT_THAT(AcctStates(" , "), StartsWith("give one or more states"));
}

TEST(SacctStates, TableNames) {
  EXPECT_EQ(SacctStateName("succeeded"), "COMPLETED");
  EXPECT_EQ(SacctStateName("failed"), "FAILED");
  EXPECT_EQ(SacctStateName("cancelled"), "CANCELLED");
  EXPECT_EQ(SacctStateName("running"), "RUNNING");
  EXPECT_EQ(SacctStateName("pending"), "PENDING");
  EXPECT_EQ(SacctStateName("held"), "HELD");
  EXPECT_EQ(SacctStateName("stopping"), "STOPPING");
  EXPECT_EQ(SacctStateName(""), "");
  // Every name the table prints, -s takes back.
  for (const char* state : {"succeeded", "failed", "cancelled", "running",
                            "pending", "held", "stopping"}) {
    EXPECT_EQ(AcctStates(SacctStateName(state)), state);
  }
}

TEST(SacctFormat, SlurmElapsed) {
  EXPECT_EQ(FormatSlurmElapsed(0), "00:00:00");
  EXPECT_EQ(FormatSlurmElapsed(300), "00:05:00");
  EXPECT_EQ(FormatSlurmElapsed(59.9), "00:00:59");
  EXPECT_EQ(FormatSlurmElapsed(86399), "23:59:59");
  EXPECT_EQ(FormatSlurmElapsed(93784), "1-02:03:04");
  EXPECT_EQ(FormatSlurmElapsed(12 * 86400), "12-00:00:00");
  EXPECT_EQ(FormatSlurmElapsed(-5), "00:00:00");
}

// A `GET /v1/accounting/jobs` reply: job 12 ended, element 10_3 of an array
// running, job 14 pending (no start, no end, no nodes).
Json AcctSampleJobs() {
  return {{"jobs",
           {{{"id", 12},
             {"ref", "12"},
             {"array_job", 0},
             {"array_index", -1},
             {"name", "train"},
             {"user", "ana"},
             {"project", "search"},
             {"state", "succeeded"},
             {"exit_code", 0},
             {"submit_time", "2026-12-03T10:00:00.000Z"},
             {"start_time", "2026-12-03T10:00:01.000Z"},
             {"end_time", "2026-12-03T10:05:01.000Z"},
             {"elapsed_seconds", 300.0},
             {"gpus", 8},
             {"nodes", {"h200-0"}},
             {"gpu_seconds", 2400.0},
             {"restarts", 0},
             {"live", false}},
            {{"id", 13},
             {"ref", "10_3"},
             {"array_job", 10},
             {"array_index", 3},
             {"name", "sweep, lr=\"0.1\""},
             {"user", "bob"},
             {"project", "research"},
             {"state", "running"},
             {"exit_code", nullptr},
             {"submit_time", "2026-12-03T09:00:00.000Z"},
             {"start_time", "2026-12-03T09:00:00.000Z"},
             {"end_time", nullptr},
             {"elapsed_seconds", 93784.5},
             {"gpus", 16},
             {"nodes", {"h200-3", "a100-0", "h200-2"}},
             {"gpu_seconds", 1500.5},
             {"restarts", 1},
             {"live", true}},
            {{"id", 14},
             {"ref", "14"},
             {"array_job", 0},
             {"array_index", -1},
             {"name", "eval"},
             {"user", "ana"},
             {"project", "search"},
             {"state", "pending"},
             {"exit_code", nullptr},
             {"submit_time", "2026-12-03T11:00:00.000Z"},
             {"start_time", nullptr},
             {"end_time", nullptr},
             {"elapsed_seconds", 0},
             {"gpus", 2},
             {"nodes", Json::array()},
             {"gpu_seconds", 0},
             {"restarts", 0},
             {"live", true}}}}};
}

TEST(SacctFormat, Table) {
  EXPECT_EQ(FormatSacctTable(AcctSampleJobs()),
            "JOBID  NAME             USER  PROJECT   STATE      SUBMIT       "
            "        START                END                  ELAPSED     "
            "GPUS  GPU-HOURS  EXITCODE  NODES\n"
            "12     train            ana   search    COMPLETED  "
            "2026-12-03T10:00:00  2026-12-03T10:00:01  2026-12-03T10:05:01  "
            "00:05:00    8     0.67       0         h200-0\n"
            "10_3   sweep, lr=\"0.1\"  bob   research  RUNNING    "
            "2026-12-03T09:00:00  2026-12-03T09:00:00  -                    "
            "1-02:03:04  16    0.42       -         a100-0,h200-[2-3]\n"
            "14     eval             ana   search    PENDING    "
            "2026-12-03T11:00:00  -                    -                    "
            "00:00:00    2     0.00       -         -\n");
  // No jobs: the header; fields missing altogether: "-".
  EXPECT_THAT(FormatSacctTable(Json::object()), StartsWith("JOBID  NAME"));
  EXPECT_EQ(FormatSacctTable({{"jobs", {{{"id", 7}}}}}),
            "JOBID  NAME  USER  PROJECT  STATE  SUBMIT  START  END  ELAPSED  "
            "GPUS  GPU-HOURS  EXITCODE  NODES\n"
            "7      -     -     -        -      -       -      -    -        "
            "-     -          -         -\n");
}

TEST(SacctFormat, Csv) {
  EXPECT_EQ(
      FormatSacctCsv(AcctSampleJobs()),
      "JOBID,NAME,USER,PROJECT,STATE,SUBMIT,START,END,ELAPSED_SECONDS,GPUS,"
      "GPU_SECONDS,EXITCODE,NODES\n"
      "12,train,ana,search,COMPLETED,2026-12-03T10:00:00.000Z,"
      "2026-12-03T10:00:01.000Z,2026-12-03T10:05:01.000Z,300,8,2400,0,"
      "h200-0\n"
      "10_3,\"sweep, lr=\"\"0.1\"\"\",bob,research,RUNNING,"
      "2026-12-03T09:00:00.000Z,2026-12-03T09:00:00.000Z,,93784.5,16,1500.5,,"
      "\"a100-0,h200-[2-3]\"\n"
      "14,eval,ana,search,PENDING,2026-12-03T11:00:00.000Z,,,0,2,0,,\n");
  EXPECT_EQ(FormatSacctCsv(Json::array()),
            "JOBID,NAME,USER,PROJECT,STATE,SUBMIT,START,END,ELAPSED_SECONDS,"
            "GPUS,GPU_SECONDS,EXITCODE,NODES\n");
}

// A `GET /v1/usage` reply by project and user, per day.
Json AcctSampleUsage() {
  return {{"by", {"project", "user"}},
          {"per", "day"},
          {"since", "2026-12-01T00:00:00.000Z"},
          {"until", "2026-12-04T00:00:00.000Z"},
          {"rows",
           {{{"period", "2026-12-03T00:00:00.000Z"},
             {"project", "search"},
             {"user", "ana"},
             {"gpu_seconds", 7200.0}},
            {{"period", "2026-12-03T00:00:00.000Z"},
             {"project", "research, ml"},
             {"user", "bob"},
             {"gpu_seconds", 1800}}}},
          {"total_gpu_seconds", 9000.0}};
}

TEST(UsageFormat, TablePerDay) {
  EXPECT_EQ(FormatUsageTable(AcctSampleUsage()),
            "PERIOD      PROJECT       USER  GPU-HOURS\n"
            "2026-12-03  search        ana   2.00\n"
            "2026-12-03  research, ml  bob   0.50\n"
            "TOTAL                           2.50\n");
  Json hourly = AcctSampleUsage();
  hourly["per"] = "hour";
  hourly["rows"][0]["period"] = "2026-12-03T10:00:00.000Z";
  EXPECT_THAT(FormatUsageTable(hourly), HasSubstr("\n2026-12-03T10:00  "));
  Json monthly = AcctSampleUsage();
  monthly["per"] = "month";
  EXPECT_THAT(FormatUsageTable(monthly), HasSubstr("\n2026-12  "));
}

TEST(UsageFormat, GoodputColumnsWhenTheServerHasThem) {
  Json reply = AcctSampleUsage();
  reply["rows"][0]["lost_gpu_seconds"] = 720.0;
  reply["rows"][0]["goodput"] = 0.9;
  reply["rows"][1]["lost_gpu_seconds"] = 0.0;
  reply["rows"][1]["goodput"] = 1.0;
  reply["total_lost_gpu_seconds"] = 720.0;
  reply["goodput"] = 0.92;
  EXPECT_EQ(FormatUsageTable(reply),
            "PERIOD      PROJECT       USER  GPU-HOURS  LOST-HOURS  GOODPUT\n"
            "2026-12-03  search        ana   2.00       0.20        90.0%\n"
            "2026-12-03  research, ml  bob   0.50       0.00        100.0%\n"
            "TOTAL                           2.50       0.20        92.0%\n");
  EXPECT_THAT(FormatUsageCsv(reply),
              HasSubstr("GPU_SECONDS,LOST_GPU_SECONDS,GOODPUT\n"));
  EXPECT_THAT(FormatUsageCsv(reply), HasSubstr(",7200,720,0.9\n"));
}

TEST(UsageFormat, TableInAllByOneKey) {
  const Json reply = {
      {"by", {"user"}},
      {"per", "all"},
      {"rows",
       {{{"period", nullptr}, {"user", "ana"}, {"gpu_seconds", 36000}},
        {{"period", nullptr}, {"user", "bob"}, {"gpu_seconds", 45}}}},
      {"total_gpu_seconds", 36045}};
  EXPECT_EQ(FormatUsageTable(reply),
            "USER   GPU-HOURS\n"
            "ana    10.00\n"
            "bob    0.01\n"
            "TOTAL  10.01\n");
  // No rows: the header and a zero total; no total given: the rows' sum.
  EXPECT_EQ(FormatUsageTable({{"by", {"project"}}, {"per", "all"}}),
            "PROJECT  GPU-HOURS\nTOTAL    0.00\n");
  Json no_total = reply;
  no_total.erase("total_gpu_seconds");
  EXPECT_THAT(FormatUsageTable(no_total), HasSubstr("TOTAL  10.01\n"));
}

TEST(UsageFormat, Csv) {
  EXPECT_EQ(FormatUsageCsv(AcctSampleUsage()),
            "PERIOD,PROJECT,USER,GPU_SECONDS\n"
            "2026-12-03T00:00:00.000Z,search,ana,7200\n"
            "2026-12-03T00:00:00.000Z,\"research, ml\",bob,1800\n");
  EXPECT_EQ(FormatUsageCsv({{"by", {"project"}},
                            {"per", "all"},
                            {"rows",
                             {{{"period", nullptr},
                               {"project", "search"},
                               {"gpu_seconds", 0.25}}}}}),
            "PROJECT,GPU_SECONDS\nsearch,0.25\n");
}

// The verbs against a fake server that records the accounting requests.
class AcctVerbTest : public VerbTest {
 protected:
  void SetUp() override {
    httplib::Server& s = fake_.server();
    s.Get("/v1/accounting/jobs",
          [this](const httplib::Request& req, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu_);
            acct_targets_.push_back(req.target);
            acct_params_ = Json::object();
            for (const auto& [k, v] : req.params) acct_params_[k] = v;
            if (req.get_param_value("user") == "nobody") {
              res.status = 400;
              res.set_content(Json({{"error",
                                     {{"code", "invalid_argument"},
                                      {"field", "user"},
                                      {"message", "user: no such user"}}}})
                                  .dump(),
                              "application/json");
              return;
            }
            res.set_content(AcctSampleJobs().dump(), "application/json");
          });
    s.Get("/v1/usage",
          [this](const httplib::Request& req, httplib::Response& res) {
            std::lock_guard<std::mutex> lock(mu_);
            acct_targets_.push_back(req.target);
            acct_params_ = Json::object();
            for (const auto& [k, v] : req.params) acct_params_[k] = v;
            res.set_content(AcctSampleUsage().dump(), "application/json");
          });
    // Array elements by their reference (the live state's).
    s.Get(R"(/v1/jobs/(\d+_\d+))", [](const httplib::Request& req,
                                      httplib::Response& res) {
      if (req.matches[1] != "10_3") {
        res.status = 404;
        res.set_content(
            Json({{"error",
                   {{"code", "not_found"},
                    {"message",
                     absl::StrCat("no job ", std::string(req.matches[1]))}}}})
                .dump(),
            "application/json");
        return;
      }
      res.set_content(Json({{"id", 13}, {"ref", "10_3"}}).dump(),
                      "application/json");
    });
    VerbTest::SetUp();
  }

  std::vector<std::string> acct_targets_;
  Json acct_params_;
};

TEST_F(AcctVerbTest, SacctSendsTheFilters) {
  CliResult r = Run({"sacct", "-u", "ana", "-S", "2026-12-01", "-s", "CD,F"});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(acct_targets_.size(), 1u);
  EXPECT_EQ(acct_targets_[0],
            "/v1/accounting/jobs?user=ana&state=succeeded%2Cfailed&since="
            "2026-12-01T00%3A00%3A00.000Z");
  EXPECT_EQ(acct_params_, Json({{"user", "ana"},
                                {"state", "succeeded,failed"},
                                {"since", "2026-12-01T00:00:00.000Z"}}));
  EXPECT_THAT(r.out, StartsWith("JOBID  NAME"));
  EXPECT_THAT(r.out, HasSubstr("\n10_3   sweep"));
  EXPECT_EQ(r.err, "");

  r = Run({"sacct", "--user", "a b&c", "--project", "search", "--since",
           "2026-11-01T10:00:00+01:00", "--until", "now", "--state", "running",
           "--limit", "5", "-X"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_targets_.back(),
            "/v1/accounting/jobs?user=a%20b%26c&project=search&state=running"
            "&since=2026-11-01T09%3A00%3A00.000Z&until=2026-11-29T16%3A20%3A00."
            "000Z&limit=5");
}

TEST_F(AcctVerbTest, SacctWindowDefaultsToTodayUnlessJobsAreNamed) {
  CliResult r = Run({"sacct"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_, Json({{"since", "2026-11-29T00:00:00.000Z"}}));
  r = Run({"sacct", "-E", "now-1h"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_, Json({{"since", "2026-11-29T00:00:00.000Z"},
                                {"until", "2026-11-29T15:20:00.000Z"}}));
  // -j: no window; elements go to the server as they are (it knows those
  // of purged arrays too), and an array's ID stands for its elements there.
  r = Run({"sacct", "-j", "12,10_3", "--jobs", "14"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_, Json({{"ids", "12,10_3,14"}}));
  r = Run({"sacct", "-j", "12", "-S", "now-7d"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_,
            Json({{"ids", "12"}, {"since", "2026-11-22T16:20:00.000Z"}}));
  // A malformed reference is refused before anything is sent.
  acct_params_ = Json();
  r = Run({"sacct", "-j", "10_x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_TRUE(acct_params_.is_null());
}

TEST_F(AcctVerbTest, SacctOutputs) {
  CliResult r = Run({"sacct", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), AcctSampleJobs());
  r = Run({"-o", "json", "sacct"});  // before the verb
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), AcctSampleJobs());
  r = Run({"sacct", "-o", "csv"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatSacctCsv(AcctSampleJobs()));
  r = Run({"sacct", "-o", "table"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatSacctTable(AcctSampleJobs()));
  r = Run({"sacct", "-o", "yaml"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ref: 10_3\n"));
}

TEST_F(AcctVerbTest, SacctUsageErrorsExit2AndSendNothing) {
  CliResult r = Run({"sacct", "-s", "CD,XX"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, StartsWith("loom sacct: --state: unknown state 'XX'"));
  r = Run({"sacct", "-S", "yesterday"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err,
              StartsWith("loom sacct: --since: 'yesterday' is not a time"));
  r = Run({"sacct", "-E", "2026-13-01"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, StartsWith("loom sacct: --until: '2026-13-01'"));
  r = Run({"sacct", "-S", "2026-12-02", "-E", "2026-12-01"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--until (2026-12-01T00:00:00.000Z) is before "
                               "--since (2026-12-02T00:00:00.000Z)"));
  EXPECT_EQ(Run({"sacct", "-j", "x"}).rc, 2);
  EXPECT_EQ(Run({"sacct", "-j", "0"}).rc, 2);
  EXPECT_EQ(Run({"sacct", "--limit", "0"}).rc, 2);
  EXPECT_EQ(Run({"sacct", "--limit", "ten"}).rc, 2);
  EXPECT_EQ(Run({"sacct", "-o", "wide"}).rc, 2);
  EXPECT_TRUE(acct_targets_.empty());
}

TEST_F(AcctVerbTest, SacctServerErrorsExit1) {
  CliResult r = Run({"sacct", "-u", "nobody"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom sacct: user: no such user\n");
  EXPECT_EQ(r.out, "");
}

TEST_F(AcctVerbTest, ReportUsageSendsTheQuery) {
  CliResult r = Run({"report", "usage", "--by", "user,project", "--per", "day",
                     "-S", "2026-12-01", "-E", "2026-12-04"});
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_EQ(acct_targets_.size(), 1u);
  EXPECT_EQ(acct_targets_[0],
            "/v1/usage?by=project%2Cuser&since=2026-12-01T00%3A00%3A00.000Z"
            "&until=2026-12-04T00%3A00%3A00.000Z&per=day");
  EXPECT_EQ(r.out, FormatUsageTable(AcctSampleUsage()));
  EXPECT_THAT(r.out, HasSubstr("\nTOTAL "));

  // By default: since the first of this month (UTC), until now, in all.
  r = Run({"report", "usage", "--by", "Project"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_, Json({{"by", "project"},
                                {"since", "2026-11-01T00:00:00.000Z"},
                                {"per", "all"}}));
  r = Run({"report", "usage", "--by", "user", "--since", "now-7d"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(acct_params_, Json({{"by", "user"},
                                {"since", "2026-11-22T16:20:00.000Z"},
                                {"per", "all"}}));
}

TEST_F(AcctVerbTest, ReportUsageOutputs) {
  CliResult r = Run({"report", "usage", "--by", "project", "-o", "csv"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatUsageCsv(AcctSampleUsage()));
  r = Run({"report", "usage", "--by", "project", "-o", "json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), AcctSampleUsage());
  r = Run({"-o", "json", "report", "usage", "--by", "project"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out), AcctSampleUsage());
}

TEST_F(AcctVerbTest, ReportUsageErrorsExit2) {
  CliResult r = Run({"report", "usage"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("--by"));
  r = Run({"report", "usage", "--by", "team"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err,
            "loom report usage: --by: 'team' is not one of project, user, "
            "project,user\n");
  EXPECT_EQ(Run({"report", "usage", "--by", "user,user"}).rc, 2);
  EXPECT_EQ(Run({"report", "usage", "--by", ""}).rc, 2);
  EXPECT_EQ(Run({"report", "usage", "--by", "user", "--per", "week"}).rc, 2);
  r = Run({"report", "usage", "--by", "user", "-S", "last month"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, StartsWith("loom report usage: --since: 'last month'"));
  EXPECT_EQ(Run({"report"}).rc, 2);
  EXPECT_EQ(Run({"report", "jobs"}).rc, 2);
  EXPECT_TRUE(acct_targets_.empty());
}

TEST_F(AcctVerbTest, AcctHelp) {
  CliResult r = Run({"sacct", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* flag :
       {"-j", "--user", "--project", "--since", "--until", "--state", "--limit",
        "-X", "--output", "UTC", "Exit status"}) {
    EXPECT_THAT(r.out, HasSubstr(flag)) << flag;
  }
  r = Run({"report", "usage", "--help"});
  EXPECT_EQ(r.rc, 0);
  for (const char* flag : {"--by", "--since", "--until", "--per", "--output",
                           "--server", "Exit status"}) {
    EXPECT_THAT(r.out, HasSubstr(flag)) << flag;
  }
  EXPECT_THAT(Run({"report", "--help"}).out, HasSubstr("usage"));
  EXPECT_THAT(Run({"--help"}).out, HasSubstr("sacct"));
  EXPECT_THAT(Run({"--help"}).out, Not(HasSubstr("--by")));
}

}  // namespace
}  // namespace loom
