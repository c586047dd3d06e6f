// `Agent`: the parts of a node agent (docs/agent.md), wired together in one
// place, the way the kubelet wires its managers: the node table, the task
// runner and its launch steps, the maintenance runner, the node session, the
// health monitor, fault injection and the API. This file checks the options,
// makes the parts in order, and starts and stops their threads; the parts do
// the work.

#include "loom/agent/agent.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <memory>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "loom/agent/agent_api.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/emulated_stack.h"
#include "loom/agent/fault_injector.h"
#include "loom/agent/health_monitor.h"
#include "loom/agent/heartbeat_stats.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/maintenance_runner.h"
#include "loom/agent/mig_step.h"
#include "loom/agent/node_session.h"
#include "loom/agent/node_table.h"
#include "loom/agent/task_runner.h"
#include "loom/image/registry_source.h"

namespace loom {

class Agent::Impl {
 public:
  explicit Impl(AgentOptions options)
      : options_(std::move(options)), log_(options_.log) {}
  ~Impl() { Shutdown(); }

  absl::Status Init();
  absl::Status Start();
  void Shutdown();

  const std::string& address() const { return api_->address(); }
  int port() const { return api_->port(); }
  std::vector<std::string> node_names() const { return nodes_->names(); }
  bool Registered(const std::string& name) const {
    absl::StatusOr<AgentNode*> node = nodes_->Resolve(name);
    return !name.empty() && node.ok() && session_->Registered(**node);
  }

 private:
  // Checks and completes `options_`.
  absl::Status CheckOptions();
  // Finds the host's GPUs (real ones: NVML) and starts watching their Xids.
  absl::Status ProbeGpus(std::vector<GpuDevice>* real_gpus);
  // The host's RDMA NICs, paired with `real_gpus` (none when emulated).
  std::vector<NicDevice> ProbeNics(const std::vector<GpuDevice>& real_gpus);
  // Says once where container tasks' GPU driver files will come from.
  void LogGpuDriverFiles(const GpuDriverOptions& options) const;
  // Polls every node's launcher and fences silent nodes, every
  // `poll_interval`, until `stop_`.
  void SuperviseLoop();
  void ReportSoon(AgentNode& node) {
    if (session_ != nullptr) session_->ReportSoon(node);
  }
  // `node`'s software stack read again, after a maintenance command: the
  // emulated versions' files, or NVML.
  absl::StatusOr<GpuSoftware> ReadStack(AgentNode& node) const;

  // Constant after `Init`.
  AgentOptions options_;
  const AgentLog log_;
  // Tasks run as the users their launches name (`run_as_user`, and root).
  bool switch_users_ = false;
  // Finds real GPUs for health checks and telemetry (null when emulated).
  std::unique_ptr<GpuProbe> owned_probe_;
  GpuProbe* probe_ = nullptr;
  // Real GPUs: the last Xid of each (null when emulated or unavailable).
  std::unique_ptr<NvmlXidWatcher> xid_watcher_;
  int expected_gpus_ = 0;
  // The NVML library the probe loaded ("" for emulated GPUs).
  std::string nvml_loaded_;
  // The driver's versions NVML reported (real GPUs).
  GpuSoftware real_software_;
  // Who may call the API (the server's keys; `--insecure`).
  ApiGuard guard_{options_.insecure};
  HeartbeatStats stats_;

  // Where nodes pull images from (outlives their stores), and the registry
  // tokens their pulls share.
  image::RegistryTokenCache registry_tokens_;
  std::unique_ptr<image::RegistryImageSource> image_source_;

  // The parts, in the order they are made (and the reverse of their
  // destruction: later parts hold references to earlier ones).
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<HealthMonitor> health_;
  std::unique_ptr<TaskRunner> runner_;
  std::unique_ptr<MaintenanceRunner> maintenance_;
  std::unique_ptr<FaultInjector> faults_;
  std::unique_ptr<AgentApi> api_;
  std::unique_ptr<NodeSession> session_;

  std::atomic<bool> started_{false};
  std::atomic<bool> shut_down_{false};
  absl::Notification stop_;
  std::thread supervise_thread_;
};

absl::Status Agent::Impl::CheckOptions() {
  if (options_.server_urls.empty()) {
    return absl::InvalidArgumentError("no server URL (--server)");
  }
  for (std::string& url : options_.server_urls) {
    absl::StatusOr<std::string> normal = NormalizeAgentServerUrl(url);
    if (!normal.ok()) return normal.status();
    url = *normal;
  }
  if (options_.node_names.empty()) {
    return absl::InvalidArgumentError("no node name");
  }
  std::set<std::string> unique;
  for (const std::string& name : options_.node_names) {
    if (!ValidNodeName(name)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "node name '", name,
          "' is invalid: use letters, digits, '-', '_' and '.', starting "
          "with a letter or digit"));
    }
    if (!unique.insert(name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("node name '", name, "' is given twice"));
    }
  }
  if (options_.node_names.size() > 1) options_.fleet = true;
  if (options_.fleet && !options_.emulation) {
    return absl::InvalidArgumentError(
        "the fleet emulator (--emulate-nodes) needs emulated GPUs "
        "(--emulate COUNTxMODEL)");
  }
  if (options_.data_dir.empty()) {
    return absl::InvalidArgumentError("no data directory (--data-dir)");
  }
  if (absl::Status s =
          CheckInsecureListen(options_.insecure, options_.listen_host);
      !s.ok()) {
    return s;
  }
  if (!options_.now) options_.now = [] { return absl::Now(); };
  if (options_.stop_signal <= 0 || options_.stop_signal >= NSIG) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid stop signal ", options_.stop_signal));
  }
  if (options_.stop_grace < absl::ZeroDuration() ||
      options_.heartbeat_interval < absl::ZeroDuration() ||
      options_.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("durations must not be negative");
  }
  options_.http_threads = std::clamp(options_.http_threads, 2, 256);
  options_.probe_threads = std::clamp(options_.probe_threads, 1, 64);
  const PortRange ports = options_.service_ports;
  if (ports.first < 1 || ports.first > ports.last || ports.last > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("service ports ", ports.first, "-", ports.last,
                     ": must be a range within 1-65535"));
  }
  return absl::OkStatus();
}

absl::Status Agent::Impl::ProbeGpus(std::vector<GpuDevice>* real_gpus) {
  if (options_.emulation) return absl::OkStatus();
  NvmlGpuProbe nvml(options_.nvml_library);
  GpuProbe* probe = options_.gpu_probe != nullptr ? options_.gpu_probe : &nvml;
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe->Probe();
  if (!gpus.ok()) {
    return absl::Status(
        gpus.status().code(),
        absl::StrCat("GPU discovery failed: ", Str(gpus.status().message()),
                     ". To run without GPUs, emulate them: --emulate "
                     "8xH200 (or 8xA100, COUNTxMODEL[:MEMORY])"));
  }
  *real_gpus = std::move(*gpus);
  nvml_loaded_ = probe->LoadedLibrary();
  real_software_ = probe->Software();
  if (options_.gpu_probe == nullptr) {
    owned_probe_ = std::make_unique<NvmlGpuProbe>(options_.nvml_library);
    probe_ = owned_probe_.get();
  } else {
    probe_ = options_.gpu_probe;
  }
  expected_gpus_ = static_cast<int>(real_gpus->size());
  xid_watcher_ = std::make_unique<NvmlXidWatcher>(options_.nvml_library);
  if (absl::Status st = xid_watcher_->Start(); !st.ok()) {
    log_("warn", "",
         absl::StrCat("Xid errors are not watched: ", Str(st.message())));
    xid_watcher_.reset();
  }
  if (real_gpus->empty()) log_("warn", "", "NVML found no GPUs on this host");
  return absl::OkStatus();
}

std::vector<NicDevice> Agent::Impl::ProbeNics(
    const std::vector<GpuDevice>& real_gpus) {
  if (options_.emulation) return {};
  SysfsNicProbe sysfs;
  NicProbe* probe = options_.nic_probe != nullptr ? options_.nic_probe : &sysfs;
  absl::StatusOr<std::vector<NicDevice>> nics = probe->Probe(real_gpus);
  if (!nics.ok()) {
    log_("warn", "",
         absl::StrCat("RDMA NICs not found: ", Str(nics.status().message())));
    return {};
  }
  if (!sysfs.warning().empty()) log_("warn", "", sysfs.warning());
  std::vector<std::string> described;
  for (const NicDevice& nic : *nics) {
    described.push_back(absl::StrCat(
        nic.name, " (", nic.rate_gbps, " Gb/s, ",
        nic.state.empty() ? "state unknown" : nic.state, ", NUMA ",
        nic.numa_node, ", GPUs ",
        nic.gpus.empty() ? "none" : absl::StrJoin(nic.gpus, ","),
        nic.note.empty() ? "" : absl::StrCat("; ", nic.note), ")"));
  }
  if (!described.empty()) {
    log_("info", "",
         absl::StrCat("RDMA NICs: ", absl::StrJoin(described, ", ")));
  }
  return *std::move(nics);
}

absl::StatusOr<GpuSoftware> Agent::Impl::ReadStack(AgentNode& node) const {
  if (options_.emulation) {
    std::vector<std::string> warnings;
    GpuSoftware software =
        RereadEmulatedSoftware(*options_.emulation, node.Software(), &warnings);
    for (const std::string& w : warnings) log_("warn", node.name, w);
    return software;
  }
  // A probe of its own: the health monitor's runs on its thread.
  NvmlGpuProbe fresh(options_.nvml_library);
  GpuProbe* probe = options_.gpu_probe != nullptr ? options_.gpu_probe : &fresh;
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe->Probe();
  if (!gpus.ok()) return gpus.status();
  return probe->Software();
}

void Agent::Impl::LogGpuDriverFiles(const GpuDriverOptions& options) const {
  if (options_.fake_tasks ||
      (options.cdi_dirs.empty() && options.nvml_library.empty())) {
    return;  // emulated GPUs without CDI specs: device stand-ins only
  }
  const AgentNode& node = *nodes_->nodes().front();
  std::vector<DriverGpu> gpus;
  for (const GpuDevice& g : node.gpus) {
    gpus.push_back({.index = g.index, .uuid = g.uuid, .minor = g.minor});
  }
  GpuDriverOptions on_node = options;
  on_node.device_dir = node.device_dir;
  const GpuDriverFiles files = FindGpuDriverFiles(gpus, on_node);
  for (const std::string& w : files.warnings) {
    log_("warn", node.name, absl::StrCat("GPU driver files: ", w));
  }
  log_("info", node.name,
       absl::StrCat("container tasks' GPU driver files: ",
                    DescribeGpuDriverFiles(files)));
}

absl::Status Agent::Impl::Init() {
  if (absl::Status s = CheckOptions(); !s.ok()) return s;
  HostInfo host;
  if (options_.host) {
    host = *options_.host;
  } else {
    absl::StatusOr<HostInfo> probed = ProbeHost();
    if (!probed.ok()) return probed.status();
    host = *probed;
  }
  std::vector<GpuDevice> real_gpus;
  if (absl::Status s = ProbeGpus(&real_gpus); !s.ok()) return s;

  if (options_.run_as_user && !options_.fake_tasks) {
    switch_users_ = options_.can_switch_users.value_or(::geteuid() == 0);
    if (!options_.lookup_user) options_.lookup_user = LookUpSystemUser;
    if (!switch_users_) {
      log_("info", "",
           absl::StrCat("not running as root: tasks run as uid ", ::geteuid(),
                        ", not as the users who submit them"));
    }
  }

  if (absl::Status s = EnsureDirectory(options_.data_dir, kAgentDirMode);
      !s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("--data-dir: ", Str(s.message())));
  }
  NodeTableOptions table;
  table.data_dir = options_.data_dir;
  table.fleet = options_.fleet;
  table.emulation = options_.emulation;
  table.real_software = real_software_;
  table.real_nics = ProbeNics(real_gpus);
  if (!options_.emulation) {
    table.real_mig =
        std::make_shared<NvmlMigControl>(real_gpus, options_.nvml_library);
  }
  table.fake_tasks = options_.fake_tasks;
  table.use_cgroups = options_.use_cgroups;
  table.launcher_factory = options_.launcher_factory;
  table.now = options_.now;
  if (!options_.fake_tasks) {
    image_source_ = std::make_unique<image::RegistryImageSource>(
        [this](const std::string& r) {
          const std::vector<std::string>& insecure =
              options_.insecure_registries;
          image::RegistryOptions o;
          o.plain_http =
              std::find(insecure.begin(), insecure.end(), r) != insecure.end();
          if (const image::RegistryCredential* c =
                  options_.registry_credentials.For(r);
              c != nullptr) {
            o.credential = *c;
          }
          o.tokens = &registry_tokens_;
          return o;
        });
    table.image_source = image_source_.get();
    if (!options_.registry_credentials.empty()) {  // names only, never secrets
      log_("info", "",
           absl::StrCat("registry credentials for ",
                        absl::StrJoin(
                            options_.registry_credentials.Registries(), ", ")));
    }
    table.image_budget_bytes = options_.image_budget_bytes;
  }
  table.dataset_cache_bytes = options_.dataset_cache_bytes;
  table.rclone_config = options_.rclone_config;
  table.dataset_filler = options_.dataset_filler;
  absl::StatusOr<std::unique_ptr<NodeTable>> nodes =
      NodeTable::Create(table, options_.node_names, host, real_gpus, log_);
  if (!nodes.ok()) return nodes.status();
  nodes_ = *std::move(nodes);

  HealthMonitorOptions health;
  health.data_dir = options_.data_dir;
  health.min_free_disk_bytes = options_.min_free_disk_bytes;
  health.command = options_.health_command;
  health.command_timeout = options_.health_timeout;
  health.interval = options_.health_interval;
  health.probe = probe_;
  health.expected_gpus = expected_gpus_;
  health.xid_watcher = xid_watcher_.get();
  health.on_change = [this] {
    for (const auto& node : nodes_->nodes()) ReportSoon(*node);
  };
  health.each_round = [this] {
    for (const auto& node : nodes_->nodes()) {
      if (SettleMigModes(*node, log_)) ReportSoon(*node);
    }
  };
  health_ = std::make_unique<HealthMonitor>(std::move(health), log_);

  LaunchStepsOptions steps;
  steps.server_urls = options_.server_urls;
  steps.switch_users = switch_users_;
  steps.lookup_user = options_.lookup_user;
  steps.checkpoint_dirs = !options_.fake_tasks;
  steps.runc = options_.runc;
  steps.gpu_driver.cdi_dirs = options_.cdi_dirs.value_or(
      options_.emulation
          ? std::vector<std::string>{}
          : std::vector<std::string>{"/etc/cdi", "/var/run/cdi"});
  steps.gpu_driver.nvml_library = nvml_loaded_;
  std::error_code self_error;
  steps.self_exe =
      std::filesystem::read_symlink("/proc/self/exe", self_error).string();
  LogGpuDriverFiles(steps.gpu_driver);
  TaskRunnerOptions runner;
  runner.stop_signal = options_.stop_signal;
  runner.stop_grace = options_.stop_grace;
  runner.steps = DefaultLaunchSteps(steps);
  runner.on_task_ended = [this](AgentNode& node) { ReportSoon(node); };
  runner.replica_host = options_.listen_host;
  runner.service_ports = options_.service_ports;
  runner.probes.threads = options_.probe_threads;
  runner.run_probes = !options_.fake_tasks;
  runner_ = std::make_unique<TaskRunner>(std::move(runner), log_);
  for (const auto& node : nodes_->nodes()) {
    if (absl::Status s = runner_->Recover(*node); !s.ok()) return s;
  }

  MaintenanceRunnerOptions maintenance;
  maintenance.read_stack = [this](AgentNode& node) { return ReadStack(node); };
  maintenance.on_change = [this](AgentNode& node) { ReportSoon(node); };
  maintenance.now = options_.now;
  maintenance_ =
      std::make_unique<MaintenanceRunner>(std::move(maintenance), log_);
  for (const auto& node : nodes_->nodes()) {
    if (absl::Status s = maintenance_->Recover(*node); !s.ok()) {
      return absl::Status(s.code(),
                          absl::StrCat("node ", node->name,
                                       ": maintenance: ", Str(s.message())));
    }
  }

  faults_ = std::make_unique<FaultInjector>(
      *nodes_, options_.emulation.has_value(),
      [this](AgentNode& node) { ReportSoon(node); }, log_);

  AgentApiOptions api;
  api.listen_host = options_.listen_host;
  api.listen_port = options_.listen_port;
  api.http_threads = options_.http_threads;
  api.telemetry.probe = probe_;
  api.telemetry.xid_watcher = xid_watcher_.get();
  api.telemetry.fake_tasks = options_.fake_tasks;
  api_ =
      std::make_unique<AgentApi>(std::move(api), *nodes_, *runner_,
                                 *maintenance_, *faults_, guard_, stats_, log_);
  if (absl::Status s = api_->Bind(); !s.ok()) return s;

  NodeSessionOptions session;
  session.server_urls = options_.server_urls;
  session.join_token = options_.join_token;
  session.ca_cert = options_.ca_cert;
  session.heartbeat_interval = options_.heartbeat_interval;
  session.connect_timeout = options_.connect_timeout;
  session.request_timeout = options_.request_timeout;
  session.heartbeat_threads = options_.heartbeat_threads;
  session.keep_lease = !options_.fake_tasks;
  session.address = api_->address();
  session_ = std::make_unique<NodeSession>(std::move(session), *nodes_,
                                           *runner_, *maintenance_, *health_,
                                           guard_, stats_, log_);
  for (const auto& node : nodes_->nodes()) session_->Load(*node);
  if (!guard_.HasKey()) log_("info", "", guard_.Describe());
  return absl::OkStatus();
}

absl::Status Agent::Impl::Start() {
  if (started_.exchange(true)) {
    return absl::FailedPreconditionError("the agent was already started");
  }
  // Tasks recovered from an agent that was gone too long are fenced before
  // anything could re-adopt them.
  session_->FenceSilentNodes();
  api_->Serve();
  session_->Start();
  supervise_thread_ = std::thread([this] { SuperviseLoop(); });
  runner_->Start();
  health_->Start();
  const auto& nodes = nodes_->nodes();
  const size_t n = nodes.size();
  log_("info", "",
       absl::StrCat(
           "agent listening on ", api_->address(), "; ", n,
           n == 1 ? " node (" : " nodes (", nodes.front()->name,
           n > 1 ? absl::StrCat(" .. ", nodes.back()->name) : "", "); ",
           nodes.front()->gpus.size(), " ",
           nodes.front()->gpus.empty()
               ? "GPUs"
               : absl::StrCat(nodes.front()->gpus.front().model, " GPUs"),
           options_.emulation ? " (emulated)" : "",
           options_.fake_tasks ? "; fake tasks" : "", "; servers ",
           absl::StrJoin(options_.server_urls, ",")));
  return absl::OkStatus();
}

void Agent::Impl::Shutdown() {
  if (shut_down_.exchange(true)) return;
  if (!stop_.HasBeenNotified()) stop_.Notify();
  if (session_ != nullptr) session_->Stop();
  if (api_ != nullptr) api_->Stop();
  if (!started_.load()) return;
  if (supervise_thread_.joinable()) supervise_thread_.join();
  // Launches still pulling their image finish (or fail) first: their
  // threads report to the session, stopped but not yet destroyed.
  runner_->Shutdown();
  health_->Stop();
  log_("info", "", "agent stopped; tasks keep running");
}

void Agent::Impl::SuperviseLoop() {
  while (!stop_.HasBeenNotified()) {
    for (const auto& node : nodes_->nodes()) runner_->Poll(*node);
    maintenance_->Poll();
    session_->FenceSilentNodes();
    stop_.WaitForNotificationWithTimeout(options_.poll_interval);
  }
}

absl::StatusOr<std::unique_ptr<Agent>> Agent::Create(AgentOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  if (absl::Status s = impl->Init(); !s.ok()) return s;
  return std::unique_ptr<Agent>(new Agent(std::move(impl)));
}

Agent::Agent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Agent::~Agent() { Shutdown(); }

absl::Status Agent::Start() { return impl_->Start(); }

void Agent::Shutdown() { impl_->Shutdown(); }

const std::string& Agent::address() const { return impl_->address(); }

int Agent::port() const { return impl_->port(); }

std::vector<std::string> Agent::node_names() const {
  return impl_->node_names();
}

bool Agent::Registered(const std::string& node) const {
  return impl_->Registered(node);
}

}  // namespace loom
