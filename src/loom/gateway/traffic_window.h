#pragma once

// Response times per backend from the access log (access_log.h), for the
// gateway's reports (docs/services.md, "Gateway"): the 95th percentile over
// the last `window`, and a cumulative histogram since the gateway started,
// in the buckets of `kLatencyBucketsMs` (Prometheus' `le`, in
// milliseconds). Pure: the caller passes the time. Thread-compatible.

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "loom/gateway/access_log.h"

namespace loom::gateway {

inline constexpr std::array<int64_t, 12> kLatencyBucketsMs = {
    1, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000};

struct LatencyHistogram {
  // counts[i]: requests that took at most kLatencyBucketsMs[i] ms
  // (cumulative, as Prometheus' buckets); `count` is the +Inf bucket.
  std::array<int64_t, kLatencyBucketsMs.size()> counts{};
  int64_t count = 0;
  int64_t sum_ms = 0;
};

class TrafficWindow {
 public:
  // At most `max_samples` per backend are kept for the percentile (the
  // oldest go first): bounded memory at any request rate.
  explicit TrafficWindow(absl::Duration window = absl::Seconds(10),
                         size_t max_samples = 100000);

  // One request that ended at `now`. Lines without a server (refused,
  // aborted before one was chosen) count in the histogram too.
  void Add(const AccessLogEntry& entry, absl::Time now);

  // The 95th percentile of the total times of `backend`'s requests that
  // ended within the window before `now`; nullopt with none.
  std::optional<double> P95Ms(const std::string& backend, absl::Time now);

  // Since the start; a zero histogram for a backend never seen.
  LatencyHistogram Histogram(const std::string& backend) const;

 private:
  struct Sample {
    absl::Time at;
    int64_t ms;
  };
  struct Backend {
    std::deque<Sample> recent;
    LatencyHistogram histogram;
  };
  void Expire(Backend& b, absl::Time now);

  const absl::Duration window_;
  const size_t max_samples_;
  std::map<std::string, Backend> backends_;
};

}  // namespace loom::gateway
