// The cluster spec's `private_data` (docs/cluster-spec.md).

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

constexpr char kPrivateDataPools[] =
    "pools:\n  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 8, "
    "memory: 64Gi}\n";

TEST(ClusterSpecPrivateData, NoneByDefaultJobsAndUsageWhenListed) {
  absl::StatusOr<Cluster> none = ParseClusterSpec(kPrivateDataPools, "c.yaml");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->private_data.jobs);
  EXPECT_FALSE(none->private_data.usage);

  absl::StatusOr<Cluster> both = ParseClusterSpec(
      absl::StrCat(kPrivateDataPools, "private_data: [usage, jobs]\n"),
      "c.yaml");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_TRUE(both->private_data.jobs);
  EXPECT_TRUE(both->private_data.usage);

  absl::StatusOr<Cluster> jobs = ParseClusterSpec(
      absl::StrCat(kPrivateDataPools, "private_data:\n  - jobs\n"), "c.yaml");
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_TRUE(jobs->private_data.jobs);
  EXPECT_FALSE(jobs->private_data.usage);

  absl::StatusOr<Cluster> empty = ParseClusterSpec(
      absl::StrCat(kPrivateDataPools, "private_data: []\n"), "c.yaml");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->private_data, PrivateData{});
}

TEST(ClusterSpecPrivateData, ErrorsNameTheItem) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"private_data: jobs", "c.yaml:3:15: private_data: must be a list"},
      {"private_data: [jobs, nodes]",
       "c.yaml:3:22: private_data[1]: 'nodes' is not one of jobs, usage"},
      {"private_data: [jobs, jobs]",
       "c.yaml:3:22: private_data[1]: 'jobs' is listed twice"},
      {"private_data: [[jobs]]",
       "c.yaml:3:16: private_data[0]: must be a string"},
      {"private_data: [\"\"]",
       "c.yaml:3:16: private_data[0]: must not be empty"},
  };
  for (const auto& [yaml, expected] : cases) {
    absl::StatusOr<Cluster> c =
        ParseClusterSpec(absl::StrCat(kPrivateDataPools, yaml, "\n"), "c.yaml");
    ASSERT_FALSE(c.ok()) << yaml;
    EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(c.status().message(), HasSubstr(expected)) << yaml;
  }
}

}  // namespace
}  // namespace loom
