#pragma once

// The haproxy.cfg that a `loom gateway` runs HAProxy with: one frontend and
// one backend per inference service, no servers of their own. Servers are
// the service's ready replicas, added and removed at run time through the
// runtime API (`haproxy_runtime.h`, `backend_sync.h`); the file changes, and
// HAProxy reloads, only when the set of services or their frontends change.
//
// One exception, forced by HAProxy 2.6: a server added through the runtime
// API is not kept across a reload (management guide, "add server": "A
// dynamic server not present in the configuration won't be restored after a
// reload operation"). So the config rendered for a (re)load carries, per
// backend, the servers that were serving at that moment (`seed_servers`);
// the new worker starts with them and the reconciler takes over from there.
// Seeds are not part of the config's shape (`ConfigShape`): a change of
// servers alone never asks for a reload.
//
// Pure: no I/O. Thread-compatible.

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::gateway {

// HAProxy's load-balancing algorithms that allow dynamic servers (the
// runtime API refuses `add server` on a backend with a static one such as
// `static-rr`: "Backend must use a dynamic load balancing to support dynamic
// servers.").
enum class Balance { kLeastConn, kRoundRobin, kRandom };

// "leastconn", "roundrobin", "random".
std::string_view BalanceName(Balance balance);
// The inverse of `BalanceName`; InvalidArgument names the text otherwise.
absl::StatusOr<Balance> ParseBalance(std::string_view text);

// How every server of one backend is checked and limited. Used both for a
// seed server's config line and for `add server` (the same keywords).
struct ServerOptions {
  // A layer-4 health check (TCP connect) every `check_interval`; a server
  // is marked down after `fall` failures and up after `rise` successes.
  // Readiness is loom's job (only ready replicas are added); this check only
  // takes a replica that died between two syncs out of the rotation fast.
  bool health_check = true;
  absl::Duration check_interval = absl::Seconds(2);
  int rise = 2;
  int fall = 2;
  // With `health_check`: a connection error on live traffic marks the server
  // down at once (`observe layer4 error-limit 1 on-error mark-down`), rather
  // than waiting `fall` check intervals. With leastconn a dead server would
  // otherwise attract requests, since it holds none.
  bool mark_down_on_connect_error = true;
  // Concurrent requests sent to one server; more wait in the backend's
  // queue (`timeout queue`). 0: no limit.
  int maxconn = 0;
};

// The server keywords for `options` ("check inter 2000 rise 2 ..."), as both
// the config's `server` line and the runtime API's `add server` take them.
// Empty when there is nothing to say.
std::string ServerKeywords(const ServerOptions& options);

// A server the rendered config starts with (see the file comment).
struct SeedServer {
  std::string name;     // ValidateServerName
  std::string address;  // ParseServerAddress
};

// One inference service: a frontend that listens, and its backend.
struct ServiceFrontend {
  std::string name;  // ValidateServiceName: [a-z][a-z0-9-]{0,62}
  // The frontend's listening address: an IPv4 or IPv6 literal (no
  // brackets); "0.0.0.0" for all IPv4 addresses.
  std::string bind_host;
  int port = 0;  // 1..65535
  Balance balance = Balance::kLeastConn;
  // Time to connect to a server; time a client or a server may stay silent
  // in the middle of a request or response; time a request may wait for a
  // server slot (only with `server_options.maxconn`).
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration client_timeout = absl::Seconds(60);
  absl::Duration server_timeout = absl::Seconds(60);
  absl::Duration queue_timeout = absl::Seconds(30);
  ServerOptions server_options;
  // Not part of the shape: see the file comment.
  std::vector<SeedServer> seed_servers;
};

struct HaproxyConfig {
  // The runtime API's unix socket (absolute path, at most 107 bytes, no
  // whitespace or quotes), bound `mode 600 level admin expose-fd
  // listeners`; the last lets a reload hand the listening sockets over.
  std::string stats_socket;
  // A unix datagram socket (same rules) that access logs are sent to, one
  // line per request in `kAccessLogFormat` (access_log.h). Empty: no access
  // log. HAProxy drops lines while nothing is bound there.
  std::string log_socket;
  // The process's concurrent connections. 0: HAProxy derives it from the
  // file-descriptor limit (`ulimit -n`); HAProxy refuses to start when a
  // given value needs more descriptors than the hard limit allows (about
  // two per connection).
  int maxconn = 0;
  // Connection attempts to servers after the first; with `option
  // redispatch 1` each retry goes to another server. HAProxy retries only
  // failed connections (the default `retry-on conn-failure`): a request
  // that reached a replica is never sent twice.
  int retries = 3;
  // Longest a worker left over by a reload or a soft stop keeps serving
  // the requests it still has.
  absl::Duration hard_stop_after = absl::Minutes(5);
  absl::Duration http_request_timeout = absl::Seconds(10);
  absl::Duration keep_alive_timeout = absl::Seconds(10);
  int nbthread = 0;  // 0: HAProxy's default (one per CPU)
  std::vector<ServiceFrontend> services;
};

// OK, or InvalidArgument naming the name and the rule it breaks.
absl::Status ValidateServiceName(std::string_view name);
// A server (replica) name: [A-Za-z0-9][A-Za-z0-9._-]{0,63}.
absl::Status ValidateServerName(std::string_view name);

// "IPv4:port" or "[IPv6]:port", port 1..65535. Host names are refused:
// HAProxy 2.6 never resolves a dynamic server's name ("init-addr none").
struct ServerAddress {
  std::string host;  // without brackets
  int port = 0;
  bool ipv6 = false;
};
absl::StatusOr<ServerAddress> ParseServerAddress(std::string_view text);
// "1.2.3.4:80" or "[::1]:80": the form `ParseServerAddress` reads and
// backend_sync compares.
std::string FormatServerAddress(const ServerAddress& address);

// The proxies' names for a service: "fe_<service>", "be_<service>".
std::string FrontendName(std::string_view service);
std::string BackendName(std::string_view service);
// The service of a backend name, or "" for a proxy that is not one.
std::string ServiceOfBackend(std::string_view backend);

// Every rule above, plus: socket paths as `HaproxyConfig` says, services
// unique by name and by bind address:port, positive timeouts and limits,
// seed servers unique in their backend. InvalidArgument names the service
// and field.
absl::Status ValidateConfig(const HaproxyConfig& config);

// The whole haproxy.cfg text. Services (and seed servers) are written in
// name order, so that equal configs render equal text. Fails as
// `ValidateConfig`.
absl::StatusOr<std::string> RenderHaproxyConfig(const HaproxyConfig& config);

// The render without seed servers: two configs with equal shapes need no
// reload. Fails as `ValidateConfig`.
absl::StatusOr<std::string> ConfigShape(const HaproxyConfig& config);

}  // namespace loom::gateway
