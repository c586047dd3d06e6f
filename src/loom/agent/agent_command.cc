#include "loom/agent/agent_command.h"

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <tuple>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/emulated_stack.h"
#include "loom/common/config_file_option.h"
#include "loom/common/units.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

constexpr int kMaxEmulatedNodes = 10000;

std::string Hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

}  // namespace

CLI::App* AddAgentCommand(CLI::App& app, AgentFlags* f) {
  CLI::App* agent = app.add_subcommand(
      "agent",
      "Run on a node: report its GPUs to the loom server, heartbeat, and "
      "launch and supervise the tasks it is given");
  agent->footer(
      "Examples:\n"
      "  loom agent --server http://127.0.0.1:7000 --listen 127.0.0.2:7100 "
      "--data-dir /var/lib/loom/agent\n"
      "  loom agent --server 127.0.0.1:7000 --listen 127.0.0.2:7100 "
      "--name h200-0 --emulate 8xH200 --data-dir /tmp/h200-0\n"
      "  loom agent --server 127.0.0.1:7000 --listen 127.0.0.3:0 "
      "--emulate 8xH200 --emulate-nodes 2000 --name-prefix h200 "
      "--fake-tasks --data-dir /tmp/fleet\n"
      "  loom agent --config /etc/loom/agent.toml   # the packaged unit\n"
      "See docs/agent.md.");
  agent
      ->add_option("--server", f->servers,
                   "loom server URL(s), comma-separated; tried in order")
      ->required();
  agent
      ->add_option("--listen", f->listen,
                   "HOST:PORT of the agent API (a loopback or local address; "
                   "port 0 picks a free one); registered with the server")
      ->required();
  agent->add_option("--name", f->name,
                    "Node name as in the cluster spec (default: hostname)");
  agent
      ->add_option("--data-dir", f->data_dir,
                   "Task state (DIR/tasks) and logs (DIR/logs); must survive "
                   "agent restarts")
      ->required();
  agent->add_option(
      "--emulate", f->emulate,
      "Emulate GPUs instead of using NVML: COUNTxMODEL[:MEMORY], e.g. "
      "8xH200, 8xA100, 4xL4:24Gi");
  agent->add_option("--emulate-cpus", f->emulate_cpus,
                    "CPU cores to report with --emulate (default: 192 for "
                    "h200, 96 for a100, else the host's)");
  agent->add_option("--emulate-memory", f->emulate_memory,
                    "Memory to report with --emulate (default: 2Ti for "
                    "h200, 1Ti for a100, else the host's)");
  agent->add_option("--emulate-driver", f->emulate_driver,
                    "GPU driver version emulated nodes report, in the "
                    "gpu.driver label and the node's stack (default: "
                    "550.54.15); @FILE: the version in FILE, read at start "
                    "and after each maintenance command");
  agent->add_option("--emulate-cuda", f->emulate_cuda,
                    "CUDA version emulated nodes report (gpu.cuda; default: "
                    "12.4); @FILE as for --emulate-driver");
  agent->add_option("--emulate-mig-log", f->emulate_mig_log,
                    "With --emulate: append the NVML calls that emulated "
                    "MIG layouts stand for to FILE, one line each "
                    "(docs/agent.md \"MIG\")");
  agent->add_option("--emulate-nodes", f->emulate_nodes,
                    "Fleet emulator: register N emulated nodes named "
                    "PREFIX-K .. PREFIX-(K+N-1), sharing one listener");
  agent->add_option("--name-prefix", f->name_prefix,
                    "Fleet emulator: node name prefix (default: --name)");
  agent->add_option("--names-from", f->names_from,
                    "Fleet emulator: index of the first node (default 0)");
  agent->add_option("--insecure-registry", f->insecure_registries,
                    "A registry (HOST:PORT) to pull container images from "
                    "over plain http (a loopback test registry); others use "
                    "https. Repeatable");
  agent->add_option("--registry-auth", f->registry_auth,
                    "Registry credentials for container image pulls: a "
                    "Docker config.json ({\"auths\": {\"HOST:PORT\": "
                    "{\"auth\": BASE64(USER:PASSWORD)}}}), mode 0600; read "
                    "at start");
  agent
      ->add_option("--image-budget", f->image_budget,
                   "Disk for each node's container images (e.g. 200Gi); "
                   "past it, unused images are evicted, least recently used "
                   "first. 0: no limit")
      ->capture_default_str();
  agent
      ->add_option("--dataset-cache-bytes", f->dataset_cache_bytes,
                   "Disk for each node's dataset cache (e.g. 500Gi); after "
                   "a fill, the least recently used versions no task uses "
                   "are deleted until the cache fits (docs/datasets.md)")
      ->capture_default_str();
  agent->add_option("--rclone-config", f->rclone_config,
                    "rclone config FILE with the remotes of jobs' datasets "
                    "(the agent's copy of the server's --rclone-config); "
                    "default: rclone's own");
  agent
      ->add_option("--runc", f->runc,
                   "The OCI runtime that runs container tasks")
      ->capture_default_str();
  agent->add_option(
      "--cdi-dir", f->cdi_dirs,
      "A directory of CDI specs (nvidia.com/gpu) for the GPU driver files of "
      "container tasks; later ones win. Repeatable (default: /etc/cdi and "
      "/var/run/cdi, none with --emulate)");
  agent->add_flag("--fake-tasks", f->fake_tasks,
                  "Run no processes: a task lasts LOOM_FAKE_SECONDS of its "
                  "env (default 60) and exits 0 (scale tests)");
  agent
      ->add_option("--run-as-user", f->run_as_user,
                   "Run each task as the user who submitted its job (needs "
                   "root; otherwise tasks run as the agent's user): true or "
                   "false")
      ->capture_default_str();
  agent->add_option("--heartbeat-interval", f->heartbeat_interval,
                    "Heartbeat period, e.g. 1s or 500ms (default: what the "
                    "server says at registration)");
  agent
      ->add_option("--stop-signal", f->stop_signal,
                   "First signal when the server stops a task")
      ->capture_default_str();
  agent
      ->add_option("--stop-grace,--stop-signal-grace", f->stop_grace,
                   "Time between the stop signal and SIGKILL")
      ->capture_default_str();
  agent->add_option(
      "--health-check", f->health_check,
      "Operator health check, run with /bin/sh -c every --health-interval: "
      "a non-zero exit drains the node, its first output line is the reason");
  agent
      ->add_option("--health-interval", f->health_interval,
                   "How often health checks run (data disk, GPUs, "
                   "--health-check); 0 turns them off")
      ->capture_default_str();
  agent
      ->add_option("--health-timeout", f->health_timeout,
                   "A --health-check command running longer fails")
      ->capture_default_str();
  agent->add_option("--join-token-file", f->join_token_file,
                    "File with a bootstrap token (`loom token create "
                    "--join`): how a node without a credential joins");
  agent->add_option("--ca-cert", f->ca_cert,
                    "PEM file of the CA that signed an https:// server's "
                    "certificate (default: the system's CAs)");
  agent->add_option("--join-token", f->join_token,
                    "The bootstrap token itself (visible in `ps`: prefer "
                    "--join-token-file or $LOOM_JOIN_TOKEN)");
  agent->add_flag("--insecure", f->insecure,
                  "Serve the agent API to anyone until the server's key is "
                  "known (tests only; refused unless --listen is a loopback "
                  "address). Without it the agent answers 503 until it has "
                  "joined");
  agent
      ->add_option("--min-free-disk", f->min_free_disk,
                   "The node is unhealthy with less free space under "
                   "--data-dir")
      ->capture_default_str();
  agent
      ->add_option("--service-ports", f->service_ports,
                   "FIRST-LAST: the TCP ports handed to service replicas "
                   "(tasks launched with \"port\": true, in $PORT), each "
                   "free on the --listen host when handed out")
      ->capture_default_str();
  AddConfigFileOption(agent);
  return agent;
}

absl::StatusOr<AgentOptions> AgentOptionsFromFlags(const AgentFlags& f) {
  AgentOptions options;
  options.join_token = f.join_token;
  options.insecure = f.insecure;
  options.ca_cert = f.ca_cert;
  if (!f.join_token_file.empty()) {
    std::ifstream in(f.join_token_file);
    std::getline(in, options.join_token);
    if (!in && options.join_token.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--join-token-file: cannot read ", f.join_token_file));
    }
  } else if (options.join_token.empty()) {
    if (const char* env = std::getenv("LOOM_JOIN_TOKEN"); env != nullptr) {
      options.join_token = env;
    }
  }
  options.join_token =
      std::string(absl::StripAsciiWhitespace(options.join_token));
  for (absl::string_view url :
       absl::StrSplit(f.servers, ',', absl::SkipWhitespace())) {
    absl::StatusOr<std::string> normal =
        NormalizeAgentServerUrl(std::string(url));
    if (!normal.ok()) return normal.status();
    options.server_urls.push_back(*normal);
  }
  if (options.server_urls.empty()) {
    return absl::InvalidArgumentError("--server: no URL given");
  }
  absl::StatusOr<ListenAddress> listen = ParseListenAddress(f.listen);
  if (!listen.ok()) return listen.status();
  options.listen_host = listen->host;
  options.listen_port = listen->port;
  if (absl::Status s = CheckInsecureListen(f.insecure, listen->host); !s.ok()) {
    return s;
  }
  if (f.data_dir.empty()) {
    return absl::InvalidArgumentError("--data-dir: required");
  }
  options.data_dir = f.data_dir;

  if (!f.emulate.empty()) {
    absl::StatusOr<GpuEmulation> emulation = ParseGpuEmulation(f.emulate);
    if (!emulation.ok()) return emulation.status();
    if (f.emulate_cpus < 0 || f.emulate_cpus > 100000) {
      return absl::InvalidArgumentError(
          "--emulate-cpus: must be from 1 to 100000");
    }
    if (f.emulate_cpus > 0) emulation->cpus = f.emulate_cpus;
    if (!f.emulate_memory.empty()) {
      absl::StatusOr<int64_t> bytes = ParseBytes(f.emulate_memory);
      if (!bytes.ok() || *bytes <= 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("--emulate-memory: '", f.emulate_memory,
                         "' is not a size (e.g. 2Ti, 512Gi)"));
      }
      emulation->memory_bytes = *bytes;
    }
    // A literal version, or "@FILE": read now, and again after each
    // maintenance command (emulated_stack.h).
    for (const auto& [flag, text, out, file] :
         {std::tuple{"--emulate-driver", &f.emulate_driver,
                     &emulation->driver_version, &emulation->driver_file},
          std::tuple{"--emulate-cuda", &f.emulate_cuda,
                     &emulation->cuda_version, &emulation->cuda_file}}) {
      if (text->empty()) continue;
      if (absl::Status s = ResolveEmulatedVersionFlag(flag, *text, out, file);
          !s.ok()) {
        return s;
      }
    }
    emulation->mig_log = f.emulate_mig_log;
    options.emulation = *emulation;
  } else if (f.emulate_cpus != 0 || !f.emulate_memory.empty() ||
             !f.emulate_driver.empty() || !f.emulate_cuda.empty()) {
    return absl::InvalidArgumentError(
        "--emulate-cpus, --emulate-memory, --emulate-driver and "
        "--emulate-cuda need --emulate");
  } else if (!f.emulate_mig_log.empty()) {
    return absl::InvalidArgumentError("--emulate-mig-log needs --emulate");
  }

  const std::string name = f.name.empty() ? Hostname() : f.name;
  if (f.emulate_nodes != 0) {
    if (f.emulate_nodes < 1 || f.emulate_nodes > kMaxEmulatedNodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--emulate-nodes: must be from 1 to ", kMaxEmulatedNodes));
    }
    if (!options.emulation) {
      return absl::InvalidArgumentError(
          "--emulate-nodes needs --emulate COUNTxMODEL (the fleet emulator "
          "emulates GPUs)");
    }
    if (f.names_from < 0) {
      return absl::InvalidArgumentError("--names-from: must be >= 0");
    }
    const std::string prefix = f.name_prefix.empty() ? name : f.name_prefix;
    for (int i = 0; i < f.emulate_nodes; ++i) {
      options.node_names.push_back(absl::StrCat(prefix, "-", f.names_from + i));
    }
    options.fleet = true;
  } else {
    if (!f.name_prefix.empty() || f.names_from != 0) {
      return absl::InvalidArgumentError(
          "--name-prefix and --names-from need --emulate-nodes");
    }
    options.node_names.push_back(name);
  }

  options.fake_tasks = f.fake_tasks;
  options.run_as_user = f.run_as_user;
  options.insecure_registries = f.insecure_registries;
  if (!f.registry_auth.empty()) {
    absl::StatusOr<image::RegistryCredentials> creds =
        image::RegistryCredentials::Load(f.registry_auth);
    if (!creds.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--registry-auth: ", creds.status().message()));
    }
    options.registry_credentials = *std::move(creds);
  }
  options.runc = f.runc;
  for (const std::string& dir : f.cdi_dirs) {
    if (dir.empty() || dir[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("--cdi-dir: '", dir, "' must be an absolute path"));
    }
  }
  if (!f.cdi_dirs.empty()) options.cdi_dirs = f.cdi_dirs;
  if (absl::StatusOr<int64_t> b = ParseBytes(f.image_budget);
      b.ok() && *b >= 0) {
    options.image_budget_bytes = *b;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "--image-budget: '", f.image_budget, "' must be a size like 200Gi"));
  }
  if (absl::StatusOr<int64_t> b = ParseBytes(f.dataset_cache_bytes);
      b.ok() && *b > 0) {
    options.dataset_cache_bytes = *b;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--dataset-cache-bytes: '", f.dataset_cache_bytes,
                     "' must be a size like 100Gi"));
  }
  options.rclone_config = f.rclone_config;
  if (!f.heartbeat_interval.empty()) {
    absl::StatusOr<absl::Duration> d = ParseDuration(f.heartbeat_interval);
    if (!d.ok() || *d < absl::Milliseconds(10) || *d > absl::Minutes(10)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--heartbeat-interval: '", f.heartbeat_interval,
                       "' must be a duration from 10ms to 10m"));
    }
    options.heartbeat_interval = *d;
  }
  absl::StatusOr<int> signal = ParseSignal(f.stop_signal);
  if (!signal.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--stop-signal: ", signal.status().message()));
  }
  options.stop_signal = *signal;
  absl::StatusOr<absl::Duration> grace = ParseDuration(f.stop_grace);
  if (!grace.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--stop-grace: '", f.stop_grace, "' is not a duration (e.g. 10s)"));
  }
  options.stop_grace = *grace;
  options.health_command = f.health_check;
  absl::StatusOr<absl::Duration> health = ParseDuration(f.health_interval);
  if (f.health_interval == "0") health = absl::ZeroDuration();
  if (!health.ok() || *health < absl::ZeroDuration() ||
      (*health > absl::ZeroDuration() && *health < absl::Milliseconds(100))) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-interval: '", f.health_interval,
                     "' must be 0 (off) or a duration of at least 100ms"));
  }
  options.health_interval = *health;
  absl::StatusOr<absl::Duration> health_timeout =
      ParseDuration(f.health_timeout);
  if (!health_timeout.ok() || *health_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--health-timeout: '", f.health_timeout,
                     "' must be a positive duration (e.g. 30s)"));
  }
  options.health_timeout = *health_timeout;
  absl::StatusOr<int64_t> min_free = ParseBytes(f.min_free_disk);
  if (!min_free.ok() || *min_free < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--min-free-disk: '", f.min_free_disk,
                     "' is not a size (e.g. 256Mi, 10Gi)"));
  }
  options.min_free_disk_bytes = *min_free;
  absl::StatusOr<PortRange> ports = ParsePortRange(f.service_ports);
  if (!ports.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--service-ports: ", ports.status().message()));
  }
  options.service_ports = *ports;
  return options;
}

int RunAgent(const AgentFlags& flags) {
  absl::StatusOr<AgentOptions> options = AgentOptionsFromFlags(flags);
  if (!options.ok()) {
    std::cerr << "loom agent: " << options.status().message() << "\n";
    return 2;
  }
  // Every thread inherits this mask, so only `sigwait` below sees these
  // signals. Tasks get a clean mask and default dispositions (the launcher
  // resets both before exec).
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<Agent>> agent =
      Agent::Create(*std::move(options));
  if (!agent.ok()) {
    std::cerr << "loom agent: " << agent.status().message() << "\n";
    return agent.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  if (absl::Status s = (*agent)->Start(); !s.ok()) {
    std::cerr << "loom agent: " << s.message() << "\n";
    return 1;
  }
  int received = 0;
  sigwait(&stop_signals, &received);
  std::cerr << "loom agent: "
            << (sigabbrev_np(received) != nullptr
                    ? absl::StrCat("SIG", sigabbrev_np(received))
                    : absl::StrCat("signal ", received))
            << " received; shutting down (tasks keep running)\n";
  (*agent)->Shutdown();
  return 0;
}

}  // namespace loom
