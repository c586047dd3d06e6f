// `--emulate-driver` and `--emulate-cuda` (emulated_stack.h): literal
// versions, `@FILE` read at start (errors name the flag and the file), and
// read again later, a bad file keeping the value the node had.

#include "loom/agent/emulated_stack.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_command.h"
#include "loom/agent/agent_test_util.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

using agent_testing::TempDir;
using ::testing::HasSubstr;

AgentFlags EmulatedStackFlags() {
  AgentFlags flags;
  flags.servers = "127.0.0.1:7000";
  flags.listen = "127.0.0.1:0";
  flags.data_dir = "/tmp/unused";
  flags.emulate = "8xH200";
  return flags;
}

TEST(EmulatedStackTest, FlagsTakeALiteralOrAFile) {
  TempDir dir;
  const std::string driver = dir.path() + "/driver";
  const std::string cuda = dir.path() + "/cuda";
  ASSERT_TRUE(WriteFileAtomically(driver, "  560.35.03\n\n").ok());
  ASSERT_TRUE(WriteFileAtomically(cuda, "12.6").ok());
  AgentFlags flags = EmulatedStackFlags();
  flags.emulate_driver = "@" + driver;
  flags.emulate_cuda = "@" + cuda;
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(flags);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->emulation->driver_version, "560.35.03");
  EXPECT_EQ(o->emulation->driver_file, driver);
  EXPECT_EQ(o->emulation->cuda_version, "12.6");
  EXPECT_EQ(o->emulation->cuda_file, cuda);

  flags.emulate_driver = "535.161.08";
  flags.emulate_cuda = "";
  o = AgentOptionsFromFlags(flags);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->emulation->driver_version, "535.161.08");
  EXPECT_EQ(o->emulation->driver_file, "");
  EXPECT_EQ(o->emulation->cuda_version, "12.4");

  // Errors name the flag, and the file.
  struct Case {
    std::string driver, cuda, text;
  };
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/bad", "5 5 0\n").ok());
  ASSERT_TRUE(WriteFileAtomically(dir.path() + "/empty", "\n").ok());
  for (const Case& c : std::vector<Case>{
           {"@" + dir.path() + "/missing", "",
            "--emulate-driver: cannot read the version file " + dir.path() +
                "/missing"},
           {"", "@" + dir.path() + "/bad",
            "--emulate-cuda: the version file " + dir.path() +
                "/bad holds '5 5 0', not a version"},
           {"@" + dir.path() + "/empty", "", "/empty holds ''"},
           {"@" + dir.path(), "", "--emulate-driver: cannot read"},
           {"@", "", "--emulate-driver: '@' must be followed by a file"},
           {"5 5 0", "", "--emulate-driver: '5 5 0' is not a version"},
           {std::string(65, '1'), "", "is not a version"}}) {
    flags.emulate_driver = c.driver;
    flags.emulate_cuda = c.cuda;
    o = AgentOptionsFromFlags(flags);
    ASSERT_FALSE(o.ok()) << c.driver << " " << c.cuda;
    EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(o.status().message()), HasSubstr(c.text));
  }
}

TEST(EmulatedStackTest, ReadAgainABadFileKeepsThePreviousValue) {
  TempDir dir;
  const std::string driver = dir.path() + "/driver";
  ASSERT_TRUE(WriteFileAtomically(driver, "550.54.15\n").ok());
  GpuEmulation e = ParseGpuEmulation("8xH200").value();
  ASSERT_TRUE(ResolveEmulatedVersionFlag("--emulate-driver", "@" + driver,
                                         &e.driver_version, &e.driver_file)
                  .ok());
  std::vector<std::string> warnings;
  GpuSoftware s = RereadEmulatedSoftware(e, {"550.54.15", "12.4"}, &warnings);
  EXPECT_EQ(s.driver, "550.54.15");
  EXPECT_EQ(s.cuda, "12.4");
  EXPECT_TRUE(warnings.empty());

  ASSERT_TRUE(WriteFileAtomically(driver, "570.86.10\n").ok());
  s = RereadEmulatedSoftware(e, s, &warnings);
  EXPECT_EQ(s.driver, "570.86.10");
  EXPECT_TRUE(warnings.empty());

  ASSERT_TRUE(WriteFileAtomically(driver, "garbage!\n").ok());
  s = RereadEmulatedSoftware(e, s, &warnings);
  EXPECT_EQ(s.driver, "570.86.10");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr(driver));
  EXPECT_THAT(warnings[0], HasSubstr("keeps reporting '570.86.10'"));

  ASSERT_EQ(unlink(driver.c_str()), 0);
  warnings.clear();
  s = RereadEmulatedSoftware(e, s, &warnings);
  EXPECT_EQ(s.driver, "570.86.10");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_THAT(warnings[0], HasSubstr("cannot read the version file"));
}

}  // namespace
}  // namespace loom
