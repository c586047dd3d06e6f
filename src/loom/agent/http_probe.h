#pragma once

// The HTTP probe of a service replica (docs/agent.md, "Service replicas"):
// one blocking HTTP/1.1 GET over a socket, within a deadline. Small on
// purpose: the agent only needs the status line of a health check, and must
// not depend on the server's or the CLI's clients.

#include <sys/socket.h>

#include <atomic>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {

// A TCP address: `host` (an IP address or a name, resolved by
// getaddrinfo) and `port`, as the sockets API wants it.
struct TcpAddress {
  sockaddr_storage addr = {};
  socklen_t len = 0;
  int family = 0;
};

// The first address of `host:port`; `InvalidArgument` for a host that does
// not resolve.
absl::StatusOr<TcpAddress> ResolveTcpAddress(const std::string& host, int port);

// GET `path` of http://host:port with `Connection: close`. OK when a status
// line of 2xx or 3xx arrives within `timeout` of the call (the body is read
// until the server closes, up to 64 KiB, while time is left, and ignored).
// Otherwise `Unavailable` with what happened, e.g. "GET /healthz: answered
// 503", "GET /healthz: connect to 127.0.0.1:20001: Connection refused",
// "GET /healthz: no answer within 1s". `cancel` (when not null) is checked
// every 100 ms: once it holds the probe stops, `Cancelled`. Thread-safe;
// the socket is closed before it returns.
absl::Status HttpGetProbe(const std::string& host, int port,
                          const std::string& path, absl::Duration timeout,
                          const std::atomic<bool>* cancel = nullptr);

}  // namespace loom
