// Tests of the cgroup v1 limits (cgroup.h) on a fake cgroup tree.

#include "loom/agent/cgroup.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/task_launcher_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::loom::testing::FakeCgroupTree;
using ::loom::testing::ReadFile;
using ::loom::testing::TempDir;
using ::testing::HasSubstr;

TEST(CgroupV1ManagerTest, WritesLimitsIntoAFakeTree) {
  TempDir tmp;
  FakeCgroupTree tree(tmp / "cg");
  CgroupV1Manager cgroups(tmp / "cg", tree.self());
  EXPECT_EQ(cgroups.ParentDir("memory"), tmp / "cg/memory/agent/pod/loom");
  absl::StatusOr<CgroupPlacement> placement = cgroups.Prepare(
      "42.1", TaskLimits{.memory_bytes = int64_t{1} << 30, .cpu_millis = 1500});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_TRUE(placement->limits_applied);
  const std::string mem = tmp / "cg/memory/agent/pod/loom/42.1";
  const std::string cpu = tmp / "cg/cpu/loom/42.1";
  EXPECT_EQ(ReadFile(mem + "/memory.limit_in_bytes"), "1073741824");
  EXPECT_EQ(ReadFile(mem + "/memory.memsw.limit_in_bytes"), "1073741824");
  EXPECT_EQ(ReadFile(cpu + "/cpu.cfs_period_us"), "100000");
  EXPECT_EQ(ReadFile(cpu + "/cpu.cfs_quota_us"), "150000");
  EXPECT_EQ(
      placement->procs_files,
      (std::vector<std::string>{mem + "/cgroup.procs", cpu + "/cgroup.procs"}));
  EXPECT_EQ(placement->dirs, (std::vector<std::string>{mem, cpu}));
  EXPECT_THAT(placement->note, HasSubstr("cgroup v1 limits"));

  ASSERT_TRUE(cgroups.Remove(*placement).ok());
  EXPECT_FALSE(fs::exists(mem));
  EXPECT_FALSE(fs::exists(cpu));
  EXPECT_TRUE(cgroups.Remove(*placement).ok());  // already gone: fine
}

TEST(CgroupV1ManagerTest, ReportsControllersThatAreMissing) {
  TempDir tmp;
  FakeCgroupTree tree(tmp / "cg", /*with_cpu=*/false);
  CgroupV1Manager cgroups(tmp / "cg", tree.self());
  absl::StatusOr<CgroupPlacement> placement = cgroups.Prepare(
      "1.0", TaskLimits{.memory_bytes = 1 << 20, .cpu_millis = 500});
  ASSERT_TRUE(placement.ok()) << placement.status();
  EXPECT_FALSE(placement->limits_applied);
  EXPECT_EQ(placement->dirs.size(), 1u);
  EXPECT_THAT(placement->note, HasSubstr("cgroup limits not applied: cpu"));
  EXPECT_EQ(cgroups
                .Prepare("1.1", TaskLimits{.memory_bytes = std::nullopt,
                                           .cpu_millis = 0})
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
