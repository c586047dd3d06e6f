#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
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
#include "loom/http/event_loop_server.h"
#include "loom/http/http_message.h"
#include "loom/server/auth.h"
#include "loom/server/controller.h"
#include "loom/server/image_resolver.h"
#include "loom/server/route_table.h"
#include "loom/server/standby_reader.h"

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
  // A standby (no controller yet, see `Lead`): the current leader's API URL,
  // "" when none is known. Requests a standby cannot answer are redirected
  // there (307) or refused with 503 while there is no leader.
  std::function<std::string()> leader_url;
  // A standby answers job reads (GET /v1/jobs, /v1/jobs/{id}[/events]) from
  // the store through this, when set (it must outlive the server).
  const StandbyReader* standby_reads = nullptr;
  // Authentication and authorization of every request (docs/security.md).
  // Null: none at all (unit tests of other parts only; `loom server` always
  // sets it).
  TokenRegistry* auth = nullptr;
  // Resolves the image of a job in a container to its digest at submit
  // (docs/images.md); it must outlive the server. Null: such jobs are
  // refused (unit tests of other parts only; `loom server` always sets it).
  ImageResolver* image_resolver = nullptr;
  // TLS (docs/security.md): PEM files of the server's certificate (chain)
  // and private key; both empty: plain HTTP.
  std::string tls_cert;
  std::string tls_key;
  // Deadlines, lanes and per-caller limits of the HTTP front
  // (docs/server.md); its host, port and TLS files are the ones above.
  http::EventLoopServerOptions http;
};

// `loom server`'s HTTP front (REST API of docs/api.md) plus the scheduling
// thread that drives the controller and the dispatcher threads that carry
// its actions to agents. Requests are read by `http::EventLoopServer`
// (deadlines, per-caller limits, the agent protocol in a lane of its own:
// docs/server.md) and routed here by `RouteTable()`, the one matcher for
// both access rules and handlers.
//
// With a null controller it starts as a standby of a replicated controller
// (docs/ha.md): it answers /healthz, /metrics and /v1/leader, and sends
// every other request to the leader; `Lead` makes it the leader.
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
  // A standby becomes the leader: from now on it serves every route from
  // `controller` (which must outlive the server) and runs the scheduling and
  // dispatch threads. Call once, after `Start`.
  void Lead(Controller* controller);
  bool leading() const { return leading_; }

 private:
  using Request = http::HttpRequest;
  using Response = http::HttpResponse;
  using Handler = std::function<void(const Request&, Response&)>;
  // Registers every route's handler (by `Start`): the handlers of each
  // resource are in a file of their own.
  void Routes();
  void JobRoutes();          // job_routes.cc: /v1/jobs...
  void NodeRoutes();         // node_routes.cc: /v1/nodes..., /v1/agents/...
  void ImageRoutes();        // image_routes.cc: /v1/images...
  void DatasetRoutes();      // image_routes.cc: /v1/datasets...
  void TokenRoutes();        // token_routes.cc: /v1/tokens..., /v1/whoami
  void SpecRoutes();         // spec_routes.cc: /v1/cluster/... (plan, apply)
  void MaintenanceRoutes();  // maintenance_routes.cc: /v1/maintenance...
  void ServiceRoutes();  // service_routes.cc: /v1/services..., /v1/gateway/...
  void
  AccountingRoutes();    // accounting_routes.cc: /v1/accounting/..., /v1/usage
  void ClusterRoutes();  // cluster_routes.cc: the rest
  // Registers a route of `RouteTable()` (aborts for one that is not there:
  // a programming error that every test run would show).
  void Handle(const std::string& method, const std::string& route,
              Handler handler);
  // The caller of a request that passed the route's access check (an admin
  // when there is no authentication).
  Principal PrincipalOf(const Request& req) const;
  // Checks the request against its route's access rule; false after
  // answering 401 or 403.
  bool Authorize(const Request& req, Response& res);
  // OK when `p` may act on job `id` (its owner or an admin; a job's own
  // token for `allow_job_token`); PermissionDenied or NotFound otherwise.
  absl::Status MayTouchJob(const Principal& p, JobId id, bool allow_job_token);
  // The job of a `{id}` route that the caller of `req` may act on: the
  // errors of `JobIdOf`, then those of `MayTouchJob`.
  absl::StatusOr<JobId> JobToTouch(const Request& req, bool allow_job_token);
  // The job a `{id}` route names: `JobIdOf`, or an array element ("12_7",
  // `Controller::ResolveJobRef`).
  absl::StatusOr<JobId> JobOfRoute(const Request& req);
  // OK when the server authenticates requests; FailedPrecondition
  // "authentication is off" otherwise (routes about tokens and credentials).
  absl::Status NeedAuthentication() const;
  // Hides other users' command, environment and working directory from
  // callers that are not admins.
  static void Redact(const Principal& p, nlohmann::json& job);
  // The `Authorization` header value of a request to node `node`'s agent
  // ("" without authentication).
  std::string AgentAuthorization(const std::string& node) const;
  void StartWorkers();
  // A standby's answer to a request it cannot serve (see the class comment);
  // false for the routes a standby serves itself.
  bool Redirect(const Request& req, Response& res);
  // A standby's answer to a job read from `options_.standby_reads`; false
  // for anything else.
  bool ServeStandbyRead(const Request& req, Response& res);
  // GET /metrics: the controller's metrics, then this server's.
  std::string Metrics();
  void SchedulerLoop();
  void DispatchLoop();

  // Set once (by the constructor or `Lead`) before `leading_` turns true;
  // read only by handlers that run while leading.
  Controller* controller_;
  std::atomic<bool> leading_{false};
  const HttpServerOptions options_;
  // Every request: route, access check, standby redirect, handler, count.
  void Serve(Request& req, Response& res);
  // The lane and caller of a request, on the event loop (no I/O).
  http::Dispatch Classify(const Request& req) const;

  std::unique_ptr<http::EventLoopServer> http_;
  // Handlers by route (an index into `RouteTable()`).
  std::map<size_t, Handler> handlers_;
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

}  // namespace loom
