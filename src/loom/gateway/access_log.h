#pragma once

// HAProxy's access log as the gateway configures it: one line per request,
// sent in syslog's "raw" format (the text alone, no priority, date or host)
// to a unix datagram socket, so that a `loom gateway` can compute response
// time percentiles (p95) per service from it. Pure: no I/O.

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom::gateway {

// The `log-format` haproxy_config.h renders. Keys and their HAProxy
// variables (configuration manual, 8.2.6 "Custom log format"):
//   be   %b   backend            srv  %s   server ("<NOSRV>" if none)
//   st   %ST  HTTP status        ta   %Ta  active time of the request, ms
//   tt   %Tt  total session time, ms (includes the client's keep-alive idle
//             time before the request, so prefer `ta` for latency)
//   tq   %Tw  time in the queue  tc   %Tc  time to connect to the server
//   tr   %Tr  server's response time (to the headers)
//   ts   %tsc termination state  by   %B   bytes sent to the client
// A timer of -1 means that stage was never reached (e.g. no server).
inline constexpr std::string_view kAccessLogFormat =
    "loom-access be=%b srv=%s st=%ST ta=%Ta tt=%Tt tq=%Tw tc=%Tc tr=%Tr "
    "ts=%tsc by=%B";

struct AccessLogEntry {
  std::string backend;
  std::string server;
  int status = 0;
  int64_t active_ms = -1;
  int64_t total_ms = -1;
  int64_t queue_ms = -1;
  int64_t connect_ms = -1;
  int64_t response_ms = -1;
  std::string termination;
  int64_t bytes = 0;
};

// Parses one line (a trailing newline allowed). Keys it does not know are
// skipped, so that a later format may add some. InvalidArgument, quoting
// the line, when it is not an access line or lacks `be`, `st` or `ta`.
absl::StatusOr<AccessLogEntry> ParseAccessLogLine(std::string_view line);

}  // namespace loom::gateway
