#pragma once

#include <string>

#include "CLI/CLI.hpp"

namespace loom {

// Flags of `loom dev`: a local cluster in one command (docs/dev.md).
struct DevFlags {
  int h200_nodes = 3;
  int a100_nodes = 1;
  int port = 7070;
  std::string data_dir = "loom-dev";
  std::string policy = "fair";
  bool fake_tasks = false;
};

CLI::App* AddDevCommand(CLI::App& app, DevFlags* flags);

// Starts `loom server` on 127.0.0.1:port with the SQLite store under the data
// dir and one `loom agent` per node, node i on 127.0.0.(2+i) emulating an
// 8-GPU node; waits until every node is up, prints how to use it, and keeps
// the cluster running until SIGINT or SIGTERM (then stops every process) or
// until one of the processes exits (then stops the rest and returns 1).
// Exit code 0 on a clean stop, 2 for bad flags, 1 when the cluster could not
// start or a process died.
int RunDev(const DevFlags& flags);

}  // namespace loom
