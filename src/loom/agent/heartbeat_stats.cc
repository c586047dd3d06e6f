#include "loom/agent/heartbeat_stats.h"

#include <algorithm>

namespace loom {

void HeartbeatStats::Answered(absl::Duration round_trip) {
  absl::MutexLock lock(&mu_);
  if (ms_.size() < kMaxSamples) {
    ms_.push_back(static_cast<float>(absl::ToDoubleMilliseconds(round_trip)));
  }
}

void HeartbeatStats::Failed() {
  absl::MutexLock lock(&mu_);
  ++failed_;
}

nlohmann::json HeartbeatStats::Json(bool reset) {
  std::vector<float> ms;
  int64_t failed = 0;
  absl::Duration window;
  {
    absl::MutexLock lock(&mu_);
    ms = ms_;
    failed = failed_;
    window = absl::Now() - since_;
    if (reset) {
      ms_.clear();
      failed_ = 0;
      since_ = absl::Now();
    }
  }
  std::sort(ms.begin(), ms.end());
  auto at = [&](double q) -> double {
    if (ms.empty()) return 0;
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  };
  return {{"window_s", absl::ToDoubleSeconds(window)},
          {"heartbeats",
           {{"answered", ms.size()},
            {"failed", failed},
            {"latency_ms",
             {{"p50", at(0.50)},
              {"p90", at(0.90)},
              {"p99", at(0.99)},
              {"max", ms.empty() ? 0.0 : ms.back()}}}}}};
}

}  // namespace loom
