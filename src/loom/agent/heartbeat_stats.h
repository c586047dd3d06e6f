#pragma once

// Heartbeat round trips the agent measured (`GET /v1/stats`): how many were
// answered and failed, and the answered ones' latency percentiles. The
// benchmarks read it from the fleet emulator (bench/README.md).

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// Thread-safe.
class HeartbeatStats {
 public:
  // At most this many round trips are kept (then only failures count).
  static constexpr size_t kMaxSamples = 1 << 20;

  // A heartbeat answered with 200 after `round_trip`; or one that failed.
  void Answered(absl::Duration round_trip);
  void Failed();

  // {window_s, heartbeats: {answered, failed, latency_ms: {p50, p90, p99,
  // max}}} since the last reset (or the start); `reset` starts a new window.
  nlohmann::json Json(bool reset);

 private:
  absl::Mutex mu_;
  std::vector<float> ms_ ABSL_GUARDED_BY(mu_);
  int64_t failed_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time since_ ABSL_GUARDED_BY(mu_) = absl::Now();
};

}  // namespace loom
