#pragma once

// `loom gateway` (docs/services.md, "Gateway"): the loop that keeps one
// HAProxy equal to what the server says the services are. Every pass:
//   1. reads the services and their replicas from the control plane
//      (GET /v1/gateway/config);
//   2. renders haproxy.cfg; starts HAProxy, or reloads it when the set of
//      services or their frontends changed (never for a change of servers);
//   3. brings each backend's servers to the replicas through the runtime API
//      (backend_sync.h: adds, drains, deletes; no reload);
//   4. reads HAProxy's statistics and the access log's response times and
//      reports them (POST /v1/gateway/report): requests in flight, rate,
//      p95, totals, and each server's state and sessions, which the server
//      uses to finish drains and to autoscale.
// When the control plane cannot be reached, HAProxy keeps serving what it
// has. Not thread-safe: one thread runs the passes.

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/gateway/access_log_reader.h"
#include "loom/gateway/haproxy_config.h"
#include "loom/gateway/haproxy_process.h"
#include "loom/gateway/run_dir.h"
#include "nlohmann/json.hpp"

namespace loom::gateway {

// Where the services come from and the reports go: the loom server's API.
class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // The body of GET /v1/gateway/config.
  virtual absl::StatusOr<nlohmann::json> FetchConfig() = 0;
  // POST /v1/gateway/report.
  virtual absl::Status SendReport(const nlohmann::json& report) = 0;
};

// One service as the control plane describes it.
struct TargetServer {
  std::string name;     // "j<job id>"
  std::string address;  // "ip:port"
  bool serving = true;  // false: draining
};
struct ServiceTarget {
  std::string name;
  int port = 0;
  std::vector<TargetServer> servers;
};

// Parses {"services": [{"name", "port", "servers": [{"name", "address",
// "state": "serving"|"draining"}]}]}. InvalidArgument naming the field
// otherwise; never throws.
absl::StatusOr<std::vector<ServiceTarget>> ParseGatewayTarget(
    const nlohmann::json& body);

struct GatewayOptions {
  std::string name = "gateway";  // in the reports
  // Where the services' frontends listen (their ports are the services').
  std::string bind_host = "127.0.0.1";
  // The directory for haproxy.cfg, haproxy.log and the sockets, opened and
  // checked (run_dir.h); short (unix socket paths). Required.
  std::shared_ptr<const RunDir> run_dir;
  std::string haproxy = "/usr/sbin/haproxy";
  ServerOptions server_options;
  // HAProxy's `maxconn` (0: derived from the descriptor limit).
  int maxconn = 0;
  // HAProxy's worker threads (0: its default, one per CPU).
  int nbthread = 0;
};

using GatewayLogFn =
    std::function<void(const std::string& level, const std::string& message)>;

class GatewayLoop {
 public:
  GatewayLoop(GatewayOptions options, ControlPlane* control, GatewayLogFn log);
  ~GatewayLoop();
  GatewayLoop(const GatewayLoop&) = delete;
  GatewayLoop& operator=(const GatewayLoop&) = delete;

  // Binds the access log socket (log.sock in the run directory; a stale
  // one is removed). HAProxy itself starts in the first pass that has the
  // services. FailedPrecondition without a run directory.
  absl::Status Start();
  // One pass (see the file comment). An error says what failed; the next
  // pass tries again.
  absl::Status Step(absl::Time now);
  // Soft-stops HAProxy (requests in flight finish) and the log reader.
  void Stop();

  const HaproxyProcess& haproxy() const { return *haproxy_; }

 private:
  HaproxyConfig ConfigFor(const std::vector<ServiceTarget>& targets) const;
  // The report of the services in `targets`, from HAProxy's statistics.
  absl::StatusOr<nlohmann::json> Report(
      const std::vector<ServiceTarget>& targets, absl::Time now);
  // Logs `message` at `level` when it differs from the last one under
  // `key`: a failure that repeats every pass is said once.
  void LogChange(const std::string& key, const std::string& level,
                 const std::string& message);

  const GatewayOptions options_;
  ControlPlane* const control_;
  const GatewayLogFn log_;
  std::unique_ptr<HaproxyProcess> haproxy_;
  AccessLogReader access_log_;
  std::map<std::string, std::string> last_said_;
  // Why the services HAProxy does not run yet are not served (a failed
  // start or reload); "" when it runs them all. Reported with each.
  std::string not_served_;
};

}  // namespace loom::gateway
