#pragma once

// The node session: each node's standing with the loom server. It joins
// (a join token, then the node's own credential), registers, heartbeats
// with the node's task statuses, health and latest maintenance command,
// carries out the server's
// answers (acknowledged and stopped tasks), keeps the lease file, and fences
// a node whose heartbeats go unanswered too long (docs/fault-tolerance.md):
// its tasks are killed before the server runs their jobs elsewhere.
//
// Heartbeats run on a few threads (`heartbeat_threads`), each owning a share
// of the nodes and its own keep-alive connections to every server.

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/health_monitor.h"
#include "loom/agent/heartbeat_stats.h"
#include "loom/agent/maintenance_runner.h"
#include "loom/agent/node_table.h"
#include "loom/agent/task_runner.h"
#include "nlohmann/json.hpp"

namespace httplib {
class Client;
}

namespace loom {

struct NodeSessionOptions {
  // Normalised server URLs, at least one; requests go to the one that
  // answered last.
  std::vector<std::string> server_urls;
  // For nodes without a credential (docs/security.md).
  std::string join_token;
  // PEM CA file for https servers ("" : the system's).
  std::string ca_cert;
  // Zero: what the server's registration answer says (1 s without).
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration request_timeout = absl::Seconds(10);
  // 0: min(nodes, 8).
  int heartbeat_threads = 0;
  // The lease file is kept (real tasks only).
  bool keep_lease = true;
  // "HOST:PORT" of the agent API, as registered.
  std::string address;
};

// Thread-safe. `Start` and `Stop` must not race each other.
class NodeSession {
 public:
  NodeSession(NodeSessionOptions options, const NodeTable& nodes,
              TaskRunner& runner, const MaintenanceRunner& maintenance,
              const HealthMonitor& health, ApiGuard& guard,
              HeartbeatStats& stats, const AgentLog& log);
  ~NodeSession();

  // Reads what an earlier agent left for `node`: its credential and its
  // server's key (`<root>/credential`, `<root>/agent_key`), and its lease.
  // Before `Start`.
  void Load(AgentNode& node);

  // Starts registering (the first registrations of a fleet spread over a
  // second) and heartbeating. Call `FenceSilentNodes` first, so that tasks
  // an earlier agent left too long are killed before anything re-adopts
  // them.
  void Start();
  // Stops the heartbeat threads (in-flight requests are cut). Idempotent.
  void Stop();

  // A task of `node` ended or its health changed: heartbeat soon rather
  // than after a whole interval.
  void ReportSoon(AgentNode& node);
  // Kills the tasks of nodes that went their fence limit without an
  // answered heartbeat. Called by the supervise thread.
  void FenceSilentNodes();
  // True once `node` registered, until the server asks it to register again.
  bool Registered(const AgentNode& node) const;

 private:
  // A node's session state. Guarded by `mu_` unless said otherwise.
  struct Link {
    AgentNode* node = nullptr;
    bool registered = false;
    absl::Time next_due = absl::InfinitePast();
    absl::Duration backoff;
    absl::Duration interval;
    // A task ended since the last heartbeat was built.
    bool report_pending = false;
    // Fencing: the send time of the last answered heartbeat (or
    // registration), and the server's `fence_after_ms` (zero: never).
    absl::Time last_ack_sent = absl::InfinitePast();
    absl::Duration fence_after = absl::ZeroDuration();
    bool fenced = false;
    // The node's credential (a `node` token; "" until it joined).
    std::string credential;
    // The last lease write failed (logged once, until one succeeds).
    std::atomic<bool> lease_write_failed{false};
    std::atomic<bool> registered_flag{false};
    // Used by the node's heartbeat thread only.
    std::string last_problem;
    // The generations of the node's image list and pulls the server last
    // acknowledged (image_prepull.h).
    uint64_t images_sent = ~uint64_t{0};
    uint64_t pulls_sent = ~uint64_t{0};
    // The complete dataset versions the server last heard of (registration
    // or an answered heartbeat); unset: none sent yet.
    std::optional<std::vector<std::string>> datasets_sent;
  };
  struct Worker;
  struct ServerReply;

  void WorkerLoop(Worker& worker);
  void Tick(Worker& worker, Link& link);
  void Register(Worker& worker, Link& link);
  void Heartbeat(Worker& worker, Link& link);
  void ScheduleNext(Link& link, absl::Duration delay);
  void Backoff(Link& link);
  void Problem(Link& link, const std::string& message);
  // Tries each server in turn (from the one that answered last), each
  // with `timeout` to answer (`request_timeout` when zero).
  ServerReply Post(Worker& worker, const std::string& path,
                   const nlohmann::json& body, const std::string& bearer,
                   absl::Duration timeout = absl::ZeroDuration());
  void HandleServerReply(Link& link, const nlohmann::json& reply,
                         const std::vector<std::string>& reported_ended);
  nlohmann::json RegistrationBody(Link& link,
                                  std::vector<std::string>* ended_ids);
  // Remembers the server's key for the node (from a registration answer)
  // and keeps it in `<root>/agent_key`.
  void AcceptServerKey(AgentNode& node, const std::string& key);
  void KeepLease(Link& link, absl::Time sent, absl::Duration fence_after);

  // Constant after construction.
  const NodeSessionOptions options_;
  const NodeTable& nodes_;
  TaskRunner& runner_;
  const MaintenanceRunner& maintenance_;
  const HealthMonitor& health_;
  ApiGuard& guard_;
  HeartbeatStats& stats_;
  const AgentLog& log_;
  std::vector<std::unique_ptr<Link>> links_;  // by `AgentNode::index`

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stopping_{false};
  mutable absl::Mutex mu_;
  absl::CondVar cv_;
};

}  // namespace loom
