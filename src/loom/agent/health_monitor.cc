#include "loom/agent/health_monitor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/health_check.h"
#include "loom/agent/json_values.h"

namespace loom {

namespace {

// With the checks off (a zero interval), `each_round` still runs this often.
constexpr absl::Duration kUpkeepInterval = absl::Seconds(10);

}  // namespace

void HealthMonitor::Start() {
  const bool checks = options_.interval > absl::ZeroDuration();
  if ((!checks && !options_.each_round) || thread_.joinable()) return;
  thread_ = std::thread([this] { Loop(); });
}

void HealthMonitor::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> HealthMonitor::CheckHost() const {
  std::vector<std::string> problems =
      CheckDataDir(options_.data_dir, options_.min_free_disk_bytes);
  if (!options_.command.empty()) {
    absl::Status st =
        RunHealthCommand(options_.command, options_.command_timeout);
    if (!st.ok()) problems.push_back(Str(st.message()));
  }
  if (options_.probe != nullptr) {
    for (std::string& p : CheckGpus(*options_.probe, options_.expected_gpus)) {
      problems.push_back(std::move(p));
    }
  }
  if (options_.xid_watcher != nullptr) {
    for (const auto& [gpu, xid] : options_.xid_watcher->LastXids()) {
      if (IsHardwareXid(xid)) {
        problems.push_back(
            absl::StrCat("GPU ", gpu, ": Xid ", xid, " (a hardware error)"));
      }
    }
  }
  return problems;
}

void HealthMonitor::Loop() {
  const bool checks = options_.interval > absl::ZeroDuration();
  std::vector<std::string> last;
  while (!stop_.HasBeenNotified()) {
    if (options_.each_round) options_.each_round();
    if (!checks) {
      stop_.WaitForNotificationWithTimeout(kUpkeepInterval);
      continue;
    }
    std::vector<std::string> problems = CheckHost();
    if (problems != last) {
      log_(problems.empty() ? "info" : "warn", "",
           problems.empty() ? std::string("health checks pass")
                            : absl::StrCat("health checks fail: ",
                                           absl::StrJoin(problems, "; ")));
      {
        absl::MutexLock lock(&mu_);
        host_problems_ = problems;
      }
      if (options_.on_change) options_.on_change();
      last = std::move(problems);
    }
    stop_.WaitForNotificationWithTimeout(options_.interval);
  }
}

nlohmann::json HealthMonitor::HealthJson(const AgentNode& node) const {
  nlohmann::json problems = nlohmann::json::array();
  {
    absl::MutexLock lock(&mu_);
    for (const std::string& p : host_problems_) problems.push_back(p);
  }
  const uint32_t failed = node.failed_gpus.load();
  for (const GpuDevice& gpu : node.gpus) {
    if (gpu.index < 32 && (failed & (1u << gpu.index)) != 0) {
      problems.push_back(absl::StrCat("GPU ", gpu.index, " (", gpu.uuid,
                                      ") failed (injected fault)"));
    }
  }
  return {{"ok", problems.empty()}, {"problems", std::move(problems)}};
}

}  // namespace loom
