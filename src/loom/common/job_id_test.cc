#include "loom/common/job_id.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ParseJobId, CanonicalPositiveDecimals) {
  EXPECT_EQ(*ParseJobId("1"), 1);
  EXPECT_EQ(*ParseJobId("42"), 42);
  EXPECT_EQ(*ParseJobId("9223372036854775807"), INT64_MAX);
}

TEST(ParseJobId, RefusesEverythingElse) {
  for (const char* bad : {"", "0", "007", "0x10", "-1", "+5", " 5", "5 ", "4.0",
                          "1e3", "abc", "١٢"}) {
    absl::StatusOr<int64_t> id = ParseJobId(bad);
    EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

// Issue 14.7: 2^64-1 was "no job -1".
TEST(ParseJobId, TooLargeIsOutOfRangeAndNamedAsWritten) {
  absl::StatusOr<int64_t> id = ParseJobId("18446744073709551615");
  EXPECT_EQ(id.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(id.status().message(),
            "job ID 18446744073709551615 is out of range (at most "
            "9223372036854775807)");
  EXPECT_EQ(ParseJobId("9223372036854775808").status().code(),
            absl::StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace loom
