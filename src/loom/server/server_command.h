#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace loom {

// Flags of `loom server`; see docs/api.md and docs/server.md.
struct ServerFlags {
  std::string listen = "127.0.0.1:7000";
  std::string data_dir;
  std::string cluster = "small";
  std::string policy = "fair";
  double heartbeat_timeout_s = 10;
  std::string heartbeat_interval = "1s";
  double suspect_after_s = -1;  // -1: 3 s, at most half the timeout
  double fence_after_s = -1;    // -1: 80% of the heartbeat timeout
  std::string checkpoint_root;
  std::string rclone_config;  // --rclone-config: datasets (docs/datasets.md)
  // Unfinished jobs (held, pending, running, stopping) per user; 0: no
  // limit (as Slurm's MaxSubmitJobs).
  int64_t max_jobs_per_user = 10'000;
  // How long finished jobs stay in the live state before they move to the
  // accounting store (docs/accounting.md), in loom's duration syntax.
  std::string job_retention = "7d";
  // State store: "sqlite" (DATA_DIR/state.db, one server) or "etcd" (a
  // replicated controller: several servers, one leads; docs/ha.md).
  std::string store = "sqlite";
  std::string etcd_endpoints;         // http://h:p,http://h:p
  std::string etcd_prefix = "/loom";  // keys under PREFIX/data, PREFIX/leader
  std::string advertise;              // this server's URL for clients
  double leader_lease_s = 3;
  // Where the first admin token is written (mode 0600) when the cluster has
  // none; default DATA_DIR/admin.token.
  std::string admin_token_file;
  // The cluster's secret key file (mode 0600; server/server_secrets.h),
  // shared by every server of an etcd cluster; default DATA_DIR/secret.key.
  std::string secret_key_file;
  // TLS for the API (PEM files); both or neither.
  std::string tls_cert;
  std::string tls_key;
  // Registries ("host[:port]") spoken to over plain http when resolving a
  // job's image at submit; every other registry over https.
  std::vector<std::string> insecure_registries;
  // Registry credentials (Docker's config.json format, mode 0600;
  // image/registry_auth.h) for resolving job images; "": none.
  std::string registry_auth;
};

CLI::App* AddServerCommand(CLI::App& app, ServerFlags* flags);

// Runs the controller until SIGINT or SIGTERM. Exit code 0 on a clean stop,
// 2 for bad flags or an unusable data dir, 3 when a leader lost its
// leadership (etcd store: it stops at once; a supervisor starts it again as
// a standby), 1 for other failures.
int RunServer(const ServerFlags& flags);

}  // namespace loom
