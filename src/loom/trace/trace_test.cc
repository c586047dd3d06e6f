#include "loom/trace/trace.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::Field;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// Tests run from the repository root (see cmake/LoomHelpers.cmake).
constexpr char kSharedTraces[] = "../shared/traces";
constexpr char kTestdata[] = "testdata/traces";

absl::StatusOr<Trace> Parse(std::string_view text,
                            TraceFormat format = TraceFormat::kAuto,
                            bool strict = false) {
  std::istringstream in{std::string(text)};
  return ReadTrace(in, "test.csv", format, strict);
}

// Parses `text` and expects success; returns the trace.
Trace MustParse(std::string_view text,
                TraceFormat format = TraceFormat::kAuto) {
  absl::StatusOr<Trace> trace = Parse(text, format);
  EXPECT_TRUE(trace.ok()) << trace.status();
  return trace.ok() ? *std::move(trace) : Trace{};
}

std::string SharedTrace(std::string_view relative) {
  return std::string(kSharedTraces) + "/" + std::string(relative);
}

#define SKIP_WITHOUT_SHARED()                        \
  if (!std::filesystem::exists(kSharedTraces)) {     \
    GTEST_SKIP() << kSharedTraces                    \
                 << " is absent; run from the repo " \
                    "root beside ../shared";         \
  }

// ---------------------------------------------------------------------------
// Format names.

TEST(TraceFormatTest, ParsesNamesAndAliases) {
  EXPECT_EQ(*ParseTraceFormat("auto"), TraceFormat::kAuto);
  EXPECT_EQ(*ParseTraceFormat("canonical"), TraceFormat::kCanonical);
  EXPECT_EQ(*ParseTraceFormat("loom"), TraceFormat::kCanonical);
  EXPECT_EQ(*ParseTraceFormat("philly"), TraceFormat::kPhilly);
  EXPECT_EQ(*ParseTraceFormat("ITP"), TraceFormat::kItp);
  EXPECT_EQ(*ParseTraceFormat("alibaba"), TraceFormat::kAlibaba);
  EXPECT_EQ(*ParseTraceFormat("openb"), TraceFormat::kAlibaba);
  absl::StatusOr<TraceFormat> bad = ParseTraceFormat("slurm");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("slurm"));
}

TEST(TraceFormatTest, NamesRoundTrip) {
  for (TraceFormat f :
       {TraceFormat::kAuto, TraceFormat::kCanonical, TraceFormat::kPhilly,
        TraceFormat::kItp, TraceFormat::kAlibaba}) {
    EXPECT_EQ(*ParseTraceFormat(TraceFormatName(f)), f);
  }
}

// ---------------------------------------------------------------------------
// The public traces, as published.

TEST(RealTraceTest, PhillyParsesEveryJob) {
  SKIP_WITHOUT_SHARED();
  absl::StatusOr<Trace> trace = ReadTraceFile(
      SharedTrace("philly/philly_sia.csv"), TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kPhilly);
  EXPECT_THAT(trace->jobs, SizeIs(82247));
  EXPECT_THAT(trace->issues, SizeIs(0));
  EXPECT_EQ(trace->skipped, 0);
  // The earliest submit is 2017-09-04; the latest is in late December.
  EXPECT_EQ(trace->jobs.front().submit_s, 0);
  EXPECT_GT(trace->jobs.back().submit_s, 100 * 86400.0);
  EXPECT_LT(trace->jobs.back().submit_s, 110 * 86400.0);
  for (size_t i = 1; i < trace->jobs.size(); ++i) {
    ASSERT_LE(trace->jobs[i - 1].submit_s, trace->jobs[i].submit_s) << i;
  }
  int max_gpus = 0;
  for (const TraceJob& job : trace->jobs) {
    ASSERT_GT(job.duration_s, 0);
    ASSERT_FALSE(job.project.empty());
    ASSERT_EQ(job.id, std::to_string(job.line));
    max_gpus = std::max(max_gpus, job.num_gpus);
  }
  EXPECT_EQ(max_gpus, 128);
}

TEST(RealTraceTest, ItpParsesEveryJob) {
  SKIP_WITHOUT_SHARED();
  // `awk -F, 'NR>1' cluster01.csv | wc -l` prints 1595: the file has 1,595
  // data rows (its last row has no line end, which is why `wc -l` on the
  // whole file also says 1595). shared/traces/README.md says 1,594.
  absl::StatusOr<Trace> trace =
      ReadTraceFile(SharedTrace("itp/cluster01.csv"), TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kItp);
  EXPECT_THAT(trace->jobs, SizeIs(1595));
  EXPECT_THAT(trace->issues, SizeIs(0));
  EXPECT_EQ(trace->jobs.front().submit_s, 0);
  EXPECT_EQ(trace->jobs.front().id, "965d744f-0445-c1a8-12af-97e4c536c66e");
  EXPECT_EQ(trace->jobs.front().num_gpus, 64);
  EXPECT_EQ(trace->jobs.front().duration_s, 2429);

  // Likewise `awk -F, 'NR>1' cluster10.csv | wc -l` prints 260.
  trace =
      ReadTraceFile(SharedTrace("itp/cluster10.csv"), TraceFormat::kItp, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_THAT(trace->jobs, SizeIs(260));
}

TEST(RealTraceTest, AlibabaParsesGpuPodsAndCountsSkips) {
  SKIP_WITHOUT_SHARED();
  // Expected numbers from:
  //   awk -F, 'NR>1 { if ($4==0) cpu++; else if ($11=="") pend++;
  //                   else if ($10-$11<=0) bad++; else jobs++ }
  //            END { print cpu, pend, bad, jobs }' <file>
  // run on openb_pod_list_gpushare20.csv,
  // which prints "1088 804  6260": 1,088 CPU-only pods, 804 GPU pods that
  // were never scheduled, no bad rows and 6,260 GPU jobs (8,152 rows).
  absl::StatusOr<Trace> trace =
      ReadTraceFile(SharedTrace("alibaba-openb/openb_pod_list_gpushare20.csv"),
                    TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kAlibaba);
  EXPECT_THAT(trace->jobs, SizeIs(6260));
  EXPECT_THAT(trace->issues, SizeIs(0));
  EXPECT_EQ(trace->skipped, 1088 + 804);
  EXPECT_EQ(trace->skipped_reason,
            "1088 CPU-only pods (num_gpu 0); 804 never-scheduled pods "
            "(scheduled_time empty)");
  EXPECT_EQ(trace->jobs.front().submit_s, 0);
  int preemptible = 0;
  for (const TraceJob& job : trace->jobs) {
    ASSERT_GE(job.num_gpus, 1);
    ASSERT_LE(job.num_gpus, 8);
    ASSERT_GT(job.duration_s, 0);
    ASSERT_EQ(job.gpu_model, "");
    if (job.preemptible.value_or(false)) ++preemptible;
  }
  // `awk -F, 'NR>1 && $4>0 && $11!="" && $7=="BE"' ... | wc -l` prints 2126.
  EXPECT_EQ(preemptible, 2126);
}

TEST(RealTraceTest, NonTraceCsvIsRejected) {
  SKIP_WITHOUT_SHARED();
  absl::StatusOr<Trace> trace = ReadTraceFile(
      SharedTrace("philly/machines.csv"), TraceFormat::kAuto, false);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("machines.csv"));
  EXPECT_THAT(trace.status().message(), HasSubstr("unrecognised"));
}

// ---------------------------------------------------------------------------
// The fixtures in testdata/traces (always present).

TEST(FixtureTest, DetectsPhilly) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      std::string(kTestdata) + "/philly_small.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kPhilly);
  ASSERT_THAT(trace->jobs, SizeIs(6));
  // Rows are not sorted in the file: the 2017-09-29 job on line 4 is first.
  const TraceJob& first = trace->jobs[0];
  EXPECT_EQ(first.line, 4);
  EXPECT_EQ(first.id, "4");
  EXPECT_EQ(first.submit_s, 0);
  EXPECT_EQ(first.duration_s, 860662.0);
  EXPECT_EQ(first.project, "6c71a0");
  EXPECT_EQ(first.num_gpus, 1);
  // 2017-09-29 07:58:32 to 2017-10-09 06:13:03 is 9 days 22:14:31.
  EXPECT_EQ(trace->jobs[1].line, 3);
  EXPECT_EQ(trace->jobs[1].submit_s, 9 * 86400 + 22 * 3600 + 14 * 60 + 31);
  std::vector<int> lines;
  for (const TraceJob& job : trace->jobs) lines.push_back(job.line);
  EXPECT_THAT(lines, ElementsAre(4, 3, 5, 7, 6, 2));
}

TEST(FixtureTest, DetectsItp) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      std::string(kTestdata) + "/itp_small.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kItp);
  ASSERT_THAT(trace->jobs, SizeIs(5));
  EXPECT_EQ(trace->jobs[1].id, "fb10987f-20ac-3703-eb67-146a77a6e17c");
  EXPECT_EQ(trace->jobs[1].submit_s, 2000581 - 1932025);
  EXPECT_EQ(trace->jobs[1].duration_s, 1532);
  EXPECT_EQ(trace->jobs[1].project, "");
  EXPECT_FALSE(trace->jobs[1].preemptible.has_value());
}

TEST(FixtureTest, DetectsAlibabaAndMapsPods) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      std::string(kTestdata) + "/alibaba_small.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kAlibaba);
  EXPECT_EQ(trace->skipped, 3);
  EXPECT_EQ(trace->skipped_reason,
            "2 CPU-only pods (num_gpu 0); 1 never-scheduled pods "
            "(scheduled_time empty)");
  ASSERT_THAT(trace->jobs, SizeIs(6));
  std::vector<int> lines;
  for (const TraceJob& job : trace->jobs) lines.push_back(job.line);
  EXPECT_THAT(lines, ElementsAre(9, 10, 6, 5, 4, 8));

  const TraceJob& guaranteed = trace->jobs[0];  // openb-pod-3612.
  EXPECT_EQ(guaranteed.id, "openb-pod-3612");
  EXPECT_EQ(guaranteed.submit_s, 0);
  EXPECT_EQ(guaranteed.duration_s, 9770152 - 9769678);
  EXPECT_EQ(guaranteed.priority, "high");
  EXPECT_FALSE(guaranteed.preemptible.has_value());

  const TraceJob& failed_be = trace->jobs[1];  // A failed sharing BE pod.
  EXPECT_EQ(failed_be.id, "openb-pod-1092");
  EXPECT_EQ(failed_be.num_gpus, 1);
  EXPECT_EQ(failed_be.priority, "low");
  EXPECT_EQ(failed_be.preemptible, true);
  EXPECT_EQ(failed_be.duration_s, 9964764 - 9964737);

  EXPECT_EQ(trace->jobs[2].num_gpus, 8);         // openb-pod-3685.
  EXPECT_EQ(trace->jobs[3].num_gpus, 1);         // Sharing pod, gpu_milli 470.
  EXPECT_EQ(trace->jobs[4].priority, "high");    // LS.
  EXPECT_EQ(trace->jobs[5].priority, "normal");  // Burstable.
  EXPECT_EQ(trace->jobs[5].submit_s, 12387474 - 9769677);
}

TEST(FixtureTest, SampleCanonicalTrace) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      std::string(kTestdata) + "/sample.csv", TraceFormat::kAuto, true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_EQ(trace->format, TraceFormat::kCanonical);
  ASSERT_THAT(trace->jobs, SizeIs(20));
  std::set<int> sizes;
  for (const TraceJob& job : trace->jobs) sizes.insert(job.num_gpus);
  EXPECT_THAT(sizes, ElementsAre(1, 2, 4, 8, 16));
  const TraceJob& first = trace->jobs[0];
  EXPECT_EQ(first.id, "ft-embed-01");
  EXPECT_EQ(first.gpu_model, "h200");
  EXPECT_EQ(first.project, "search");
  EXPECT_EQ(first.user, "alice");
  EXPECT_EQ(first.time_limit_s, 7200);
  EXPECT_EQ(trace->jobs[5].gpu_model, "");  // "any".
}

// ---------------------------------------------------------------------------
// The canonical format.

TEST(CanonicalTest, ReadsAllOptionalColumns) {
  const Trace trace = MustParse(
      "job_id,submit_time,duration,num_gpus,time_limit,preemptible,priority,"
      "user,project,gpu_model\r\n"
      "a,100,3600,8,12h,true,high,alice,search,H200\r\n"
      "b,50.5,60,1,7200,no,,bob,research,any\r\n"
      "c,100,1.5,16,,,,,,\r\n"
      "\"d,1\",100,2,2,1h30m,0,low,\"o'hara\",\"x \"\"y\"\"\",a100\r\n");
  EXPECT_EQ(trace.format, TraceFormat::kCanonical);
  EXPECT_THAT(trace.issues, SizeIs(0));
  ASSERT_THAT(trace.jobs, SizeIs(4));

  const TraceJob& b = trace.jobs[0];
  EXPECT_EQ(b.id, "b");
  EXPECT_EQ(b.line, 3);
  EXPECT_EQ(b.submit_s, 0);
  EXPECT_EQ(b.duration_s, 60);
  EXPECT_EQ(b.gpu_model, "");
  EXPECT_EQ(b.preemptible, false);
  EXPECT_EQ(b.time_limit_s, 7200);
  EXPECT_EQ(b.priority, "");

  // Equal submit times keep file order.
  const TraceJob& a = trace.jobs[1];
  EXPECT_EQ(a.id, "a");
  EXPECT_EQ(a.submit_s, 49.5);
  EXPECT_EQ(a.num_gpus, 8);
  EXPECT_EQ(a.gpu_model, "h200");
  EXPECT_EQ(a.project, "search");
  EXPECT_EQ(a.user, "alice");
  EXPECT_EQ(a.priority, "high");
  EXPECT_EQ(a.preemptible, true);
  EXPECT_EQ(a.time_limit_s, 12 * 3600);

  const TraceJob& c = trace.jobs[2];
  EXPECT_EQ(c.id, "c");
  EXPECT_EQ(c.duration_s, 1.5);
  EXPECT_EQ(c.num_gpus, 16);
  EXPECT_FALSE(c.preemptible.has_value());
  EXPECT_FALSE(c.time_limit_s.has_value());
  EXPECT_EQ(c.project, "");

  const TraceJob& d = trace.jobs[3];
  EXPECT_EQ(d.id, "d,1");
  EXPECT_EQ(d.user, "o'hara");
  EXPECT_EQ(d.project, "x \"y\"");
  EXPECT_EQ(d.gpu_model, "a100");
  EXPECT_EQ(d.preemptible, false);
  EXPECT_EQ(d.time_limit_s, 5400);
}

TEST(CanonicalTest, RequiredColumnsOnlyAndEmptyIdUsesLine) {
  const Trace trace = MustParse(
      "job_id,submit_time,duration,num_gpus\n"
      ",0,10,1\n"
      "x,5,10,2\n");
  ASSERT_THAT(trace.jobs, SizeIs(2));
  EXPECT_EQ(trace.jobs[0].id, "2");
  EXPECT_EQ(trace.jobs[1].id, "x");
}

TEST(CanonicalTest, BomBlankLinesAndNoFinalNewline) {
  const Trace trace = MustParse(
      "\xEF\xBB\xBF\n"
      "job_id,submit_time,duration,num_gpus\r\n"
      "\r\n"
      "a,0,10,1\r\n"
      "   \n"
      "b,1,10,1");
  EXPECT_THAT(trace.issues, SizeIs(0));
  ASSERT_THAT(trace.jobs, SizeIs(2));
  EXPECT_EQ(trace.jobs[0].line, 4);
  EXPECT_EQ(trace.jobs[1].line, 6);
}

TEST(CanonicalTest, UnknownColumnIsAnError) {
  absl::StatusOr<Trace> trace =
      Parse("job_id,submit_time,duration,num_gpus,gpu_model,colour\n");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("test.csv"));
  EXPECT_THAT(trace.status().message(), HasSubstr("'colour'"));
}

TEST(CanonicalTest, RepeatedColumnIsAnError) {
  absl::StatusOr<Trace> trace =
      Parse("job_id,submit_time,duration,num_gpus,user,user\n");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("repeats column 'user'"));
}

TEST(CanonicalTest, ExplicitFormatNeedsItsHeader) {
  absl::StatusOr<Trace> trace =
      Parse("timestamp,duration,num_gpus,gpu_time,cluster\n",
            TraceFormat::kCanonical);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      trace.status().message(),
      HasSubstr("must start with job_id,submit_time,duration,num_gpus"));

  trace = Parse("job_id,submit_time,duration,num_gpus\n", TraceFormat::kPhilly);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(), HasSubstr("lacks column 'timestamp'"));
}

TEST(CanonicalTest, HeaderOnlyIsAnEmptyTrace) {
  const Trace trace = MustParse("job_id,submit_time,duration,num_gpus\n");
  EXPECT_THAT(trace.jobs, SizeIs(0));
  EXPECT_THAT(trace.issues, SizeIs(0));
}

// ---------------------------------------------------------------------------
// Bad input.

constexpr char kBadCanonical[] =
    "job_id,submit_time,duration,num_gpus,preemptible,time_limit\n"  // 1
    "ok1,0,10,1,,\n"                                                 // 2
    "short,0,10\n"                                                   // 3
    "text,0,ten,1,,\n"                                               // 4
    "neg,0,-5,1,,\n"                                                 // 5
    "zero-gpus,0,10,0,,\n"                                           // 6
    "bool,0,10,1,maybe,\n"                                           // 7
    "\n"                                                             // 8
    "half-gpu,0,10,1.5,,\n"                                          // 9
    "nan,0,nan,1,,\n"                                                // 10
    "limit,0,10,1,,soon\n"                                           // 11
    "negsubmit,-1,10,1,,\n"                                          // 12
    "quote,\"0,10,1,,\n"                                             // 13
    "ok2,5,10,2,yes,1h\n";                                           // 14

TEST(BadInputTest, BadLinesBecomeIssuesWithLineNumbers) {
  const Trace trace = MustParse(kBadCanonical);
  ASSERT_THAT(trace.jobs, SizeIs(2));
  EXPECT_EQ(trace.jobs[0].id, "ok1");
  EXPECT_EQ(trace.jobs[1].id, "ok2");
  EXPECT_EQ(trace.jobs[1].line, 14);
  std::vector<std::string> messages;
  for (const TraceIssue& issue : trace.issues) {
    messages.push_back(FormatTraceIssue(issue));
  }
  EXPECT_THAT(
      messages,
      ElementsAre(
          "line 3: expected 6 fields, got 3",
          "line 4: duration: not a number: 'ten'",
          "line 5: duration: must be > 0, got '-5'",
          "line 6: num_gpus: must be a whole number from 1 to 100000, got '0'",
          "line 7: preemptible: not a boolean (true/false/1/0/yes/no): "
          "'maybe'",
          "line 9: num_gpus: must be a whole number from 1 to 100000, got "
          "'1.5'",
          "line 10: duration: not a finite number: 'nan'",
          "line 11: time_limit: not a duration (e.g. 3600, 90m, 12h): 'soon'",
          "line 12: submit_time: must be >= 0, got '-1'",
          "line 13: field 2: unterminated quoted field"));
  EXPECT_EQ(trace.issues[0].line, 3);
  EXPECT_EQ(trace.issues[0].reason, "expected 6 fields, got 3");
}

TEST(BadInputTest, StrictReturnsTheFirstIssue) {
  absl::StatusOr<Trace> trace =
      Parse(kBadCanonical, TraceFormat::kAuto, /*strict=*/true);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(trace.status().message(),
            "test.csv: line 3: expected 6 fields, got 3");
}

TEST(BadInputTest, PhillyBadTimestampAndGpus) {
  const Trace trace = MustParse(
      "timestamp,duration,num_gpus,gpu_time,cluster\n"
      "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n"
      "2017-13-09 07:01:55,66.0,1,66.0,11cb48\n"
      "2017-02-29 07:01:55,66.0,1,66.0,11cb48\n"
      "2017-10-09 24:00:00,66.0,1,66.0,11cb48\n"
      "yesterday,66.0,1,66.0,11cb48\n"
      "2016-02-29 00:00:00,1,100001,1,11cb48\n"
      "2016-02-29 00:00:00,1,-1,1,11cb48\n"
      "2016-02-29 00:00:00,0,1,0,11cb48\n"
      "2016-02-29T00:00:00,1,2,2,11cb48\n");
  EXPECT_EQ(trace.format, TraceFormat::kPhilly);
  ASSERT_THAT(trace.jobs, SizeIs(2));
  EXPECT_EQ(trace.jobs[0].line, 10);
  EXPECT_EQ(trace.jobs[1].submit_s, 588 * 86400 + 7 * 3600 + 60 + 55);
  std::vector<int> lines;
  for (const TraceIssue& issue : trace.issues) lines.push_back(issue.line);
  EXPECT_THAT(lines, ElementsAre(3, 4, 5, 6, 7, 8, 9));
  EXPECT_EQ(FormatTraceIssue(trace.issues[0]),
            "line 3: timestamp: not a timestamp YYYY-MM-DD HH:MM:SS: "
            "'2017-13-09 07:01:55'");
  EXPECT_THAT(trace.issues[4].reason, HasSubstr("num_gpus: must be"));
  EXPECT_THAT(trace.issues[6].reason, HasSubstr("duration: must be > 0"));
}

TEST(BadInputTest, ItpAndAlibabaBadLines) {
  Trace trace = MustParse(
      "job_id,submission_time,duration,num_gpu\n"
      "a,1,abc,1\n"
      "b,1,1,1\n");
  EXPECT_EQ(trace.format, TraceFormat::kItp);
  EXPECT_THAT(trace.jobs, SizeIs(1));
  ASSERT_THAT(trace.issues, SizeIs(1));
  EXPECT_EQ(FormatTraceIssue(trace.issues[0]),
            "line 2: duration: not a number: 'abc'");

  trace = MustParse(
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
      "creation_time,deletion_time,scheduled_time\n"
      "p0,1,1,1,1000,V100M16|V100M32,LS,Running,10,20,20\n"  // 0 s run.
      "p1,1,1,1,1000,V100M16|V100M32,LS,Running,10,20,12\n"  // OK.
      "p2,1,1,-1,1000,,LS,Running,10,20,12\n"                // Bad num_gpu.
      "p3,1,1,1,1500,,LS,Running,10,20,12\n"                 // Bad milli.
      "p4,1,1,2,1000,,XX,Running,10,x,12\n");                // Bad time.
  EXPECT_EQ(trace.format, TraceFormat::kAlibaba);
  ASSERT_THAT(trace.jobs, SizeIs(1));
  EXPECT_EQ(trace.jobs[0].id, "p1");
  EXPECT_EQ(trace.jobs[0].gpu_model, "");
  EXPECT_EQ(trace.jobs[0].duration_s, 8);
  std::vector<std::string> messages;
  for (const TraceIssue& issue : trace.issues) {
    messages.push_back(FormatTraceIssue(issue));
  }
  EXPECT_THAT(
      messages,
      ElementsAre(
          "line 2: deletion_time: must be after scheduled_time (run time 0 s)",
          "line 4: num_gpu: must be a whole number from 0 to 100000, got '-1'",
          "line 5: gpu_milli: must be a whole number from 0 to 1000, got '1500'",
          "line 6: deletion_time: not a number: 'x'"));
}

TEST(BadInputTest, EmptyInputIsAnError) {
  for (std::string_view text : {"", "\n\n", "\xEF\xBB\xBF", " \r\n\t\n"}) {
    absl::StatusOr<Trace> trace = Parse(text);
    EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(trace.status().message(), HasSubstr("test.csv: empty trace"));
  }
}

TEST(BadInputTest, UnknownHeaderIsAnError) {
  absl::StatusOr<Trace> trace = Parse("id,start,end\n1,2,3\n");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(trace.status().message(),
              HasSubstr("test.csv: unrecognised trace header 'id,start,end'"));
}

TEST(BadInputTest, MissingFileIsNotFound) {
  absl::StatusOr<Trace> trace = ReadTraceFile(
      "testdata/traces/no-such-file.csv", TraceFormat::kAuto, false);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(trace.status().message(), HasSubstr("no-such-file.csv"));
}

TEST(BadInputTest, GarbageBytesNeverCrash) {
  // Binary junk as the header.
  std::string junk;
  for (int i = 0; i < 4096; ++i) junk.push_back(static_cast<char>(i * 37));
  absl::StatusOr<Trace> trace = Parse(junk);
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);

  // Binary junk, embedded NULs and a lone quote as data lines.
  std::string text = "job_id,submit_time,duration,num_gpus\n";
  text += std::string("a\0b,0,1\0,1\n", 11);
  text += junk + "\n";
  text += "\"\n";
  text += ",,,\n";
  text += "x,1e400,1,1\n";
  text += "y,0,1,99999999999999999999999\n";
  text += "ok,0,1,1\n";
  trace = Parse(text);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_THAT(trace->jobs, SizeIs(1));
  EXPECT_EQ(trace->jobs[0].id, "ok");
  std::vector<int> lines;
  for (const TraceIssue& issue : trace->issues) lines.push_back(issue.line);
  EXPECT_GE(trace->issues.size(), 6u);
  EXPECT_EQ(trace->issues[0].line, 2);
  EXPECT_THAT(trace->issues[0].reason, HasSubstr("\\x00"));
  EXPECT_EQ(trace->issues.back().line, trace->jobs[0].line - 1);
}

TEST(BadInputTest, LongLinesAreBadLines) {
  std::string text = "job_id,submit_time,duration,num_gpus\n";
  text += std::string(2 << 20, 'x') + ",0,1,1\n";
  text += "a,0," + std::string((1 << 20) - 100, '9') + ",1\n";
  text += "b,0,1,1\n";
  absl::StatusOr<Trace> trace = Parse(text);
  ASSERT_TRUE(trace.ok()) << trace.status();
  ASSERT_THAT(trace->jobs, SizeIs(1));
  ASSERT_THAT(trace->issues, SizeIs(2));
  EXPECT_EQ(trace->issues[0].line, 2);
  EXPECT_THAT(trace->issues[0].reason, HasSubstr("longer than 1 MiB"));
  EXPECT_EQ(trace->issues[1].line, 3);
  EXPECT_THAT(trace->issues[1].reason, HasSubstr("duration"));
  EXPECT_LT(trace->issues[1].reason.size(), 200u);

  // A huge header is unrecognised, not a crash.
  trace = Parse(std::string(2 << 20, 'h') + "\n");
  EXPECT_EQ(trace.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(BadInputTest, LongTextFieldsAreBadLines) {
  const Trace trace = MustParse(
      "job_id,submit_time,duration,num_gpus,user\n"
      "a,0,1,1," +
      std::string(300, 'u') + "\n" + "b,0,1,1,bad\x01user\n");
  EXPECT_THAT(trace.jobs, SizeIs(0));
  ASSERT_THAT(trace.issues, SizeIs(2));
  EXPECT_THAT(trace.issues[0].reason, HasSubstr("user: longer than 256"));
  EXPECT_THAT(trace.issues[1].reason, HasSubstr("user: contains a control"));
}

}  // namespace
}  // namespace loom
