#include "loom/server/server_command.h"

#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/core/cluster_spec.h"
#include "loom/server/controller.h"
#include "loom/server/http_server.h"
#include "loom/store/sqlite_state_store.h"

namespace loom {
namespace {

std::atomic<bool> g_stop{false};

void OnSignal(int) { g_stop = true; }

int Fail(const std::string& message) {
  std::cerr << "loom server: " << message << "\n";
  return 2;
}

}  // namespace

CLI::App* AddServerCommand(CLI::App& app, ServerFlags* f) {
  CLI::App* cmd = app.add_subcommand(
      "server", "Run the controller: REST API, scheduler, state store");
  cmd->add_option("--listen", f->listen, "HOST:PORT to serve the API on")
      ->capture_default_str();
  cmd->add_option("--data-dir", f->data_dir,
                  "Directory for the state database (state.db)")
      ->required();
  cmd->add_option("--cluster", f->cluster,
                  "Cluster spec: a preset (small, large) or a YAML file")
      ->capture_default_str();
  cmd->add_option("--policy", f->policy,
                  "Queue policy: fifo, backfill, las, fair")
      ->capture_default_str();
  cmd->add_option("--heartbeat-timeout", f->heartbeat_timeout_s,
                  "Seconds without a heartbeat before a node is down")
      ->capture_default_str();
  cmd->add_option("--suspect-after", f->suspect_after_s,
                  "Seconds without a heartbeat before a node is suspect "
                  "(no new work); below --heartbeat-timeout; default 3, or "
                  "half the timeout when that is less");
  cmd->add_option("--fence-after", f->fence_after_s,
                  "Seconds without an answered heartbeat before an agent "
                  "kills its tasks (fencing; 0: never); default 80% of "
                  "--heartbeat-timeout");
  cmd->add_option("--checkpoint-root", f->checkpoint_root,
                  "LOOM_CHECKPOINT_DIR of jobs whose spec names none: "
                  "ROOT/<job id> (default: DATA_DIR/checkpoints)");
  return cmd;
}

int RunServer(const ServerFlags& f) {
  const size_t colon = f.listen.rfind(':');
  int port = 0;
  if (colon == std::string::npos ||
      !absl::SimpleAtoi(f.listen.substr(colon + 1), &port) || port < 0 ||
      port > 65535) {
    return Fail("--listen: expected HOST:PORT, got '" + f.listen + "'");
  }
  std::error_code ec;
  std::filesystem::create_directories(f.data_dir, ec);
  if (ec) return Fail("--data-dir: " + f.data_dir + ": " + ec.message());
  absl::StatusOr<Cluster> cluster = LoadCluster(f.cluster);
  if (!cluster.ok()) {
    return Fail(absl::StrCat("--cluster: ", cluster.status().message()));
  }
  absl::StatusOr<std::unique_ptr<SqliteStateStore>> store =
      SqliteStateStore::Open(f.data_dir + "/state.db");
  if (!store.ok()) return Fail(std::string(store.status().message()));
  ControllerOptions copts;
  copts.policy = f.policy;
  if (!(f.heartbeat_timeout_s > 0) || f.heartbeat_timeout_s > 3600) {
    return Fail(
        "--heartbeat-timeout: must be more than 0 and at most 3600 seconds");
  }
  copts.heartbeat_timeout = absl::Seconds(f.heartbeat_timeout_s);
  const double suspect = f.suspect_after_s < 0
                             ? std::min(3.0, 0.5 * f.heartbeat_timeout_s)
                             : f.suspect_after_s;
  if (!(suspect > 0) || suspect >= f.heartbeat_timeout_s) {
    return Fail(
        "--suspect-after: must be positive and below "
        "--heartbeat-timeout");
  }
  copts.suspect_after = absl::Seconds(suspect);
  const double fence =
      f.fence_after_s < 0 ? 0.8 * f.heartbeat_timeout_s : f.fence_after_s;
  if (fence >= f.heartbeat_timeout_s) {
    return Fail(
        "--fence-after: must be below --heartbeat-timeout (agents "
        "must stop their tasks before the server restarts them "
        "elsewhere)");
  }
  copts.fence_after = absl::Seconds(fence);
  copts.checkpoint_root = f.checkpoint_root.empty()
                              ? f.data_dir + "/checkpoints"
                              : f.checkpoint_root;
  absl::StatusOr<std::unique_ptr<Controller>> controller =
      Controller::Create(*std::move(cluster), store->get(), copts, absl::Now());
  if (!controller.ok()) {
    return Fail(std::string(controller.status().message()));
  }
  HttpServerOptions hopts;
  hopts.host = f.listen.substr(0, colon);
  hopts.port = port;
  HttpServer server(controller->get(), hopts);
  absl::StatusOr<int> bound = server.Start();
  if (!bound.ok()) return Fail(std::string(bound.status().message()));
  signal(SIGINT, OnSignal);
  signal(SIGTERM, OnSignal);
  signal(SIGPIPE, SIG_IGN);
  std::cerr << "loom server: listening on http://" << hopts.host << ":"
            << *bound << " (cluster " << (*controller)->cluster().name << ", "
            << (*controller)->cluster().nodes.size() << " nodes, data "
            << f.data_dir << ")" << std::endl;
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  std::cerr << "loom server: stopping" << std::endl;
  server.Stop();
  return 0;
}

}  // namespace loom
