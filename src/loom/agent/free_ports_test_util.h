#pragma once

// For the agent's tests of service replicas: a range of ports that are free
// on 127.0.0.1 now. Taken below Linux's ephemeral ports (32768-60999), at a
// random place in 10000-19999, so that no outgoing connection of another
// test running at once lands on one between the check and the use (a
// kernel-chosen port and its neighbours could: CI saw it). Tests only.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <random>

#include "loom/agent/replica_port.h"

namespace loom::agent_testing {

inline bool PortFreeOnLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// `n` consecutive ports, each free on 127.0.0.1 when checked.
inline PortRange FreePortRange(int n) {
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> base(10000, 19999 - n);
  int first = base(rng);
  for (int attempt = 0; attempt < 200; ++attempt, first = base(rng)) {
    bool all = true;
    for (int p = first; p < first + n && all; ++p) all = PortFreeOnLoopback(p);
    if (all) break;
  }
  return {first, first + n - 1};
}

}  // namespace loom::agent_testing
