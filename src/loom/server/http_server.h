#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "loom/common/metrics_text.h"
#include "loom/server/controller.h"

namespace httplib {
class Server;
}

namespace loom {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 7000;  // 0: pick a free one
  // How often the scheduler runs when nothing wakes it earlier.
  absl::Duration tick = absl::Milliseconds(100);
  // Least time between two passes: events arriving faster (a stream of
  // submissions) are handled together by the next pass, which writes all
  // its starts in one transaction.
  absl::Duration min_pass_interval = absl::Milliseconds(10);
  int dispatch_threads = 4;
};

// `loom server`'s HTTP front (REST API of docs/api.md) plus the scheduling
// thread that drives the controller and the dispatcher threads that carry
// its actions to agents. Why cpp-httplib: it is in Debian, small, has a
// thread pool and keep-alive, and holds the agent heartbeat load on a
// 2-core machine (see bench/); the controller, not the HTTP layer, is where
// the work is.
class HttpServer {
 public:
  HttpServer(Controller* controller, HttpServerOptions options);
  ~HttpServer();

  // Binds and starts serving in background threads. Returns the bound port.
  absl::StatusOr<int> Start();
  // Stops serving and joins every thread.
  void Stop();
  // Wakes the scheduling thread (a submit, an exit, a node change).
  void Wake();

 private:
  void Routes();
  // GET /metrics: the controller's metrics, then this server's.
  std::string Metrics();
  void SchedulerLoop();
  void DispatchLoop();

  Controller* const controller_;
  const HttpServerOptions options_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_;
  std::thread scheduler_thread_;
  std::vector<std::thread> dispatchers_;
  std::atomic<bool> stopping_{false};

  std::mutex mu_;
  std::condition_variable wake_;
  bool woken_ = false;
  std::condition_variable work_;
  std::deque<AgentAction> queue_;

  absl::Mutex metrics_mu_;
  Histogram pass_seconds_ ABSL_GUARDED_BY(metrics_mu_);
  // The dashboard's utilisation chart: one sample every
  // `kUtilizationEvery`, the last `kUtilizationSamples`.
  static constexpr absl::Duration kUtilizationEvery = absl::Seconds(5);
  static constexpr size_t kUtilizationSamples = 720;  // an hour
  struct UtilizationSample {
    absl::Time t;
    Controller::Utilization u;
  };
  std::deque<UtilizationSample> utilization_ ABSL_GUARDED_BY(metrics_mu_);
  // (route, method, status) -> requests.
  std::map<std::tuple<std::string, std::string, int>, int64_t> requests_
      ABSL_GUARDED_BY(metrics_mu_);
};

// The route template of a request path, for metrics: "/v1/jobs/{id}/logs".
// Paths of no route give "other".
std::string RouteOf(std::string_view path);

}  // namespace loom
