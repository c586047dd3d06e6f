#pragma once

// The addresses an agent takes on its command line: the servers it calls and
// the address it listens on (and registers).

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom {

// "host:port" or "http://host:port[/]" -> "http://host:port"; https is kept.
// `InvalidArgument` for anything else (paths are not supported).
absl::StatusOr<std::string> NormalizeAgentServerUrl(std::string_view url);

struct ListenAddress {
  std::string host;  // as given ("127.0.0.2", "localhost", "::1")
  int port = 0;
};

// Parses "HOST:PORT" ("[::1]:7100" for IPv6) and checks that HOST is a
// loopback address or an address of this host (so that the address the
// agent registers reaches it). Wildcards (0.0.0.0, ::) are refused: the
// server needs one address to call.
absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view text);

// "host:port", or "[host]:port" for an IPv6 host.
std::string HostPort(const std::string& host, int port);

}  // namespace loom
