// The agent's metrics (agent_metrics.h): DCGM names and labels, emulated
// telemetry, and the usage of a task's process group.

#include "loom/agent/agent_metrics.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/gpu_probe.h"

namespace loom {
namespace {

using agent_testing::kGi;
using agent_testing::WaitFor;

TEST(AgentMetricsTest, DcgmNamesAndLabels) {
  GpuDevice busy;
  busy.index = 3;
  busy.uuid = "GPU-abc";
  busy.name = "NVIDIA H200";
  busy.memory_bytes = 141 * kGi;
  GpuDevice idle = busy;
  idle.index = 4;
  idle.uuid = "GPU-def";
  const absl::Time now = absl::FromUnixSeconds(1000);
  EmulateTelemetry(busy, /*busy=*/true, /*failed=*/false, now);
  EmulateTelemetry(idle, /*busy=*/false, /*failed=*/false, now);
  EXPECT_GE(busy.utilization_percent, 85);
  EXPECT_LE(busy.utilization_percent, 100);
  EXPECT_GT(busy.memory_used_bytes, busy.memory_bytes / 2);
  EXPECT_LT(busy.power_watts, 700);  // an H200's limit
  EXPECT_EQ(idle.utilization_percent, 0);
  EXPECT_LT(idle.temperature_c, busy.temperature_c);
  GpuDevice again = busy;
  EmulateTelemetry(again, true, false, now);
  EXPECT_EQ(again.utilization_percent, busy.utilization_percent);

  GpuMetricsRow a{"host1", "h200-0", busy, true, 0, 42};
  GpuMetricsRow b{"host1", "h200-0", idle, true, 0, 0};
  b.gpu.temperature_c = -1;  // not known: not exported
  std::string text;
  MetricsWriter out(&text);
  WriteAgentMetrics(out, {a, b}, {{"h200-0", "42.0.1", 42, 0, 1.5, 4096}});
  EXPECT_TRUE(out.status().ok()) << out.status();
  EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat(
                        "DCGM_FI_DEV_GPU_UTIL{gpu=\"3\",UUID=\"GPU-abc\","
                        "device=\"nvidia3\",modelName=\"NVIDIA H200\","
                        "Hostname=\"host1\",node=\"h200-0\",job=\"42\","
                        "emulated=\"true\"} ",
                        busy.utilization_percent, "\n")));
  EXPECT_THAT(text, ::testing::HasSubstr("job=\"\",emulated=\"true\"} 0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("# TYPE DCGM_FI_DEV_FB_FREE gauge\n"));
  size_t temps = 0;
  for (size_t pos = text.find("DCGM_FI_DEV_GPU_TEMP{");
       pos != std::string::npos;
       pos = text.find("DCGM_FI_DEV_GPU_TEMP{", pos + 1)) {
    ++temps;
  }
  EXPECT_EQ(temps, 1u);  // the idle GPU's unknown temperature is left out
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "loom_task_cpu_seconds_total{node=\"h200-0\",job="
                        "\"42\",task=\"0\",task_id=\"42.0.1\"} 1.5\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "loom_task_memory_bytes{node=\"h200-0\",job=\"42\","
                        "task=\"0\",task_id=\"42.0.1\"} 4096\n"));
}

TEST(AgentMetricsTest, ProcessGroupUsageAndVisibleGpus) {
  // A child in its own group with CUDA_VISIBLE_DEVICES, burning some CPU.
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    char env[] = "CUDA_VISIBLE_DEVICES=2,5";
    char* envp[] = {env, nullptr};
    char sh[] = "/bin/sh";
    char c[] = "-c";
    char script[] =
        "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; "
        "sleep 30";
    char* argv[] = {sh, c, script, nullptr};
    execve("/bin/sh", argv, envp);
    _exit(127);
  }
  ASSERT_GT(child, 0);
  setpgid(child, child);
  ASSERT_TRUE(WaitFor([&] {
    std::map<pid_t, GroupUsage> usage = ReadProcessGroupUsage();
    auto it = usage.find(child);
    return it != usage.end() && it->second.cpu_seconds > 0.05 &&
           it->second.rss_bytes > 0;
  }));
  EXPECT_EQ(VisibleGpusOf(child), (std::vector<int>{2, 5}));
  EXPECT_TRUE(VisibleGpusOf(getpid()).empty() ||
              getenv("CUDA_VISIBLE_DEVICES") != nullptr);
  EXPECT_TRUE(VisibleGpusOf(999999999).empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

}  // namespace
}  // namespace loom
