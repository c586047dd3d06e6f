#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace loom {

// Flags of `loom server`; see docs/api.md and docs/server.md.
struct ServerFlags {
  std::string listen = "127.0.0.1:7000";
  std::string data_dir;
  std::string cluster = "small";
  std::string policy = "fair";
  double heartbeat_timeout_s = 10;
  double suspect_after_s = -1;  // -1: 3 s, at most half the timeout
  double fence_after_s = -1;    // -1: 80% of the heartbeat timeout
  std::string checkpoint_root;
};

CLI::App* AddServerCommand(CLI::App& app, ServerFlags* flags);

// Runs the controller until SIGINT or SIGTERM. Exit code 0 on a clean stop,
// 2 for bad flags or an unusable data dir, 1 for other failures.
int RunServer(const ServerFlags& flags);

}  // namespace loom
