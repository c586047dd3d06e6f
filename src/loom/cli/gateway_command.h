#pragma once

// `loom gateway` (docs/services.md, "Gateway"): runs HAProxy in front of the
// services and keeps it equal to what the server says (gateway_loop.h),
// until SIGINT or SIGTERM.

#include <string>

#include "CLI/CLI.hpp"

namespace loom {

struct GatewayFlags {
  std::string servers;                        // --server URL[,URL...]
  std::string token_file;                     // --token-file
  std::string name;                           // --name (default: the host name)
  std::string listen_host = "0.0.0.0";        // --listen-host
  std::string run_dir;                        // --run-dir
  std::string haproxy = "/usr/sbin/haproxy";  // --haproxy
  double interval_s = 0.5;                    // --interval
  int maxconn = 0;                            // --maxconn
  int threads = 0;                            // --threads
};

CLI::App* AddGatewayCommand(CLI::App& app, GatewayFlags* flags);

// Exit status: 0 after a signal, 2 for bad flags or a run directory that
// cannot be made or is refused (gateway/run_dir.h: not this user's, not
// 0700, a symlink, or under a directory others may change), 1 when
// HAProxy cannot be run at all.
int RunGateway(const GatewayFlags& flags);

}  // namespace loom
