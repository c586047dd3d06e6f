#include "loom/cli/gateway_command.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/client/api_client.h"
#include "loom/client/server_config.h"
#include "loom/gateway/gateway_loop.h"
#include "loom/gateway/run_dir.h"

namespace loom {
namespace {

std::atomic<bool> g_gateway_stop{false};
void OnGatewayStopSignal(int) { g_gateway_stop = true; }

// The control plane over the server's REST API.
class HttpControlPlane : public gateway::ControlPlane {
 public:
  explicit HttpControlPlane(std::unique_ptr<ApiClient> client)
      : client_(std::move(client)) {}
  absl::StatusOr<nlohmann::json> FetchConfig() override {
    return client_->GatewayConfig();
  }
  absl::Status SendReport(const nlohmann::json& report) override {
    return client_->GatewayReport(report).status();
  }

 private:
  std::unique_ptr<ApiClient> client_;
};

int Usage(const std::string& message) {
  std::cerr << "loom gateway: " << message << std::endl;
  return 2;
}

}  // namespace

CLI::App* AddGatewayCommand(CLI::App& app, GatewayFlags* f) {
  CLI::App* g = app.add_subcommand(
      "gateway",
      "Run HAProxy in front of the inference services and keep its backends "
      "equal to their ready replicas (docs/services.md)");
  g->add_option("--server", f->servers,
                "URL[,URL...] of the loom server(s); else $LOOM_SERVER or the "
                "config file");
  g->add_option("--token-file", f->token_file,
                "A file holding an operator token (or $LOOM_TOKEN, "
                "$LOOM_TOKEN_FILE)");
  g->add_option("--name", f->name,
                "This gateway's name in its reports (default: the host name)");
  g->add_option("--listen-host", f->listen_host,
                "The address the services' ports listen on")
      ->capture_default_str();
  g->add_option("--run-dir", f->run_dir,
                "A directory for haproxy.cfg, its sockets and its log, "
                "owned by this user with mode 0700 (made so if missing; "
                "refused otherwise). Default: /run/loom-gateway/NAME as "
                "root, else $XDG_RUNTIME_DIR/loom-gateway-NAME or "
                "$TMPDIR/loom-gateway-NAME; short, since unix socket paths "
                "are");
  g->add_option("--haproxy", f->haproxy, "The HAProxy binary")
      ->capture_default_str();
  g->add_option("--interval", f->interval_s,
                "Seconds between two passes (read the services, sync "
                "HAProxy, report)")
      ->capture_default_str()
      ->check(CLI::Range(0.05, 60.0));
  g->add_option("--maxconn", f->maxconn,
                "HAProxy's connection limit (0: from the file-descriptor "
                "limit)")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000000));
  g->add_option("--threads", f->threads,
                "HAProxy's worker threads (0: one per CPU)")
      ->capture_default_str()
      ->check(CLI::Range(0, 256));
  return g;
}

int RunGateway(const GatewayFlags& f) {
  AgentLog log(nullptr);
  absl::StatusOr<ServerList> servers =
      DiscoverServers(f.servers, GetProcessEnv);
  if (!servers.ok()) return Usage(std::string(servers.status().message()));
  absl::StatusOr<std::string> token =
      DiscoverToken(f.token_file, GetProcessEnv);
  if (!token.ok()) return Usage(std::string(token.status().message()));
  if (!std::filesystem::exists(f.haproxy)) {
    return Usage(absl::StrCat("--haproxy: ", f.haproxy,
                              " does not exist (apt-get install haproxy)"));
  }
  std::string name = f.name;
  if (name.empty()) {
    char host[256] = {};
    name = ::gethostname(host, sizeof(host) - 1) == 0 ? host : "gateway";
  }
  std::string run_dir = f.run_dir;
  if (run_dir.empty()) {
    auto env = [](const char* key) {
      const char* v = std::getenv(key);
      return std::string_view(v == nullptr ? "" : v);
    };
    absl::StatusOr<std::string> d = gateway::DefaultRunDir(
        ::geteuid(), name, env("XDG_RUNTIME_DIR"), env("TMPDIR"));
    if (!d.ok()) return Usage(std::string(d.status().message()));
    run_dir = *d;
  }
  // HAProxy runs as this process does and reads haproxy.cfg again at each
  // reload: a directory another user made, or may change, is refused.
  absl::StatusOr<std::shared_ptr<const gateway::RunDir>> dir =
      gateway::RunDir::Open(run_dir, /*create=*/true);
  if (!dir.ok()) return Usage(std::string(dir.status().message()));
  if ((*dir)->PathOf("master.sock").size() > 100) {
    return Usage(absl::StrCat("run directory ", (*dir)->path(),
                              ": too long for a unix socket path"));
  }
  ApiClientOptions copts;
  copts.token = *token;
  copts.read_timeout = absl::Seconds(5);
  HttpControlPlane control(std::make_unique<ApiClient>(servers->urls, copts));
  gateway::GatewayOptions o;
  o.name = name;
  o.bind_host = f.listen_host;
  o.run_dir = *dir;
  o.haproxy = f.haproxy;
  o.maxconn = f.maxconn;
  o.nbthread = f.threads;
  gateway::GatewayLoop loop(
      o, &control,
      [&log](const std::string& level, const std::string& message) {
        log(level, "", message);
      });
  if (absl::Status s = loop.Start(); !s.ok()) {
    log("error", "", std::string(s.message()));
    return 1;
  }
  ::signal(SIGINT, OnGatewayStopSignal);
  ::signal(SIGTERM, OnGatewayStopSignal);
  ::signal(SIGPIPE, SIG_IGN);
  log("info", "",
      absl::StrCat("gateway ", name, " for ", servers->urls.front(),
                   ", services on ", f.listen_host, ", run dir ",
                   (*dir)->path()));
  const absl::Duration interval = absl::Seconds(f.interval_s);
  while (!g_gateway_stop) {
    const absl::Time started = absl::Now();
    (void)loop.Step(started);  // what failed is logged; the next pass retries
    const absl::Time next = started + interval;
    while (!g_gateway_stop && absl::Now() < next) {
      absl::SleepFor(std::min(absl::Milliseconds(50), next - absl::Now()));
    }
  }
  log("info", "", "stopping: HAProxy finishes the requests in flight");
  loop.Stop();
  return 0;
}

}  // namespace loom
