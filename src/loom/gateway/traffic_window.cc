#include "loom/gateway/traffic_window.h"

#include <algorithm>
#include <vector>

namespace loom::gateway {

TrafficWindow::TrafficWindow(absl::Duration window, size_t max_samples)
    : window_(window), max_samples_(std::max<size_t>(max_samples, 1)) {}

void TrafficWindow::Add(const AccessLogEntry& entry, absl::Time now) {
  if (entry.backend.empty()) return;
  // `ta` (active time: accept to last byte, without the idle time of a
  // keep-alive connection before the request) is what a client waits for.
  const int64_t ms = std::max<int64_t>(
      entry.active_ms >= 0 ? entry.active_ms : entry.total_ms, 0);
  Backend& b = backends_[entry.backend];
  LatencyHistogram& h = b.histogram;
  for (size_t i = 0; i < kLatencyBucketsMs.size(); ++i) {
    if (ms <= kLatencyBucketsMs[i]) ++h.counts[i];
  }
  ++h.count;
  h.sum_ms += ms;
  b.recent.push_back({now, ms});
  while (b.recent.size() > max_samples_) b.recent.pop_front();
}

void TrafficWindow::Expire(Backend& b, absl::Time now) {
  while (!b.recent.empty() && b.recent.front().at <= now - window_) {
    b.recent.pop_front();
  }
}

std::optional<double> TrafficWindow::P95Ms(const std::string& backend,
                                           absl::Time now) {
  auto it = backends_.find(backend);
  if (it == backends_.end()) return std::nullopt;
  Expire(it->second, now);
  const std::deque<Sample>& recent = it->second.recent;
  if (recent.empty()) return std::nullopt;
  std::vector<int64_t> ms;
  ms.reserve(recent.size());
  for (const Sample& s : recent) ms.push_back(s.ms);
  // Nearest rank: the smallest value with at least 95% at or below it.
  const size_t rank = (ms.size() * 95 + 99) / 100;
  std::nth_element(ms.begin(), ms.begin() + (rank - 1), ms.end());
  return static_cast<double>(ms[rank - 1]);
}

LatencyHistogram TrafficWindow::Histogram(const std::string& backend) const {
  auto it = backends_.find(backend);
  return it == backends_.end() ? LatencyHistogram{} : it->second.histogram;
}

}  // namespace loom::gateway
