#pragma once

// `loom agent`: reports a node's inventory to the loom server, heartbeats with
// the status of its tasks, and launches, stops and serves the logs of tasks
// when the server asks (docs/api.md, "Agent protocol"; docs/agent.md).
//
// One `Agent` serves one node, or several emulated nodes that share one HTTP
// listener (the fleet emulator, `--emulate-nodes N`): the server then names
// the node in each call (`"node"` in a launch body, `?node=NAME` elsewhere).

#include <signal.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/agent_address.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/nic_probe.h"
#include "loom/agent/replica_port.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/user_account.h"
#include "loom/image/registry_auth.h"
#include "nlohmann/json.hpp"

namespace loom {

struct AgentOptions {
  // A bootstrap token (`loom token create --join`) for nodes that have no
  // credential yet (docs/security.md). A node that joins gets a credential
  // of its own, kept in `<node dir>/credential` and used from then on.
  std::string join_token;
  // Serve the agent API without a server key while none is known (tests on
  // loopback; `--insecure`). Off (the default), the agent fails closed: it
  // answers 503 to every route but health and telemetry until it has
  // registered and knows its server's key (docs/security.md). `Create`
  // refuses it with `InvalidArgument` on a `listen_host` that is not
  // loopback.
  bool insecure = false;
  // For https:// servers: a PEM file of the CA(s) that signed the server's
  // certificate ("" : the system's CAs).
  std::string ca_cert;
  // The loom servers, normalised (`NormalizeAgentServerUrl`); at least one.
  // Requests go to the one that answered last; the others are tried in
  // order when it cannot be reached or answers 503.
  std::vector<std::string> server_urls;
  // Where the agent API listens (`ParseListenAddress`); port 0 picks a free
  // port. "HOST:PORT" (the port chosen) is the address registered.
  std::string listen_host = "127.0.0.1";
  int listen_port = 0;
  // The nodes this agent serves: one, or several for the fleet emulator.
  std::vector<std::string> node_names;
  // Fleet layout: each node keeps its files under `<data_dir>/nodes/<name>/`
  // instead of `<data_dir>/`. Set when `node_names` has more than one name;
  // `loom agent --emulate-nodes` sets it for one node too.
  bool fleet = false;
  // Holds `tasks/` (the launcher's state), `units/` (tasks of several
  // processes) and `logs/` (task output). Created if missing; must belong
  // to this agent and survive agent restarts.
  std::string data_dir;
  // Emulated GPUs (`--emulate`); required for a fleet. Unset: real GPUs from
  // `gpu_probe`.
  std::optional<GpuEmulation> emulation;
  // Finds real GPUs when `emulation` is unset. Not owned; null: an
  // `NvmlGpuProbe` of `nvml_library`.
  GpuProbe* gpu_probe = nullptr;
  // Finds the host's RDMA NICs and pairs them with its GPUs when `emulation`
  // is unset (emulated nodes get `EmulatedNicProbe`'s). Not owned; null: a
  // `SysfsNicProbe` of "/".
  NicProbe* nic_probe = nullptr;
  // NVML, for the default probe and the Xid event watcher (real GPUs).
  std::string nvml_library = "libnvidia-ml.so.1";
  // The host as reported (hostname; CPUs and memory unless emulated). Unset:
  // `ProbeHost()`.
  std::optional<HostInfo> host;
  // Tasks are not run (`--fake-tasks`): see `FakeTaskLauncher`.
  bool fake_tasks = false;
  // Container tasks (docs/images.md): registries spoken to over plain http
  // ("host:port", `--insecure-registry`; others over https), each node's
  // image store's budget in bytes (0: none), and the runtime.
  std::vector<std::string> insecure_registries;
  // The operator's registry credentials (`--registry-auth`,
  // image/registry_auth.h) that each node's pulls use; never from a launch
  // request.
  image::RegistryCredentials registry_credentials;
  int64_t image_budget_bytes = 0;
  // Each node's dataset cache (docs/datasets.md): its budget, and the
  // rclone config with the remotes it fills from ("": rclone's default).
  int64_t dataset_cache_bytes = int64_t{100} << 30;
  std::string rclone_config;
  // Tests: what fills each node's dataset cache instead of rclone.
  std::function<std::unique_ptr<DatasetFiller>(const std::string& node)>
      dataset_filler;
  std::string runc = "runc";
  // CDI spec directories, later ones winning, for the GPU driver files of
  // container tasks (gpu_driver_files.h; `--cdi-dir`). Unset: /etc/cdi and
  // /var/run/cdi for real GPUs, none for emulated ones.
  std::optional<std::vector<std::string>> cdi_dirs;
  // Run each task as the user its launch request names (`"user"`): that
  // user's uid, primary gid, groups, `HOME`; an unknown user fails the
  // launch (docs/agent.md, "Users"). Only an agent running as root can;
  // otherwise tasks run as the agent's user, and the agent says so once at
  // start. Not for fake tasks. `--run-as-user=false` turns it off.
  bool run_as_user = true;
  // Whether this process can switch users; unset: when it runs as root
  // (`geteuid() == 0`). Tests set it.
  std::optional<bool> can_switch_users;
  // Finds the user of a launch request; null: `LookUpSystemUser`.
  UserLookup lookup_user;
  // Heartbeat every this long; zero: what the server's registration reply
  // says (`heartbeat_interval_ms`), 1 s when it says nothing.
  absl::Duration heartbeat_interval = absl::ZeroDuration();
  // How tasks are stopped when the server lists them in `stop`, and the
  // defaults of `POST /v1/tasks/{id}/stop`: this signal, then SIGKILL after
  // the grace.
  int stop_signal = SIGTERM;
  absl::Duration stop_grace = absl::Seconds(10);
  // Service replicas (`"port": true` in a launch, docs/agent.md "Service
  // replicas"): their ports come from this range (`--service-ports`), each
  // free on `listen_host` when handed out; their probes run on at most
  // `probe_threads` threads.
  PortRange service_ports;
  int probe_threads = 8;
  // Health checks (docs/fault-tolerance.md, "Health"), every this long on a
  // thread of their own; zero: none. Problems go to the server with each
  // heartbeat; the server drains a node that has any.
  absl::Duration health_interval = absl::Seconds(10);
  // An operator check run with `/bin/sh -c` each round (`--health-check`);
  // a non-zero exit makes the node unhealthy, with the first line of its
  // output as the reason. Empty: none.
  std::string health_command;
  absl::Duration health_timeout = absl::Seconds(30);
  // The data disk is unhealthy with less than this free.
  int64_t min_free_disk_bytes = int64_t{256} << 20;
  // How often the launcher is polled for ended tasks.
  absl::Duration poll_interval = absl::Milliseconds(100);
  // Threads that register and heartbeat (each owns a share of the nodes and
  // its own keep-alive connections); 0: min(nodes, 8).
  int heartbeat_threads = 0;
  // Threads of the agent API server. Each open connection holds one (idle
  // keep-alive connections for up to 2 s); `follow` log streams may take at
  // most half of them.
  int http_threads = 32;
  // Timeouts of calls to the server.
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration request_timeout = absl::Seconds(10);
  // Put tasks that ask for limits in cgroup v1 (`CgroupV1Manager`), and
  // every task in a cgroup v2 group of its own where the host has a
  // writable unified hierarchy (`TaskGroups`); false: no cgroups (process
  // groups only).
  bool use_cgroups = true;
  // Null: `ShimTaskLauncher` (or `FakeTaskLauncher` with `fake_tasks`).
  TaskLauncherFactory launcher_factory;
  // The clock for stop deadlines and fake tasks.
  std::function<absl::Time()> now;
  // Receives each log line (already formatted); null: standard error.
  std::function<void(const std::string& line)> log;
};

// The agent: see the file comment and docs/agent.md.
//
// Thread-safety: `Start`, `Shutdown` and the destructor must not race each
// other; the accessors are thread-safe. Internally, each node's task table
// is guarded by its own mutex; the launcher is thread-safe.
class Agent {
 public:
  // Probes (or emulates) the GPUs and the host, creates each node's
  // directories and launcher, recovers the tasks an earlier agent left
  // (`TaskLauncher::Recover`), and binds the listener. Starts no thread.
  // `InvalidArgument` for bad options, `Unavailable` when real GPUs were
  // asked for and NVML is missing (use `emulation`), other errors from the
  // file system or the bind.
  static absl::StatusOr<std::unique_ptr<Agent>> Create(AgentOptions options);

  // Shuts down (see `Shutdown`).
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Starts serving the agent API, supervising tasks, and registering (with
  // retries and backoff) and heartbeating. `FailedPrecondition` when called
  // twice.
  absl::Status Start();

  // Stops the threads and the listener. Tasks keep running: a new agent on
  // the same data directory finds them again. Idempotent.
  void Shutdown();

  // "HOST:PORT" as registered.
  const std::string& address() const;
  int port() const;
  std::vector<std::string> node_names() const;
  // True once `node` was registered and has not been asked to register
  // again since.
  bool Registered(const std::string& node) const;

 private:
  class Impl;
  explicit Agent(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
