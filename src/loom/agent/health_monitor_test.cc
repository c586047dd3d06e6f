// `HealthMonitor` on its own: the host's checks, a node's injected GPU
// faults in its health, and the rounds that call back when problems change.

#include "loom/agent/health_monitor.h"

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Finds `count` GPUs, or fails.
class CountingProbe : public GpuProbe {
 public:
  explicit CountingProbe(int count) : count_(count) {}
  absl::StatusOr<std::vector<GpuDevice>> Probe() override {
    if (count_ < 0) return absl::UnavailableError("NVML is gone");
    std::vector<GpuDevice> gpus(static_cast<size_t>(count_));
    for (int i = 0; i < count_; ++i) gpus[i].index = i;
    return gpus;
  }
  std::atomic<int> count_;
};

TEST(HealthMonitorTest, HealthyHostAndNodeSayOk) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> nodes = FakeNodes(dir.path(), {"n0"}, log.log());
  ASSERT_NE(nodes, nullptr);
  HealthMonitorOptions options;
  options.data_dir = dir.path();
  options.min_free_disk_bytes = 1;
  HealthMonitor monitor(std::move(options), log.log());
  EXPECT_TRUE(monitor.CheckHost().empty());
  const nlohmann::json health = monitor.HealthJson(*nodes->nodes()[0]);
  EXPECT_EQ(health["ok"], true);
  EXPECT_TRUE(health["problems"].empty());
}

TEST(HealthMonitorTest, InjectedGpuFaultsAreTheNodesOwn) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> nodes =
      FakeNodes(dir.path(), {"n0", "n1"}, log.log());
  ASSERT_NE(nodes, nullptr);
  HealthMonitorOptions options;
  options.data_dir = dir.path();
  HealthMonitor monitor(std::move(options), log.log());
  nodes->nodes()[0]->failed_gpus.store((1u << 3) | (1u << 5));
  const nlohmann::json sick = monitor.HealthJson(*nodes->nodes()[0]);
  EXPECT_EQ(sick["ok"], false);
  ASSERT_EQ(sick["problems"].size(), 2u);
  EXPECT_THAT(sick["problems"][0].get<std::string>(), HasSubstr("GPU 3 ("));
  EXPECT_THAT(sick["problems"][1].get<std::string>(),
              HasSubstr("failed (injected fault)"));
  EXPECT_EQ(monitor.HealthJson(*nodes->nodes()[1])["ok"], true);
}

TEST(HealthMonitorTest, HostChecksNameWhatFailed) {
  TempDir dir;
  CapturedLog log;
  CountingProbe probe(7);
  HealthMonitorOptions options;
  options.data_dir = dir.path();
  options.min_free_disk_bytes = 1;
  options.command = "echo fan 3 stopped; exit 1";
  options.probe = &probe;
  options.expected_gpus = 8;
  HealthMonitor monitor(std::move(options), log.log());
  const std::vector<std::string> problems = monitor.CheckHost();
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_THAT(problems[0], HasSubstr("fan 3 stopped"));
  EXPECT_THAT(problems[1], HasSubstr("GPUs missing: NVML sees 7 of 8"));
}

TEST(HealthMonitorTest, RoundsReportChangesOnly) {
  TempDir dir;
  CapturedLog log;
  std::unique_ptr<NodeTable> nodes = FakeNodes(dir.path(), {"n0"}, log.log());
  ASSERT_NE(nodes, nullptr);
  CountingProbe probe(8);
  std::atomic<int> changes{0};
  HealthMonitorOptions options;
  options.data_dir = dir.path();
  options.min_free_disk_bytes = 1;
  options.probe = &probe;
  options.expected_gpus = 8;
  options.interval = absl::Milliseconds(20);
  options.on_change = [&] { changes.fetch_add(1); };
  HealthMonitor monitor(std::move(options), log.log());
  monitor.Start();
  // Healthy from the start: no change to report.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(changes.load(), 0);
  probe.count_.store(6);
  ASSERT_TRUE(WaitFor([&] { return changes.load() == 1; }));
  ASSERT_TRUE(
      WaitFor([&] { return !monitor.HealthJson(*nodes->nodes()[0])["ok"]; }));
  // The same problem round after round is one change.
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(changes.load(), 1);
  EXPECT_EQ(log.LinesWith("health checks fail"), 1);
  probe.count_.store(8);
  ASSERT_TRUE(WaitFor([&] { return changes.load() == 2; }));
  EXPECT_EQ(monitor.HealthJson(*nodes->nodes()[0])["ok"], true);
  EXPECT_EQ(log.LinesWith("health checks pass"), 1);
  monitor.Stop();
  monitor.Stop();  // idempotent
}

TEST(HealthMonitorTest, NoRoundsWithoutAnInterval) {
  TempDir dir;
  CapturedLog log;
  CountingProbe probe(0);
  std::atomic<int> changes{0};
  HealthMonitorOptions options;
  options.data_dir = dir.path();
  options.probe = &probe;
  options.expected_gpus = 8;
  options.min_free_disk_bytes = 1;
  options.interval = absl::ZeroDuration();
  options.on_change = [&] { changes.fetch_add(1); };
  HealthMonitor monitor(std::move(options), log.log());
  monitor.Start();
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(changes.load(), 0);
  EXPECT_THAT(monitor.CheckHost(),
              ElementsAre(HasSubstr("GPUs missing: NVML sees 0 of 8")));
}

}  // namespace
}  // namespace loom
