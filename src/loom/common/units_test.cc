#include "loom/common/units.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ParseBytes, Suffixes) {
  EXPECT_EQ(*ParseBytes("141Gi"), 141 * kGiB);
  EXPECT_EQ(*ParseBytes("2Ti"), 2048 * kGiB);
  EXPECT_EQ(*ParseBytes("1.5Gi"), 1536 * kMiB);
  EXPECT_EQ(*ParseBytes("512"), 512);
  EXPECT_EQ(*ParseBytes("1G"), 1000000000);
  EXPECT_EQ(*ParseBytes(" 4Mi "), 4 * kMiB);
}

TEST(ParseBytes, Rejects) {
  EXPECT_FALSE(ParseBytes("").ok());
  EXPECT_FALSE(ParseBytes("-1Gi").ok());
  EXPECT_FALSE(ParseBytes("12Qi").ok());
  EXPECT_FALSE(ParseBytes("Gi").ok());
  EXPECT_FALSE(ParseBytes("99999999999Pi").ok());
  EXPECT_NE(ParseBytes("12Qi").status().message().find("12Qi"),
            std::string::npos);
}

// Issue 14.7: "0.5" became 1 byte.
TEST(ParseBytes, RejectsFractionalBytes) {
  EXPECT_FALSE(ParseBytes("0.5").ok());
  EXPECT_FALSE(ParseBytes("1.5").ok());
  EXPECT_NE(ParseBytes("0.5").status().message().find("whole number of bytes"),
            std::string::npos);
  EXPECT_FALSE(ParseBytes("0.0000001Ki").ok());  // rounds to nothing
  EXPECT_EQ(*ParseBytes("0.5Ki"), 512);
  EXPECT_EQ(*ParseBytes("0"), 0);
  EXPECT_EQ(*ParseBytes("0.0Gi"), 0);
  EXPECT_EQ(*ParseBytes("2.0"), 2);
}

// Issue 14.7: "1h1h" was 2h.
TEST(ParseDuration, RejectsRepeatedOrUnorderedUnits) {
  EXPECT_FALSE(ParseDuration("1h1h").ok());
  EXPECT_NE(ParseDuration("1h1h").status().message().find("twice"),
            std::string::npos);
  EXPECT_FALSE(ParseDuration("30m1h").ok());
  EXPECT_FALSE(ParseDuration("1s500ms1s").ok());
  EXPECT_FALSE(ParseDuration("1h30").ok());
  EXPECT_EQ(*ParseDuration("1w2d3h4m5s6ms"),
            absl::Hours(24 * 9 + 3) + absl::Minutes(4) + absl::Seconds(5) +
                absl::Milliseconds(6));
  EXPECT_EQ(*ParseDuration("1.5h"), absl::Minutes(90));
}

TEST(ParseDuration, Units) {
  EXPECT_EQ(*ParseDuration("30"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("30s"), absl::Seconds(30));
  EXPECT_EQ(*ParseDuration("12h"), absl::Hours(12));
  EXPECT_EQ(*ParseDuration("1h30m"), absl::Minutes(90));
  EXPECT_EQ(*ParseDuration("2d"), absl::Hours(48));
  EXPECT_EQ(*ParseDuration("250ms"), absl::Milliseconds(250));
}

TEST(ParseDuration, Rejects) {
  EXPECT_FALSE(ParseDuration("").ok());
  EXPECT_FALSE(ParseDuration("h").ok());
  EXPECT_FALSE(ParseDuration("3 parsecs").ok());
  EXPECT_FALSE(ParseDuration("-5s").ok());
  EXPECT_FALSE(ParseDuration("10 20").ok());
}

TEST(Format, Bytes) {
  EXPECT_EQ(FormatBytes(141 * kGiB), "141Gi");
  EXPECT_EQ(FormatBytes(1536 * kMiB), "1.5Gi");
}

TEST(Format, Duration) {
  EXPECT_EQ(FormatDurationShort(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatDurationShort(absl::Hours(3)), "3.0h");
}

}  // namespace
}  // namespace loom
