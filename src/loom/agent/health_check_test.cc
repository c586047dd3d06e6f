// The node's health checks (health_check.h): GPUs through the fake NVML,
// the data disk, the operator's command.

#include "loom/agent/health_check.h"

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/gpu_probe.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::TempDir;

TEST(HealthCheckTest, GpusMissingOrWithEccErrors) {
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  EXPECT_THAT(CheckGpus(probe, 2), ::testing::IsEmpty());
  EXPECT_THAT(CheckGpus(probe, 3),
              ::testing::ElementsAre("GPUs missing: NVML sees 2 of 3"));
  setenv("LOOM_FAKE_NVML_ECC", "4", 1);
  std::vector<std::string> problems = CheckGpus(probe, 2);
  unsetenv("LOOM_FAKE_NVML_ECC");
  EXPECT_THAT(problems,
              ::testing::ElementsAre(
                  "GPU 1 (GPU-00000000-0000-0000-0000-000000000001): 4 "
                  "uncorrected ECC errors"));
  NvmlGpuProbe missing("/nonexistent/libnvidia-ml.so.1");
  problems = CheckGpus(missing, 8);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], ::testing::StartsWith("GPU check failed: NVML"));
}

TEST(HealthCheckTest, DataDir) {
  TempDir dir;
  EXPECT_THAT(CheckDataDir(dir.path(), 0), ::testing::IsEmpty());
  std::vector<std::string> full =
      CheckDataDir(dir.path(), int64_t{1} << 62);  // more than any disk
  ASSERT_EQ(full.size(), 1u);
  EXPECT_THAT(full[0], ::testing::StartsWith("data disk full: "));
  EXPECT_THAT(full[0], ::testing::HasSubstr(dir.path()));
  std::vector<std::string> gone = CheckDataDir(dir.path() + "/missing", 0);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_THAT(gone[0], ::testing::HasSubstr("is not a directory"));
  EXPECT_FALSE(fs::exists(dir.path() + "/.health-probe"));
}

TEST(HealthCheckTest, Command) {
  EXPECT_TRUE(RunHealthCommand("true", absl::Seconds(5)).ok());
  absl::Status st = RunHealthCommand(
      "echo; echo '  fan 3 failed  '; echo more >&2; exit 3", absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "health check command failed (exit code 3): fan 3 failed");
  const absl::Time start = absl::Now();
  st = RunHealthCommand("echo slow; sleep 30", absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(st.message(), "health check command timed out after 300ms: slow");
  st = RunHealthCommand("kill -9 $$", absl::Seconds(5));
  EXPECT_EQ(st.message(), "health check command killed by signal 9");
}

}  // namespace
}  // namespace loom
