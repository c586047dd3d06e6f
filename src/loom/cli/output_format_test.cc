#include "loom/cli/output_format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"

namespace loom {
namespace {

using Json = nlohmann::json;

TEST(FormatTable, LastColumnIsNotPadded) {
  EXPECT_EQ(FormatTable({"A", "LONGER"}, {{"xyz", ""}, {"1", "2"}}),
            "A    LONGER\nxyz\n1    2\n");
}

TEST(FormatCsv, QuotesFieldsThatNeedIt) {
  EXPECT_EQ(
      FormatCsv({"A", "B"},
                {{"plain", "a,b"}, {"say \"hi\"", "two\nlines"}, {"", "cr\r"}}),
      "A,B\nplain,\"a,b\"\n\"say \"\"hi\"\"\",\"two\nlines\"\n,\"cr\r\"\n");
}

TEST(JsonToYaml, QuotesStringsThatLookLikeOtherTypes) {
  const Json j = {{"a", "true"},       {"b", "123"},     {"c", 123},
                  {"d", "hello"},      {"e", nullptr},   {"f", Json::array()},
                  {"g", {{"x", 1.5}}}, {"h", {"p", "q"}}};
  EXPECT_EQ(JsonToYaml(j),
            "a: \"true\"\nb: \"123\"\nc: 123\nd: hello\ne: ~\nf: []\n"
            "g:\n  x: 1.5\nh:\n  - p\n  - q\n");
}

TEST(FormatTimes, AgoAndElapsed) {
  EXPECT_EQ(FormatAgo(kNow - absl::Seconds(5), kNow), "5s ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Minutes(3), kNow), "3m ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Hours(5), kNow), "5h ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Hours(50), kNow), "2d ago");
  EXPECT_EQ(FormatAgo(kNow + absl::Seconds(5), kNow), "0s ago");
  EXPECT_EQ(FormatElapsed(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatElapsed(absl::Seconds(725)), "12m05s");
  EXPECT_EQ(FormatElapsed(absl::Minutes(184)), "3h04m");
  EXPECT_EQ(FormatElapsed(absl::Hours(51)), "2d03h");
}

}  // namespace
}  // namespace loom
