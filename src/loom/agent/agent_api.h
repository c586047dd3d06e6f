#pragma once

// The agent API (docs/agent.md, "API"): the HTTP routes the server calls
// (launch, list, get, stop, logs), maintenance commands, fault injection, and
// the public health, telemetry and heartbeat statistics. Routes only: each
// parses its request, calls a part (task runner, fault injector, ...) and
// writes the answer.

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/fault_injector.h"
#include "loom/agent/heartbeat_stats.h"
#include "loom/agent/maintenance_runner.h"
#include "loom/agent/node_table.h"
#include "loom/agent/node_telemetry.h"
#include "loom/agent/task_runner.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace loom {

struct AgentApiOptions {
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;  // 0: a free port
  // Threads of the HTTP server; `follow` log streams take at most half.
  int http_threads = 32;
  TelemetrySources telemetry;
};

// Thread-safe. `Bind`, `Serve` and `Stop` must not race each other.
class AgentApi {
 public:
  AgentApi(AgentApiOptions options, const NodeTable& nodes, TaskRunner& runner,
           MaintenanceRunner& maintenance, FaultInjector& faults,
           const ApiGuard& guard, HeartbeatStats& stats, const AgentLog& log);
  ~AgentApi();

  // Binds the listener. `Unavailable` when the address cannot be had.
  absl::Status Bind();
  // Serves on a thread of its own.
  void Serve();
  // Ends open log streams and closes the listener. Idempotent.
  void Stop();

  int port() const { return port_; }
  // "HOST:PORT", as registered.
  const std::string& address() const { return address_; }

 private:
  void InstallRoutes();
  // Whether a request carries a key of this agent's server
  // (docs/security.md); answers 401 or 503 and returns false otherwise.
  bool Authorized(const httplib::Request& req, httplib::Response& res);

  void HandleLaunch(const httplib::Request& req, httplib::Response& res);
  void HandleList(const httplib::Request& req, httplib::Response& res);
  void HandleGet(const httplib::Request& req, httplib::Response& res);
  void HandleStop(const httplib::Request& req, httplib::Response& res);
  // log_route.cc.
  void HandleLogs(const httplib::Request& req, httplib::Response& res);
  // maintenance_route.cc.
  void HandleMaintenanceStart(const httplib::Request& req,
                              httplib::Response& res);
  void HandleMaintenanceGet(const httplib::Request& req,
                            httplib::Response& res);
  void HandleFaults(const httplib::Request& req, httplib::Response& res);
  void HandleImagePull(const httplib::Request& req, httplib::Response& res);
  void HandleImages(const httplib::Request& req, httplib::Response& res);
  // dataset_route.cc: a cached dataset version, for peers.
  void HandleDatasetManifest(const httplib::Request& req,
                             httplib::Response& res);
  void HandleDatasetFile(const httplib::Request& req, httplib::Response& res);
  void HandleDatasetPrefetch(const httplib::Request& req,
                             httplib::Response& res);
  AgentNode* DatasetNode(const httplib::Request& req, httplib::Response& res);
  void HandleStats(const httplib::Request& req, httplib::Response& res);
  void HandleMetrics(const httplib::Request& req, httplib::Response& res);

  // Constant after construction.
  const AgentApiOptions options_;
  const NodeTable& nodes_;
  TaskRunner& runner_;
  MaintenanceRunner& maintenance_;
  FaultInjector& faults_;
  const ApiGuard& guard_;
  HeartbeatStats& stats_;
  const AgentLog& log_;
  std::unique_ptr<httplib::Server> server_;

  int port_ = 0;
  std::string address_;
  std::thread listen_thread_;
  std::atomic<bool> stopping_{false};
  // Open `follow` log streams; each holds an API thread.
  std::atomic<int> follows_{0};
};

}  // namespace loom
