#include "loom/cli/node_verbs.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST(FormatNodeTable, ListsNodes) {
  const Json nodes = {{"nodes",
                       {{{"name", "h200-0"},
                         {"state", "up"},
                         {"reason", ""},
                         {"address", "127.0.0.2:7100"},
                         {"pool", "h200"},
                         {"gpu_model", "h200"},
                         {"gpus", 8},
                         {"gpus_allocated", 8},
                         {"cpus", 192},
                         {"memory_bytes", int64_t{2199023255552}},
                         {"leaf", "leaf0"},
                         {"labels", {{"gpu.driver", "550.54.15"}}},
                         {"last_heartbeat", Rfc3339(kNow - absl::Seconds(1))},
                         {"jobs", {41, 43}}},
                        {{"name", "a100-0"},
                         {"state", "cordoned"},
                         {"reason", "driver upgrade"},
                         {"address", "127.0.0.3:7100"},
                         {"gpu_model", "a100"},
                         {"gpus", 8},
                         {"gpus_allocated", 0},
                         {"jobs", Json::array()}}}}};
  EXPECT_EQ(FormatNodeTable(nodes, false, kNow),
            "NAME    STATE     GPUS  ALLOC  MODEL  ADDRESS         JOBS   "
            "REASON\n"
            "h200-0  up        8     8      h200   127.0.0.2:7100  41,43  -\n"
            "a100-0  cordoned  8     0      a100   127.0.0.3:7100  -      "
            "driver upgrade\n");
  const std::string wide = FormatNodeTable(nodes, true, kNow);
  EXPECT_THAT(wide,
              HasSubstr("POOL  LEAF   DRIVER     CPUS  MEMORY  HEARTBEAT  "
                        "REASON"));
  EXPECT_THAT(wide,
              HasSubstr("h200  leaf0  550.54.15  192   2Ti     1s ago     -"));
}

TEST_F(VerbTest, DrainSaysWhatHappens) {
  CliResult r = Run({"drain", "h200-0"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "node h200-0 is draining: no new work; drained when its 1 job "
            "end\n");
}

}  // namespace
}  // namespace loom
