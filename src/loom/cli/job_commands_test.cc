#include "loom/cli/job_commands.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"
#include "loom/common/refusing_port_test_util.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using Json = nlohmann::json;

TEST_F(VerbTest, ServerDiscoveryAndNetworkFailures) {
  env_.erase("LOOM_SERVER");
  CliResult r = Run({"nodes"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom nodes: no loom server given: pass "
                               "--server URL, set LOOM_SERVER"));

  const testing::RefusingPort refusing;
  const std::string down = refusing.url();
  r = Run({"projects", "--server", down});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, absl::StrCat("loom projects: cannot reach the loom server "
                                "at ",
                                down, ": Connection refused\n"));
  // --server wins over LOOM_SERVER.
  env_["LOOM_SERVER"] = fake_.url();
  r = Run({"queue", "--server", down});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(down));
}

TEST_F(VerbTest, EveryVerbHasHelp) {
  for (const char* verb :
       {"submit", "run", "release", "queue", "show", "logs", "cancel", "nodes",
        "cordon", "uncordon", "drain", "projects", "checkpoint"}) {
    CliResult r = Run({verb, "--help"});
    EXPECT_EQ(r.rc, 0) << verb;
    EXPECT_THAT(r.out, HasSubstr("--server")) << verb;
  }
}

}  // namespace
}  // namespace loom
