#include "loom/core/job_array.h"

#include <vector>

#include "gtest/gtest.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

TEST(JobArrayTest, ParsesSlurmForms) {
  absl::StatusOr<ArraySpec> a = ParseArraySpec("0-999%10");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->indices.size(), 1000u);
  EXPECT_EQ(a->indices.front(), 0);
  EXPECT_EQ(a->indices.back(), 999);
  EXPECT_EQ(a->max_running, 10);

  a = ParseArraySpec("1,3,5-11:2,4");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->indices, (std::vector<int>{1, 3, 4, 5, 7, 9, 11}));
  EXPECT_EQ(a->max_running, 0);

  a = ParseArraySpec("7");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->indices, (std::vector<int>{7}));
  // Duplicates fold.
  a = ParseArraySpec("1-3,2-4");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->indices, (std::vector<int>{1, 2, 3, 4}));
}

TEST(JobArrayTest, RejectsBadInputNamingTheItem) {
  for (const char* bad :
       {"", "%4", "5-1", "a-3", "1-", "-3", "1,,2", "0-9:0", "3:2", "0-9%0",
        "0-9%x", "1-2-3", "+1", "0-10000000", "0-200000", " 1"}) {
    absl::StatusOr<ArraySpec> a = ParseArraySpec(bad);
    EXPECT_FALSE(a.ok()) << bad;
    if (!a.ok()) {
      EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument) << bad;
      EXPECT_NE(a.status().message().find("array"), absl::string_view::npos);
    }
  }
  absl::StatusOr<ArraySpec> a = ParseArraySpec("1,5-2");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("'5-2'"), absl::string_view::npos);
  EXPECT_NE(a.status().message().find("reversed"), absl::string_view::npos);
}

TEST(JobArrayTest, FormatsCompactRanges) {
  EXPECT_EQ(FormatIndexRanges({}), "");
  EXPECT_EQ(FormatIndexRanges({4}), "4");
  EXPECT_EQ(FormatIndexRanges({0, 1, 2, 3, 7, 9, 11, 13}), "0-3,7-13:2");
  EXPECT_EQ(FormatIndexRanges({1, 5}), "1,5");
  EXPECT_EQ(FormatIndexRanges({1, 2}), "1-2");
  EXPECT_EQ(FormatIndexRanges({40, 41, 42, 999}), "40-42,999");
  EXPECT_EQ(FormatArraySpec({{0, 1, 2}, 2}), "0-2%2");
}

TEST(JobArrayTest, FormatThenParseGivesTheIndicesBack) {
  // Many shapes: runs, steps, singletons.
  for (int seed = 1; seed < 200; ++seed) {
    std::vector<int> v;
    unsigned x = static_cast<unsigned>(seed) * 2654435761u;
    int i = static_cast<int>(x % 7);
    while (v.size() < 40) {
      v.push_back(i);
      x = x * 1103515245u + 12345u;
      i += 1 + static_cast<int>((x >> 16) % (1 + seed % 5));
    }
    absl::StatusOr<ArraySpec> back = ParseArraySpec(FormatIndexRanges(v));
    ASSERT_TRUE(back.ok()) << FormatIndexRanges(v);
    EXPECT_EQ(back->indices, v) << FormatIndexRanges(v);
  }
}

TEST(JobArrayTest, ElementRefs) {
  absl::StatusOr<ArrayElementRef> r = ParseArrayElementRef("12_7");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->array_job, 12);
  EXPECT_EQ(r->index, 7);
  EXPECT_EQ(ArrayElementName(12, 7), "12_7");
  for (const char* bad :
       {"12", "_7", "12_", "012_7", "12_x", "12_7_1", "a_1", "12_99999999"}) {
    EXPECT_FALSE(ParseArrayElementRef(bad).ok()) << bad;
  }
}

TEST(JobArrayTest, SpecFieldIsCanonical) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: sweep\ncommand: [\"true\"]\narray: \"0-9,10-19%3\"\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->array, "0-19%3");
  spec = ParseJobSpec("name: sweep\ncommand: [\"true\"]\narray: \"9-1\"\n",
                      "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("array"), absl::string_view::npos);
  EXPECT_NE(spec.status().message().find("job.yaml"), absl::string_view::npos);
}

}  // namespace
}  // namespace loom
