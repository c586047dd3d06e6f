#pragma once

// The server's direct question to an agent whose node has gone quiet
// (docs/fault-tolerance.md, "Detection"): is anything answering at its
// address? A plain TCP connect and one HTTP request, with a deadline.

#include <string>

#include "absl/time/time.h"

namespace loom {

enum class ProbeResult {
  kAnswered,  // something answered HTTP at the address: the agent lives
  kRefused,   // the host refused the connection: no agent is listening
  kNoAnswer,  // no answer within the deadline (host down, paused, busy)
};

// Connects to `address` ("host:port"; a name, an IPv4 or a bracketed IPv6
// address) and sends `GET /healthz`; any HTTP answer (an error status
// included) is `kAnswered`. Only ECONNREFUSED is `kRefused`: an unreachable
// network or a timeout says nothing certain of the agent. Blocks for at
// most `deadline` (plus name resolution).
ProbeResult ProbeAgent(const std::string& address, absl::Duration deadline);

}  // namespace loom
