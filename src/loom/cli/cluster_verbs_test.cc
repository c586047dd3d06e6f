#include "loom/cli/cluster_verbs.h"

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"
#include "loom/cli/spec_verbs.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(FormatClusterPlan, SaysWhyAJobBecomesInfeasible) {
  const Json plan = {
      {"live_revision", 3},
      {"changes",
       {{{"op", "-"},
         {"kind", "pool"},
         {"name", "a100"},
         {"text", "- pool a100 (2 nodes of 8x a100)"}}}},
      {"effects",
       {{"drain", {{{"job", 4}, {"why", "node a100-0 is removed"}}}},
        {"over_quota", Json::array()},
        {"infeasible",
         {{{"job", 7}, {"why", "needs 16 GPUs of a100; the cluster has 0"}}}},
        {"feasible", {9}}}}};
  const std::string text = FormatClusterPlan(plan);
  EXPECT_THAT(text, HasSubstr("- pool a100 (2 nodes of 8x a100)"));
  EXPECT_THAT(text, HasSubstr("job 4 moves: node a100-0 is removed"));
  EXPECT_THAT(text,
              HasSubstr("pending job 7 can no longer run: needs 16 GPUs of "
                        "a100; the cluster has 0 (it stays pending)"));
  EXPECT_THAT(text, HasSubstr("pending job 9 can run again"));
  EXPECT_THAT(text, HasSubstr("Plan: 0 to add, 0 to change, 1 to remove."));
}

TEST(FormatProjectTable, ListsProjects) {
  const Json projects = {{"projects",
                          {{{"name", "search"},
                            {"quota_gpus", 96},
                            {"weight", 2},
                            {"running_gpus", 16},
                            {"gpu_seconds", 7200.0},
                            {"pending_jobs", 3},
                            {"running_jobs", 2}}}}};
  EXPECT_EQ(FormatProjectTable(projects),
            "NAME    QUOTA_GPUS  WEIGHT  RUNNING_GPUS  RUNNING  PENDING  "
            "GPU_HOURS\n"
            "search  96          2       16            2        3        "
            "2.0\n");
}

TEST(FormatTopTest, TotalsNodeMapAndJobs) {
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  nlohmann::json nodes = {{"nodes", nlohmann::json::array()}};
  const std::vector<std::tuple<const char*, const char*, int>> spec = {
      {"leaf0", "up", 8},      {"leaf0", "up", 4},     {"leaf0", "up", 1},
      {"leaf0", "up", 0},      {"leaf1", "down", 0},   {"leaf1", "drained", 0},
      {"leaf1", "suspect", 0}, {"leaf1", "unknown", 0}};
  for (const auto& [leaf, state, alloc] : spec) {
    nodes["nodes"].push_back({{"leaf", leaf},
                              {"state", state},
                              {"gpus", 8},
                              {"gpus_allocated", alloc}});
  }
  nlohmann::json jobs = {{"jobs",
                          {{{"id", 7},
                            {"name", "big"},
                            {"user", "ana"},
                            {"gpus", 12},
                            {"state", "running"},
                            {"start_time", "2027-01-15T07:50:00.000Z"},
                            {"placement",
                             {{"switch_level", 1},
                              {"switch", "leaf0"},
                              {"nodes", 2},
                              {"tasks", nlohmann::json::array()}}}},
                           {{"id", 9},
                            {"name", "wait"},
                            {"user", "bo"},
                            {"gpus", 64},
                            {"state", "pending"},
                            {"reason", "no room"}}}}};
  const std::string top =
      FormatTop(nodes, jobs, "http://127.0.0.1:7070", 80, 10, now);
  EXPECT_THAT(top, ::testing::HasSubstr("GPUs   13/64 allocated (20%)"));
  EXPECT_THAT(top,
              ::testing::HasSubstr(
                  "Nodes  8, 4 up, 1 suspect, 1 drained, 1 down, 1 unknown"));
  EXPECT_THAT(top, ::testing::HasSubstr("Jobs   1 running, 1 waiting"));
  EXPECT_THAT(top, ::testing::HasSubstr("leaf0  #+-.  leaf1  Xds?"));
  EXPECT_THAT(top, ::testing::ContainsRegex("9 +wait +bo +64 +no room"));
  EXPECT_THAT(top, ::testing::ContainsRegex("7 +big +ana +12 +"));
  for (absl::string_view line : absl::StrSplit(top, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
}

}  // namespace
}  // namespace loom
