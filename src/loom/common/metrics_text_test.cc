#include "loom/common/metrics_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Checks every line of `text` against the text format's grammar (HELP, TYPE
// and sample lines, names, quoted and escaped label values, values), and that
// it ends with a newline. Values must be written as `FormatMetricValue`
// writes them (stricter than the format, which takes any float). Returns the
// first bad line, or "" if all are good.
std::string FirstInvalidLine(const std::string& text) {
  static const std::regex kHelp(R"(# HELP [a-zA-Z_:][a-zA-Z0-9_:]* .*)");
  static const std::regex kType(
      R"(# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|histogram|untyped))");
  static const std::regex kSample(
      R"([a-zA-Z_:][a-zA-Z0-9_:]*)"
      R"((\{[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^\\"\n])*")"
      R"((,[a-zA-Z_][a-zA-Z0-9_]*="(\\[\\"n]|[^\\"\n])*")*\})?)"
      R"( (\+Inf|-Inf|NaN|-?[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?))");
  if (!text.empty() && text.back() != '\n') return "(no final newline)";
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("__") != std::string::npos &&
        std::regex_search(line, std::regex(R"([{,]__)"))) {
      return line;  // A reserved label name.
    }
    if (!std::regex_match(line, kHelp) && !std::regex_match(line, kType) &&
        !std::regex_match(line, kSample)) {
      return line;
    }
  }
  return "";
}

TEST(MetricTypeName, Words) {
  EXPECT_EQ(MetricTypeName(MetricType::kCounter), "counter");
  EXPECT_EQ(MetricTypeName(MetricType::kGauge), "gauge");
  EXPECT_EQ(MetricTypeName(MetricType::kHistogram), "histogram");
  EXPECT_EQ(MetricTypeName(MetricType::kUntyped), "untyped");
}

TEST(ValidateMetricName, AcceptsTheGrammar) {
  for (const char* name :
       {"loom_jobs", "_x", ":a", "a:b_1", "Z9", "loom_gpu_bytes_total"}) {
    EXPECT_TRUE(ValidateMetricName(name).ok()) << name;
  }
}

TEST(ValidateMetricName, RejectsOthers) {
  for (const char* name : {"", "1abc", "a-b", "a b", "a.b", "caf\xC3\xA9"}) {
    absl::Status status = ValidateMetricName(name);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << name;
  }
  EXPECT_THAT(std::string(ValidateMetricName("a-b").message()),
              HasSubstr("'a-b'"));
}

TEST(ValidateLabelName, AcceptsTheGrammar) {
  for (const char* name : {"node", "_x", "le", "gpu_0", "A"}) {
    EXPECT_TRUE(ValidateLabelName(name).ok()) << name;
  }
}

TEST(ValidateLabelName, RejectsOthersAndReserved) {
  for (const char* name : {"", "9a", "a:b", "a-b", "__name__", "__", "__x"}) {
    EXPECT_EQ(ValidateLabelName(name).code(),
              absl::StatusCode::kInvalidArgument)
        << name;
  }
  EXPECT_THAT(std::string(ValidateLabelName("__name__").message()),
              HasSubstr("reserved"));
}

TEST(SanitizeMetricName, ReplacesInvalidBytes) {
  EXPECT_EQ(SanitizeMetricName("loom_jobs"), "loom_jobs");
  EXPECT_EQ(SanitizeMetricName("a:b"), "a:b");
  EXPECT_EQ(SanitizeMetricName("jobs-total"), "jobs_total");
  EXPECT_EQ(SanitizeMetricName("gpu.mem bytes"), "gpu_mem_bytes");
  EXPECT_EQ(SanitizeMetricName("1abc"), "_1abc");
  EXPECT_EQ(SanitizeMetricName(""), "_");
  EXPECT_EQ(SanitizeMetricName("caf\xC3\xA9"), "caf__");
  for (const char* name : {"", "1", "-", "a-b", "\xFF", "__x"}) {
    EXPECT_TRUE(ValidateMetricName(SanitizeMetricName(name)).ok()) << name;
  }
}

TEST(SanitizeLabelName, ReplacesInvalidBytesAndReservedPrefix) {
  EXPECT_EQ(SanitizeLabelName("node"), "node");
  EXPECT_EQ(SanitizeLabelName("a:b"), "a_b");
  EXPECT_EQ(SanitizeLabelName("9"), "_9");
  EXPECT_EQ(SanitizeLabelName(""), "_");
  EXPECT_EQ(SanitizeLabelName("__name__"), "_name__");
  EXPECT_EQ(SanitizeLabelName("___x"), "_x");
  EXPECT_EQ(SanitizeLabelName("__"), "_");
  EXPECT_EQ(SanitizeLabelName("-x"), "_x");
  EXPECT_EQ(SanitizeLabelName("--x"), "_x");
  for (const char* name : {"", "1", "-", "a:b", "__", "__x", ":-", "\xFF"}) {
    EXPECT_TRUE(ValidateLabelName(SanitizeLabelName(name)).ok()) << name;
  }
}

TEST(EscapeLabelValue, EscapesBackslashQuoteNewline) {
  EXPECT_EQ(EscapeLabelValue("plain"), "plain");
  EXPECT_EQ(EscapeLabelValue(R"(C:\dir)"), R"(C:\\dir)");
  EXPECT_EQ(EscapeLabelValue(R"(say "hi")"), R"(say \"hi\")");
  EXPECT_EQ(EscapeLabelValue("two\nlines"), R"(two\nlines)");
  EXPECT_EQ(EscapeLabelValue("a\\\"\n"), R"(a\\\"\n)");
  // Nothing else is escaped.
  EXPECT_EQ(EscapeLabelValue("tab\there 'q' {x=1}"), "tab\there 'q' {x=1}");
  EXPECT_EQ(EscapeLabelValue(""), "");
}

TEST(EscapeLabelValue, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(EscapeLabelValue("\xC2\xB5s \xE2\x82\xAC \xF0\x9F\x9A\x80"),
            "\xC2\xB5s \xE2\x82\xAC \xF0\x9F\x9A\x80");
  const std::string kReplacement = "\xEF\xBF\xBD";
  EXPECT_EQ(EscapeLabelValue("a\xFF"
                             "b"),
            "a" + kReplacement + "b");
  EXPECT_EQ(EscapeLabelValue("\xE2\x82"), kReplacement + kReplacement);
  EXPECT_EQ(EscapeLabelValue("\xC0\xAF"), kReplacement + kReplacement);
  EXPECT_EQ(EscapeLabelValue("\xED\xA0\x80"),
            kReplacement + kReplacement + kReplacement);
  EXPECT_EQ(EscapeLabelValue("\xF4\x90\x80\x80"),
            kReplacement + kReplacement + kReplacement + kReplacement);
}

TEST(EscapeHelp, EscapesBackslashAndNewlineOnly) {
  EXPECT_EQ(EscapeHelp("Jobs by state."), "Jobs by state.");
  EXPECT_EQ(EscapeHelp(R"(path C:\x)"), R"(path C:\\x)");
  EXPECT_EQ(EscapeHelp("line one\nline two"), R"(line one\nline two)");
  EXPECT_EQ(EscapeHelp(R"(a "quoted" word)"), R"(a "quoted" word)");
  EXPECT_EQ(EscapeHelp("\\n"), R"(\\n)");
}

TEST(FormatMetricValue, Integers) {
  EXPECT_EQ(FormatMetricValue(0), "0");
  EXPECT_EQ(FormatMetricValue(-0.0), "0");
  EXPECT_EQ(FormatMetricValue(1), "1");
  EXPECT_EQ(FormatMetricValue(-1), "-1");
  EXPECT_EQ(FormatMetricValue(42), "42");
  EXPECT_EQ(FormatMetricValue(1000000), "1000000");
  EXPECT_EQ(FormatMetricValue(151397597184.0), "151397597184");  // 141Gi.
  EXPECT_EQ(FormatMetricValue(9007199254740992.0), "9007199254740992");
  EXPECT_EQ(FormatMetricValue(-9007199254740992.0), "-9007199254740992");
}

TEST(FormatMetricValue, FractionsAndExponentsAsGo) {
  EXPECT_EQ(FormatMetricValue(0.1), "0.1");
  EXPECT_EQ(FormatMetricValue(0.005), "0.005");
  EXPECT_EQ(FormatMetricValue(2.5), "2.5");
  EXPECT_EQ(FormatMetricValue(-0.5), "-0.5");
  EXPECT_EQ(FormatMetricValue(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatMetricValue(0.0001), "0.0001");
  EXPECT_EQ(FormatMetricValue(0.00012), "0.00012");
  EXPECT_EQ(FormatMetricValue(0.00001), "1e-05");
  EXPECT_EQ(FormatMetricValue(1e-9), "1e-09");
  EXPECT_EQ(FormatMetricValue(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatMetricValue(5e-324), "5e-324");
  EXPECT_EQ(FormatMetricValue(123456.5), "123456.5");
  EXPECT_EQ(FormatMetricValue(1234567.5), "1.2345675e+06");
  // Beyond 2^53, integers are written as Go writes them.
  EXPECT_EQ(FormatMetricValue(18014398509481984.0), "1.8014398509481984e+16");
  EXPECT_EQ(FormatMetricValue(1e21), "1e+21");
  EXPECT_EQ(FormatMetricValue(1e300), "1e+300");
  EXPECT_EQ(FormatMetricValue(std::numeric_limits<double>::max()),
            "1.7976931348623157e+308");
}

TEST(FormatMetricValue, InfinitiesAndNaN) {
  EXPECT_EQ(FormatMetricValue(kInf), "+Inf");
  EXPECT_EQ(FormatMetricValue(-kInf), "-Inf");
  EXPECT_EQ(FormatMetricValue(kNaN), "NaN");
  EXPECT_EQ(FormatMetricValue(-kNaN), "NaN");
}

TEST(FormatMetricValue, ReadsBackExactly) {
  std::vector<double> values = {0.1,     1.0 / 3,  2.0 / 3 * 1e6, 1e-300,
                                123.456, 9.99e5,   999999.5,      6.02214076e23,
                                -1e-5,   0.999999, 1e15 + 0.5,    4.2e-4};
  double x = 0.7;
  for (int i = 0; i < 200; ++i) {
    x = std::fmod(x * 7919.123 + 0.3, 1e6) * (i % 2 ? 1e-7 : 1e7);
    values.push_back(x);
  }
  for (double v : values) {
    const std::string text = FormatMetricValue(v);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), v) << text;
    EXPECT_EQ(FirstInvalidLine("m " + text + "\n"), "") << text;
  }
}

TEST(MetricsWriter, HelpAndTypeOncePerFamily) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("loom_jobs", "Jobs by state.", MetricType::kGauge);
  w.Sample("loom_jobs", {{"state", "running"}}, 3);
  w.Sample("loom_jobs", {{"state", "pending"}}, 7);
  w.Sample("loom_jobs", {{"state", "failed"}}, 0);
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_EQ(out,
            "# HELP loom_jobs Jobs by state.\n"
            "# TYPE loom_jobs gauge\n"
            "loom_jobs{state=\"running\"} 3\n"
            "loom_jobs{state=\"pending\"} 7\n"
            "loom_jobs{state=\"failed\"} 0\n");
}

TEST(MetricsWriter, EmptyHelpLeavesOutHelpLine) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("loom_up", "", MetricType::kUntyped);
  w.Sample("loom_up", {}, 1);
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(out, "# TYPE loom_up untyped\nloom_up 1\n");
}

TEST(MetricsWriter, EscapesHelpAndLabelValues) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("m", "A \"quoted\" C:\\path\nand more.", MetricType::kCounter);
  w.Sample("m", {{"v", "a \"b\" C:\\d\ne"}, {"w", "µ"}}, 2);
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(out, R"(# HELP m A "quoted" C:\\path\nand more.
# TYPE m counter
m{v="a \"b\" C:\\d\ne",w="µ"} 2
)");
  EXPECT_EQ(FirstInvalidLine(out), "");
}

TEST(MetricsWriter, KeepsLabelOrder) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("m", "h", MetricType::kGauge);
  w.Sample("m", {{"z", "1"}, {"a", "2"}, {"m", "3"}}, 1);
  EXPECT_EQ(out, "# HELP m h\n# TYPE m gauge\nm{z=\"1\",a=\"2\",m=\"3\"} 1\n");
}

TEST(MetricsWriter, SpecialValues) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("m", "", MetricType::kGauge);
  w.Sample("m", {{"k", "a"}}, kInf);
  w.Sample("m", {{"k", "b"}}, -kInf);
  w.Sample("m", {{"k", "c"}}, kNaN);
  w.Sample("m", {{"k", "d"}}, 1e-9);
  EXPECT_TRUE(w.status().ok());
  EXPECT_EQ(out,
            "# TYPE m gauge\n"
            "m{k=\"a\"} +Inf\n"
            "m{k=\"b\"} -Inf\n"
            "m{k=\"c\"} NaN\n"
            "m{k=\"d\"} 1e-09\n");
}

TEST(MetricsWriter, SanitisesInvalidNamesAndReportsThem) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("loom-jobs", "h", MetricType::kGauge);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("loom-jobs"));
  w.Sample("loom-jobs", {{"node-name", "a"}, {"__name__", "x"}}, 1);
  EXPECT_EQ(out,
            "# HELP loom_jobs h\n"
            "# TYPE loom_jobs gauge\n"
            "loom_jobs{node_name=\"a\",_name__=\"x\"} 1\n");
  EXPECT_EQ(FirstInvalidLine(out), "");
}

TEST(MetricsWriter, InvalidLabelNameIsAnError) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("m", "", MetricType::kGauge);
  w.Sample("m", {{"__reserved", "x"}}, 1);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(FirstInvalidLine(out), "");
  EXPECT_THAT(out, HasSubstr("m{_reserved=\"x\"} 1\n"));
}

TEST(MetricsWriter, SampleBeforeAnyFamilyIsLeftOut) {
  std::string out;
  MetricsWriter w(&out);
  w.Sample("m", {}, 1);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out, "");
}

TEST(MetricsWriter, InterleavedFamiliesAreRefused) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("a", "", MetricType::kGauge);
  w.Sample("a", {{"k", "1"}}, 1);
  w.Family("b", "", MetricType::kGauge);
  w.Sample("b", {}, 2);
  w.Sample("a", {{"k", "2"}}, 3);  // `a` is over: left out.
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("contiguous"));
  w.Family("a", "", MetricType::kGauge);  // Starting `a` again: refused.
  w.Sample("a", {{"k", "3"}}, 4);
  EXPECT_EQ(out,
            "# TYPE a gauge\n"
            "a{k=\"1\"} 1\n"
            "# TYPE b gauge\n"
            "b 2\n");
}

TEST(MetricsWriter, RepeatedFamilyIsRefusedAndItsSamplesLeftOut) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("a", "", MetricType::kGauge);
  w.Family("b", "", MetricType::kGauge);
  EXPECT_TRUE(w.status().ok());
  w.Family("a", "again", MetricType::kCounter);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  w.Sample("a", {}, 1);
  w.Family("c", "", MetricType::kGauge);
  w.Sample("c", {}, 2);
  EXPECT_EQ(out, "# TYPE a gauge\n# TYPE b gauge\n# TYPE c gauge\nc 2\n");
}

TEST(MetricsWriter, RestartingTheCurrentFamilyKeepsIt) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("a", "h", MetricType::kGauge);
  w.Sample("a", {{"k", "1"}}, 1);
  w.Family("a", "h", MetricType::kGauge);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  w.Sample("a", {{"k", "2"}}, 2);
  EXPECT_EQ(out, "# HELP a h\n# TYPE a gauge\na{k=\"1\"} 1\na{k=\"2\"} 2\n");
}

TEST(MetricsWriter, HistogramSampleNamesClashWithOtherFamilies) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("lat", "", MetricType::kHistogram);
  w.Family("lat_count", "", MetricType::kCounter);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(w.status().message()), HasSubstr("lat_count"));
  w.Sample("lat_count", {}, 1);
  EXPECT_EQ(out, "# TYPE lat histogram\n");

  std::string out2;
  MetricsWriter w2(&out2);
  w2.Family("x_sum", "", MetricType::kGauge);
  w2.Family("x", "", MetricType::kHistogram);
  EXPECT_FALSE(w2.status().ok());
  EXPECT_EQ(out2, "# TYPE x_sum gauge\n");
}

TEST(MetricsWriter, DuplicateLabelOrSeriesIsLeftOut) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("m", "", MetricType::kGauge);
  w.Sample("m", {{"a", "1"}, {"a", "2"}}, 1);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(out, "# TYPE m gauge\n");

  std::string out2;
  MetricsWriter w2(&out2);
  w2.Family("m", "", MetricType::kGauge);
  w2.Sample("m", {{"a", "1"}, {"b", "2"}}, 1);
  w2.Sample("m", {{"b", "2"}, {"a", "1"}}, 2);  // The same series.
  EXPECT_EQ(w2.status().code(), absl::StatusCode::kFailedPrecondition);
  w2.Sample("m", {{"a", "1"}, {"b", "3"}}, 3);
  EXPECT_EQ(out2,
            "# TYPE m gauge\n"
            "m{a=\"1\",b=\"2\"} 1\n"
            "m{a=\"1\",b=\"3\"} 3\n");

  // Names that only become equal when sanitised are duplicates too.
  std::string out3;
  MetricsWriter w3(&out3);
  w3.Family("m", "", MetricType::kGauge);
  w3.Sample("m", {{"a-b", "1"}, {"a_b", "2"}}, 1);
  EXPECT_EQ(out3, "# TYPE m gauge\n");
}

TEST(MetricsWriter, SampleAndHistogramSampleMatchTheFamilyType) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("h", "", MetricType::kHistogram);
  w.Sample("h", {}, 1);
  w.Sample("h_count", {}, 1);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  w.Family("g", "", MetricType::kGauge);
  w.HistogramSample("g", {}, Histogram());
  EXPECT_EQ(out, "# TYPE h histogram\n# TYPE g gauge\n");
}

TEST(MetricsWriter, HistogramFromPerBucketCounts) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("lat", "Latency.", MetricType::kHistogram);
  const std::vector<double> bounds = {0.005, 0.1, 1};
  const std::vector<uint64_t> counts = {2, 0, 3};
  w.HistogramSample("lat", {{"op", "put"}}, bounds, counts,
                    BucketCounts::kPerBucket, 1.25, 6);
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_EQ(out,
            "# HELP lat Latency.\n"
            "# TYPE lat histogram\n"
            "lat_bucket{op=\"put\",le=\"0.005\"} 2\n"
            "lat_bucket{op=\"put\",le=\"0.1\"} 2\n"
            "lat_bucket{op=\"put\",le=\"1\"} 5\n"
            "lat_bucket{op=\"put\",le=\"+Inf\"} 6\n"
            "lat_sum{op=\"put\"} 1.25\n"
            "lat_count{op=\"put\"} 6\n");
}

TEST(MetricsWriter, HistogramFromCumulativeCountsWithInfBound) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("lat", "", MetricType::kHistogram);
  const std::vector<double> bounds = {1e-9, 2.5, kInf};
  const std::vector<uint64_t> counts = {1, 4, 9};
  w.HistogramSample("lat", {}, bounds, counts, BucketCounts::kCumulative, 30,
                    9);
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_EQ(out,
            "# TYPE lat histogram\n"
            "lat_bucket{le=\"1e-09\"} 1\n"
            "lat_bucket{le=\"2.5\"} 4\n"
            "lat_bucket{le=\"+Inf\"} 9\n"
            "lat_sum 30\n"
            "lat_count 9\n");
}

TEST(MetricsWriter, HistogramWithoutFiniteBuckets) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("lat", "", MetricType::kHistogram);
  w.HistogramSample("lat", {}, {}, {}, BucketCounts::kCumulative, 0.5, 2);
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_EQ(out,
            "# TYPE lat histogram\n"
            "lat_bucket{le=\"+Inf\"} 2\n"
            "lat_sum 0.5\n"
            "lat_count 2\n");
}

// Each bad histogram is refused as a whole: nothing is written for it.
TEST(MetricsWriter, BadHistogramsAreLeftOut) {
  struct Case {
    const char* what;
    std::vector<double> bounds;
    std::vector<uint64_t> counts;
    BucketCounts kind;
    uint64_t count;
    MetricLabels labels;
  };
  const std::vector<Case> cases = {
      {"decreasing cumulative",
       {1, 2},
       {3, 2},
       BucketCounts::kCumulative,
       5,
       {}},
      {"more in buckets than count",
       {1, 2},
       {3, 4},
       BucketCounts::kPerBucket,
       5,
       {}},
      {"+Inf bucket != count",
       {1, kInf},
       {1, 2},
       BucketCounts::kCumulative,
       3,
       {}},
      {"bounds not increasing",
       {2, 1},
       {0, 0},
       BucketCounts::kCumulative,
       0,
       {}},
      {"equal bounds", {1, 1}, {0, 0}, BucketCounts::kCumulative, 0, {}},
      {"NaN bound", {kNaN}, {0}, BucketCounts::kCumulative, 0, {}},
      {"sizes differ", {1, 2}, {0}, BucketCounts::kCumulative, 0, {}},
      {"le label", {1}, {0}, BucketCounts::kCumulative, 0, {{"le", "1"}}},
      {"overflow",
       {1, 2},
       {std::numeric_limits<uint64_t>::max(), 1},
       BucketCounts::kPerBucket,
       std::numeric_limits<uint64_t>::max(),
       {}},
  };
  for (const Case& c : cases) {
    std::string out;
    MetricsWriter w(&out);
    w.Family("h", "", MetricType::kHistogram);
    w.HistogramSample("h", c.labels, c.bounds, c.counts, c.kind, 1, c.count);
    EXPECT_FALSE(w.status().ok()) << c.what;
    EXPECT_EQ(out, "# TYPE h histogram\n") << c.what;
  }
}

TEST(MetricsWriter, HistogramSeriesWrittenTwiceIsLeftOut) {
  std::string out;
  MetricsWriter w(&out);
  w.Family("h", "", MetricType::kHistogram);
  w.HistogramSample("h", {{"q", "a"}}, Histogram());
  w.HistogramSample("h", {{"q", "a"}}, Histogram());
  EXPECT_EQ(w.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(out,
            "# TYPE h histogram\n"
            "h_bucket{q=\"a\",le=\"+Inf\"} 0\n"
            "h_sum{q=\"a\"} 0\n"
            "h_count{q=\"a\"} 0\n");
}

TEST(Histogram, CreateChecksBounds) {
  EXPECT_TRUE(Histogram::Create({}).ok());
  EXPECT_TRUE(Histogram::Create({0.1, 1, 10}).ok());
  EXPECT_TRUE(Histogram::Create(Histogram::DefaultBounds()).ok());
  EXPECT_EQ(Histogram::Create({1, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({2, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({1, kInf}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({kNaN}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Histogram::Create({-kInf, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Histogram, ObserveUsesLessOrEqualBounds) {
  absl::StatusOr<Histogram> h = Histogram::Create({1, 2, 4});
  ASSERT_TRUE(h.ok());
  for (double v : {-3.0, 1.0, 1.5, 2.0, 4.0, 4.5, 100.0}) h->Observe(v);
  EXPECT_EQ(h->bucket_counts(), (std::vector<uint64_t>{2, 2, 1, 2}));
  EXPECT_EQ(h->count(), 7u);
  EXPECT_DOUBLE_EQ(h->sum(), 110.0);
  EXPECT_EQ(h->upper_bounds(), (std::vector<double>{1, 2, 4}));
}

TEST(Histogram, InfAndNaNGoToTheLastBucket) {
  absl::StatusOr<Histogram> h = Histogram::Create({1});
  ASSERT_TRUE(h.ok());
  h->Observe(kInf);
  EXPECT_EQ(h->bucket_counts(), (std::vector<uint64_t>{0, 1}));
  EXPECT_EQ(h->sum(), kInf);
  h->Observe(kNaN);
  EXPECT_EQ(h->bucket_counts(), (std::vector<uint64_t>{0, 2}));
  EXPECT_EQ(h->count(), 2u);
  EXPECT_TRUE(std::isnan(h->sum()));
}

TEST(Histogram, Merge) {
  absl::StatusOr<Histogram> a = Histogram::Create({1, 2});
  absl::StatusOr<Histogram> b = Histogram::Create({1, 2});
  ASSERT_TRUE(a.ok() && b.ok());
  a->Observe(0.5);
  b->Observe(1.5);
  b->Observe(3);
  ASSERT_TRUE(a->Merge(*b).ok());
  EXPECT_EQ(a->bucket_counts(), (std::vector<uint64_t>{1, 1, 1}));
  EXPECT_EQ(a->count(), 3u);
  EXPECT_DOUBLE_EQ(a->sum(), 5.0);

  absl::StatusOr<Histogram> c = Histogram::Create({1, 3});
  ASSERT_TRUE(c.ok());
  c->Observe(2);
  EXPECT_EQ(a->Merge(*c).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->count(), 3u);  // Unchanged.
  EXPECT_EQ(a->bucket_counts(), (std::vector<uint64_t>{1, 1, 1}));
}

TEST(MetricsWriter, WritesHistogramValueType) {
  absl::StatusOr<Histogram> h = Histogram::Create({0.25, 1, 4});
  ASSERT_TRUE(h.ok());
  for (double v : {0.25, 0.5, 0.5, 2.0, 8.0}) h->Observe(v);
  std::string out;
  MetricsWriter w(&out);
  w.Family("s", "", MetricType::kHistogram);
  w.HistogramSample("s", {{"queue", "default"}}, *h);
  EXPECT_TRUE(w.status().ok()) << w.status();
  EXPECT_EQ(out,
            "# TYPE s histogram\n"
            "s_bucket{queue=\"default\",le=\"0.25\"} 1\n"
            "s_bucket{queue=\"default\",le=\"1\"} 3\n"
            "s_bucket{queue=\"default\",le=\"4\"} 4\n"
            "s_bucket{queue=\"default\",le=\"+Inf\"} 5\n"
            "s_sum{queue=\"default\"} 11.25\n"
            "s_count{queue=\"default\"} 5\n");
}

TEST(MetricsWriter, FullExposition) {
  absl::StatusOr<Histogram> cycle = Histogram::Create({0.25, 1, 4});
  ASSERT_TRUE(cycle.ok());
  for (double v : {0.25, 0.5, 0.5, 2.0, 8.0}) cycle->Observe(v);

  std::string out;
  MetricsWriter w(&out);
  w.Family("loom_jobs", "Jobs by state.", MetricType::kGauge);
  w.Sample("loom_jobs", {{"state", "running"}}, 3);
  w.Sample("loom_jobs", {{"state", "pending"}}, 7);
  w.Family("loom_tasks_started_total",
           "Tasks started, by node.\nCounts restarts.", MetricType::kCounter);
  w.Sample("loom_tasks_started_total",
           {{"node", "gpu-1"}, {"reason", "a \"b\" c\\d\ne"}}, 1027);
  w.Sample("loom_tasks_started_total", {}, 1500000);
  w.Family("loom_cluster_utilization", "", MetricType::kUntyped);
  w.Sample("loom_cluster_utilization", {}, 0.875);
  w.Family("loom_schedule_seconds", "Time per scheduling cycle.",
           MetricType::kHistogram);
  w.HistogramSample("loom_schedule_seconds", {{"queue", "default"}}, *cycle);
  const std::vector<double> bounds = {0.25, 1, 4, kInf};
  const std::vector<uint64_t> cumulative = {0, 0, 1, 1};
  w.HistogramSample("loom_schedule_seconds", {{"queue", "batch"}}, bounds,
                    cumulative, BucketCounts::kCumulative, 3, 1);
  w.Family("loom_node_temperature_celsius", "GPU temperature.",
           MetricType::kGauge);
  w.Sample("loom_node_temperature_celsius", {{"gpu", "0"}}, 61.5);
  w.Sample("loom_node_temperature_celsius", {{"gpu", "1"}}, kNaN);
  ASSERT_TRUE(w.status().ok()) << w.status();

  const std::string expected = R"(# HELP loom_jobs Jobs by state.
# TYPE loom_jobs gauge
loom_jobs{state="running"} 3
loom_jobs{state="pending"} 7
# HELP loom_tasks_started_total Tasks started, by node.\nCounts restarts.
# TYPE loom_tasks_started_total counter
loom_tasks_started_total{node="gpu-1",reason="a \"b\" c\\d\ne"} 1027
loom_tasks_started_total 1500000
# TYPE loom_cluster_utilization untyped
loom_cluster_utilization 0.875
# HELP loom_schedule_seconds Time per scheduling cycle.
# TYPE loom_schedule_seconds histogram
loom_schedule_seconds_bucket{queue="default",le="0.25"} 1
loom_schedule_seconds_bucket{queue="default",le="1"} 3
loom_schedule_seconds_bucket{queue="default",le="4"} 4
loom_schedule_seconds_bucket{queue="default",le="+Inf"} 5
loom_schedule_seconds_sum{queue="default"} 11.25
loom_schedule_seconds_count{queue="default"} 5
loom_schedule_seconds_bucket{queue="batch",le="0.25"} 0
loom_schedule_seconds_bucket{queue="batch",le="1"} 0
loom_schedule_seconds_bucket{queue="batch",le="4"} 1
loom_schedule_seconds_bucket{queue="batch",le="+Inf"} 1
loom_schedule_seconds_sum{queue="batch"} 3
loom_schedule_seconds_count{queue="batch"} 1
# HELP loom_node_temperature_celsius GPU temperature.
# TYPE loom_node_temperature_celsius gauge
loom_node_temperature_celsius{gpu="0"} 61.5
loom_node_temperature_celsius{gpu="1"} NaN
)";
  EXPECT_EQ(out, expected);
  EXPECT_EQ(FirstInvalidLine(out), "");
}

// Whatever the calls, the output stays valid text format.
TEST(MetricsWriter, OutputStaysValidAfterMisuse) {
  std::string out;
  MetricsWriter w(&out);
  w.Sample("early", {}, 1);
  w.Family("9 bad name", "help\\with\nnewline", MetricType::kCounter);
  w.Sample("9 bad name", {{"", "\""}, {"1x", "\n"}, {"ok", "\xFF"}}, -kInf);
  w.Family("h", "", MetricType::kHistogram);
  const std::vector<double> bounds = {3, 2};
  const std::vector<uint64_t> counts = {1, 1};
  w.HistogramSample("h", {}, bounds, counts, BucketCounts::kPerBucket, 1, 2);
  w.HistogramSample("h", {{"le", "x"}}, Histogram());
  w.HistogramSample("h", {{"__x", "y"}}, Histogram());
  w.Sample("9 bad name", {}, 2);
  EXPECT_FALSE(w.status().ok());
  EXPECT_EQ(FirstInvalidLine(out), "") << out;
  EXPECT_THAT(out, HasSubstr("_9_bad_name{_=\"\\\"\",_1x=\"\\n\",ok=\""
                             "\xEF\xBF\xBD\"} -Inf\n"));
  EXPECT_THAT(out, HasSubstr("h_bucket{_x=\"y\",le=\"+Inf\"} 0\n"));
}

TEST(FirstInvalidLine, CatchesBadLines) {
  // The checker used above must itself be able to fail.
  EXPECT_NE(FirstInvalidLine("a-b 1\n"), "");
  EXPECT_NE(FirstInvalidLine("m{a=\"x\ny\"} 1\n"), "");
  EXPECT_NE(FirstInvalidLine("m{a=\"x\"y\"} 1\n"), "");
  EXPECT_NE(FirstInvalidLine("m{__a=\"x\"} 1\n"), "");
  EXPECT_NE(FirstInvalidLine("m 1.0e6\n"), "");
  EXPECT_NE(FirstInvalidLine("m inf\n"), "");
  EXPECT_NE(FirstInvalidLine("m 1"), "");
  EXPECT_EQ(FirstInvalidLine("m{a=\"x\\\"y\"} 1\n"), "");
}

}  // namespace
}  // namespace loom
