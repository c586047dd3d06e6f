#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "loom/agent/agent.h"

namespace loom {

// Flags of `loom agent`; see docs/agent.md.
struct AgentFlags {
  std::string servers;             // --server URL[,URL...]
  std::string join_token;          // --join-token (or $LOOM_JOIN_TOKEN)
  std::string join_token_file;     // --join-token-file
  std::string ca_cert;             // --ca-cert
  bool insecure = false;           // --insecure (loopback only)
  std::string listen;              // --listen HOST:PORT
  std::string name;                // --name (default: the hostname)
  std::string data_dir;            // --data-dir
  std::string emulate;             // --emulate COUNTxMODEL[:MEMORY]
  int emulate_cpus = 0;            // --emulate-cpus (0: the model's default)
  std::string emulate_memory;      // --emulate-memory ("": the model's default)
  int emulate_nodes = 0;           // --emulate-nodes N (fleet emulator)
  std::string emulate_driver;      // --emulate-driver ("": 550.54.15)
  std::string emulate_cuda;        // --emulate-cuda ("": 12.4)
  std::string emulate_mig_log;     // --emulate-mig-log ("": none)
  std::string name_prefix;         // --name-prefix (default: --name)
  int names_from = 0;              // --names-from K
  bool fake_tasks = false;         // --fake-tasks
  bool run_as_user = true;         // --run-as-user=true|false
  std::string heartbeat_interval;  // --heartbeat-interval ("": the server's)
  std::string stop_signal = "TERM";     // --stop-signal
  std::string stop_grace = "10s";       // --stop-grace, --stop-signal-grace
  std::string health_check;             // --health-check CMD
  std::string health_interval = "10s";  // --health-interval (0: no checks)
  std::string health_timeout = "30s";   // --health-timeout
  std::string min_free_disk = "256Mi";  // --min-free-disk
  std::vector<std::string> insecure_registries;  // --insecure-registry
  std::string registry_auth;                     // --registry-auth FILE
  std::string image_budget = "0";                // --image-budget (0: none)
  std::string dataset_cache_bytes = "100Gi";     // --dataset-cache-bytes
  std::string rclone_config;                     // --rclone-config
  std::string runc = "runc";                     // --runc
  std::vector<std::string> cdi_dirs;             // --cdi-dir
  std::string service_ports = "20000-29999";     // --service-ports
};

// Registers `agent` on `app`; `flags` must outlive the parse.
CLI::App* AddAgentCommand(CLI::App& app, AgentFlags* flags);

// Turns the flags into agent options (node names, emulation, durations).
// `InvalidArgument` naming the flag on bad input.
absl::StatusOr<AgentOptions> AgentOptionsFromFlags(const AgentFlags& flags);

// Runs `loom agent` until SIGINT or SIGTERM (tasks keep running). Returns
// the process exit code: 0 after a signal, 2 for bad flags, 1 when the agent
// cannot start (no NVML without --emulate, the listen address is taken, ...).
int RunAgent(const AgentFlags& flags);

}  // namespace loom
