#pragma once

// What a gateway (`loom gateway`, docs/services.md "Gateway") reports
// about the services it serves: `POST /v1/gateway/report`. Parsed and
// checked here; the controller keeps the latest per service.

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// One backend server (a replica, "j<job id>") as the balancer has it.
struct GatewayServer {
  bool serving = false;   // takes new requests
  bool draining = false;  // takes none, finishes its sessions
  int sessions = 0;       // requests in flight on it
};

// Response times since the gateway started: cumulative counts at each
// bound (seconds), as a Prometheus histogram's buckets.
struct LatencyBuckets {
  std::vector<double> bounds_seconds;
  std::vector<uint64_t> counts;
  uint64_t count = 0;
  double sum_seconds = 0;
};

// One service's traffic at the balancer, as of `at`.
struct GatewayStats {
  absl::Time at;
  std::string gateway;  // who reported it
  double in_flight = 0;
  double rps = 0;
  double p95_ms = 0;
  double requests_total = 0;
  double errors_total = 0;  // 5xx answers and failed connections
  std::map<std::string, GatewayServer> servers;
  LatencyBuckets latency;
  // Set: the gateway does not serve the service, and why (its port is
  // taken, HAProxy refused the configuration); no measurements then.
  std::string error;
};

// The most services and servers per service one report may carry.
inline constexpr int kMaxReportServices = 1000;
inline constexpr int kMaxReportServers = 2000;
inline constexpr size_t kMaxLatencyBuckets = 32;

// Parses a report:
//   {"gateway": "gw-0", "services": [{"name": "embed", "in_flight": 3,
//    "rps": 120.5, "p95_ms": 41.0, "requests_total": 10234,
//    "errors_total": 0, "servers": [{"name": "j12", "state": "serving",
//    "sessions": 1}], "latency": {"buckets_ms": [[5, 80], [10, 120]],
//    "count": 130, "sum_ms": 900}}]}
// A service the gateway cannot serve has `"error": "why"` instead.
// Server states: "serving", "draining", or anything else (out of service).
// Numbers must be finite and not negative. InvalidArgument naming the
// field ("services[0].servers[1].sessions: ...") otherwise; never throws.
absl::StatusOr<std::map<std::string, GatewayStats>> ParseGatewayReport(
    const nlohmann::json& body, absl::Time now);

}  // namespace loom
