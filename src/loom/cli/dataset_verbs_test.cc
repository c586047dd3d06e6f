#include "loom/cli/dataset_verbs.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using Json = nlohmann::json;

// `loom datasets`: a row per dataset; COLD and PEER are what the cold
// store and peers sent, for task starts and prefetches together.
TEST(FormatDatasetTable, CountsPrefetchedBytesWithTheFills) {
  const Json datasets = {
      {"datasets",
       {{{"name", "set"},
         {"source", "cold:set"},
         {"use",
          {{"version", "0123456789abcdef"},
           {"nodes", {"h200-0", "h200-1"}},
           {"starts", 4},
           {"hits", 2},
           {"hit_ratio", 0.5},
           {"cold_bytes", 1024},
           {"peer_bytes", 2048},
           {"fills", 2},
           {"fill_seconds_mean", 1.5},
           {"prefetches", 3},
           {"prefetch_cold_bytes", 1024},
           {"prefetch_peer_bytes", 0}}}},
        {{"name", ""}, {"source", "cold:other"}, {"use", Json::object()}}}}};
  const std::string table = FormatDatasetTable(datasets);
  EXPECT_THAT(table, HasSubstr("PREFETCHES"));
  EXPECT_THAT(table, ContainsRegex("set +cold:set +0123456789abcdef +2 +4 +50% "
                                   "+2Ki +2Ki +1\\.5s +3\n"))
      << table;
  // Never used: dashes and zeros, no division by zero.
  EXPECT_THAT(table, ContainsRegex("- +cold:other +- +- +0 +- +0 +0 +- +0\n"))
      << table;
}

}  // namespace
}  // namespace loom
