#pragma once

// The receiving end of HAProxy's access log (haproxy_config.h,
// `log_socket`): a unix datagram socket bound by the gateway, read on a
// thread of its own, each line parsed (access_log.h) and added to a
// `TrafficWindow`. HAProxy sends without blocking and drops what the
// socket cannot queue, so the socket asks for a large receive buffer and
// the thread does nothing but read; lines that are not access lines
// (HAProxy's own events: "Server ... is UP") are skipped.

#include <atomic>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/gateway/traffic_window.h"

namespace loom::gateway {

class AccessLogReader {
 public:
  AccessLogReader() = default;
  ~AccessLogReader() { Stop(); }
  AccessLogReader(const AccessLogReader&) = delete;
  AccessLogReader& operator=(const AccessLogReader&) = delete;

  // Binds `path` (a stale socket file there is replaced) and starts
  // reading. FailedPrecondition when already started; the bind's error
  // otherwise.
  absl::Status Start(const std::string& path);
  // Stops the thread and removes the socket file. Idempotent.
  void Stop();

  std::optional<double> P95Ms(const std::string& backend, absl::Time now);
  LatencyHistogram Histogram(const std::string& backend);
  // Datagrams read that were access lines, and those that were not.
  int64_t lines() const { return lines_.load(); }
  int64_t skipped() const { return skipped_.load(); }

 private:
  void Read();

  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread reader_;
  std::atomic<int64_t> lines_{0};
  std::atomic<int64_t> skipped_{0};
  absl::Mutex mu_;
  TrafficWindow window_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom::gateway
