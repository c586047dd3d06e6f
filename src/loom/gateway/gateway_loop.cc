#include "loom/gateway/gateway_loop.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/gateway/backend_sync.h"

namespace loom::gateway {
namespace {

// In the run directory.
constexpr char kStatsSocket[] = "admin.sock";
constexpr char kLogSocket[] = "log.sock";

absl::Status Bad(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(
      absl::StrCat("gateway config: ", field, ": ", why));
}

const nlohmann::json* Member(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

}  // namespace

absl::StatusOr<std::vector<ServiceTarget>> ParseGatewayTarget(
    const nlohmann::json& body) {
  const nlohmann::json* list = Member(body, "services");
  if (list == nullptr || !list->is_array()) {
    return Bad("services", "must be a list");
  }
  std::vector<ServiceTarget> out;
  for (size_t i = 0; i < list->size(); ++i) {
    const nlohmann::json& s = (*list)[i];
    const std::string at = absl::StrCat("services[", i, "]");
    ServiceTarget t;
    const nlohmann::json* name = Member(s, "name");
    if (name == nullptr || !name->is_string()) {
      return Bad(at + ".name", "must be a string");
    }
    t.name = name->get<std::string>();
    if (absl::Status st = ValidateServiceName(t.name); !st.ok()) {
      return Bad(at + ".name", std::string(st.message()));
    }
    const nlohmann::json* port = Member(s, "port");
    if (port == nullptr || !port->is_number_integer() ||
        port->get<int64_t>() < 1 || port->get<int64_t>() > 65535) {
      return Bad(at + ".port", "must be a port (1-65535)");
    }
    t.port = port->get<int>();
    const nlohmann::json* servers = Member(s, "servers");
    if (servers != nullptr && !servers->is_array()) {
      return Bad(at + ".servers", "must be a list");
    }
    for (size_t k = 0; servers != nullptr && k < servers->size(); ++k) {
      const nlohmann::json& v = (*servers)[k];
      const std::string vat = absl::StrCat(at, ".servers[", k, "]");
      const nlohmann::json* n = Member(v, "name");
      const nlohmann::json* a = Member(v, "address");
      const nlohmann::json* state = Member(v, "state");
      if (n == nullptr || !n->is_string() || a == nullptr || !a->is_string()) {
        return Bad(vat, "needs a name and an address (strings)");
      }
      TargetServer srv;
      srv.name = n->get<std::string>();
      srv.address = a->get<std::string>();
      srv.serving =
          state == nullptr || (state->is_string() && *state == "serving");
      t.servers.push_back(std::move(srv));
    }
    out.push_back(std::move(t));
  }
  return out;
}

GatewayLoop::GatewayLoop(GatewayOptions options, ControlPlane* control,
                         GatewayLogFn log)
    : options_(std::move(options)), control_(control), log_(std::move(log)) {
  HaproxyProcessOptions p;
  p.binary = options_.haproxy;
  p.run_dir = options_.run_dir;
  p.terminate_with_parent = true;
  haproxy_ = std::make_unique<HaproxyProcess>(std::move(p));
}

GatewayLoop::~GatewayLoop() { Stop(); }

absl::Status GatewayLoop::Start() {
  if (options_.run_dir == nullptr) {
    return absl::FailedPreconditionError("gateway: no run directory");
  }
  if (absl::Status s = options_.run_dir->Remove(kLogSocket); !s.ok()) {
    return s;
  }
  return access_log_.Start(options_.run_dir->PathOf(kLogSocket));
}

void GatewayLoop::Stop() {
  if (haproxy_ != nullptr && haproxy_->running()) {
    if (absl::Status s = haproxy_->Stop(); !s.ok()) {
      log_("warn", absl::StrCat("stopping haproxy: ", s.message()));
    }
  }
  access_log_.Stop();
}

void GatewayLoop::LogChange(const std::string& key, const std::string& level,
                            const std::string& message) {
  std::string& last = last_said_[key];
  if (last == message) return;
  last = message;
  if (!message.empty()) log_(level, message);
}

HaproxyConfig GatewayLoop::ConfigFor(
    const std::vector<ServiceTarget>& targets) const {
  HaproxyConfig c;
  c.stats_socket = options_.run_dir->PathOf(kStatsSocket);
  c.log_socket = options_.run_dir->PathOf(kLogSocket);
  c.maxconn = options_.maxconn;
  c.nbthread = options_.nbthread;
  for (const ServiceTarget& t : targets) {
    ServiceFrontend f;
    f.name = t.name;
    f.bind_host = options_.bind_host;
    f.port = t.port;
    f.server_options = options_.server_options;
    // For a first start: the replicas serving now (a reload takes the
    // running worker's instead, haproxy_process.h).
    for (const TargetServer& s : t.servers) {
      if (s.serving && ValidateServerName(s.name).ok() &&
          ParseServerAddress(s.address).ok()) {
        f.seed_servers.push_back({s.name, s.address});
      }
    }
    c.services.push_back(std::move(f));
  }
  return c;
}

absl::Status GatewayLoop::Step(absl::Time now) {
  if (options_.run_dir == nullptr) {
    return absl::FailedPreconditionError("gateway: no run directory");
  }
  absl::StatusOr<nlohmann::json> body = control_->FetchConfig();
  if (!body.ok()) {
    LogChange("fetch", "warn",
              absl::StrCat("cannot read the services from the server (HAProxy "
                           "keeps serving what it has): ",
                           body.status().message()));
    return body.status();
  }
  LogChange("fetch", "info", "");
  absl::StatusOr<std::vector<ServiceTarget>> targets =
      ParseGatewayTarget(*body);
  if (!targets.ok()) {
    LogChange("parse", "error", std::string(targets.status().message()));
    return targets.status();
  }
  if (haproxy_->running()) {
    if (absl::Status s = haproxy_->CheckRunning(); !s.ok()) {
      log_("error",
           absl::StrCat("haproxy ended; starting it again: ", s.message()));
    }
  }
  absl::Status result = absl::OkStatus();
  HaproxyConfig config = ConfigFor(*targets);
  if (!haproxy_->running()) {
    if (targets->empty()) return absl::OkStatus();  // nothing to serve yet
    if (absl::Status s = haproxy_->Start(config); !s.ok()) {
      LogChange("haproxy", "error",
                absl::StrCat("cannot start haproxy: ", s.message()));
      // The server says why none of them is served.
      nlohmann::json services = nlohmann::json::array();
      for (const ServiceTarget& t : *targets) {
        services.push_back(
            {{"name", t.name},
             {"error", absl::StrCat("haproxy does not start: ",
                                    s.message().substr(0, 400))}});
      }
      (void)control_->SendReport(
          {{"gateway", options_.name}, {"services", std::move(services)}});
      return s;
    }
    not_served_.clear();
    log_("info", absl::StrCat("haproxy started (pid ", haproxy_->master_pid(),
                              ") with ", targets->size(), " service(s)"));
  } else {
    absl::StatusOr<bool> reloaded = haproxy_->Apply(config);
    if (!reloaded.ok()) {
      // The old configuration keeps serving; the servers of the services
      // it has are still kept up to date below.
      LogChange("haproxy", "error",
                absl::StrCat("cannot reload haproxy (the running "
                             "configuration keeps serving): ",
                             reloaded.status().message()));
      result.Update(reloaded.status());
      not_served_ = absl::StrCat("haproxy refused the configuration with it: ",
                                 reloaded.status().message().substr(0, 400));
    } else if (*reloaded) {
      not_served_.clear();
      log_("info",
           absl::StrCat("haproxy reloaded: ", targets->size(), " service(s)"));
    }
  }
  if (result.ok()) LogChange("haproxy", "info", "");
  const HaproxyRuntime runtime = haproxy_->runtime();
  for (const ServiceTarget& t : *targets) {
    bool known = false;
    for (const ServiceFrontend& f : haproxy_->config().services) {
      known |= f.name == t.name;
    }
    if (!known) continue;  // its reload failed
    DesiredBackend desired;
    for (const TargetServer& s : t.servers) {
      desired[s.name] = {s.address, s.serving};
    }
    absl::StatusOr<SyncReport> r = SyncBackend(
        runtime, BackendName(t.name), desired, options_.server_options);
    if (!r.ok()) {
      result.Update(r.status());
      continue;
    }
    for (const SyncAction& a : r->applied) {
      log_("info", absl::StrCat(t.name, ": ", DescribeAction(a)));
    }
    std::string failed;
    for (const auto& [a, st] : r->failed) {
      absl::StrAppend(&failed, failed.empty() ? "" : "; ", DescribeAction(a),
                      ": ", st.message());
    }
    for (const std::string& why : r->rejected) {
      absl::StrAppend(&failed, failed.empty() ? "" : "; ", why);
    }
    LogChange("sync/" + t.name, "warn", failed);
    result.Update(r->status());
  }
  absl::StatusOr<nlohmann::json> report = Report(*targets, now);
  if (!report.ok()) {
    result.Update(report.status());
    return result;
  }
  if (absl::Status s = control_->SendReport(*report); !s.ok()) {
    LogChange("report", "warn",
              absl::StrCat("cannot report to the server: ", s.message()));
    result.Update(s);
  } else {
    LogChange("report", "info", "");
  }
  return result;
}

absl::StatusOr<nlohmann::json> GatewayLoop::Report(
    const std::vector<ServiceTarget>& targets, absl::Time now) {
  const HaproxyRuntime runtime = haproxy_->runtime();
  absl::StatusOr<std::vector<StatRow>> stats = runtime.ShowStat();
  if (!stats.ok()) return stats.status();
  absl::StatusOr<std::map<std::string, std::vector<ObservedServer>>> observed =
      ObserveBackends(runtime);
  if (!observed.ok()) return observed.status();
  nlohmann::json services = nlohmann::json::array();
  for (const ServiceTarget& t : targets) {
    const std::string fe = FrontendName(t.name);
    const std::string be = BackendName(t.name);
    int64_t in_flight = 0, rps = 0, requests = 0, errors = 0;
    bool seen = false;
    for (const StatRow& r : *stats) {
      if (r.proxy == fe && r.type == StatRow::Type::kFrontend) {
        rps = r.req_rate;
        requests = r.req_tot;
        errors += r.hrsp_5xx;
        seen = true;
      } else if (r.proxy == be && r.type == StatRow::Type::kBackend) {
        // Requests at the servers and those queued for one.
        in_flight += r.scur + r.qcur;
        errors += r.econ;
      }
    }
    if (!seen) {  // not in the running configuration
      if (!not_served_.empty()) {
        services.push_back({{"name", t.name}, {"error", not_served_}});
      }
      continue;
    }
    nlohmann::json servers = nlohmann::json::array();
    if (auto it = observed->find(be); it != observed->end()) {
      for (const ObservedServer& s : it->second) {
        servers.push_back(
            {{"name", s.name},
             {"state", s.admin == ServerAdminState::kReady   ? "serving"
                       : s.admin == ServerAdminState::kDrain ? "draining"
                                                             : "maint"},
             {"sessions", s.sessions + s.queued}});
      }
    }
    nlohmann::json svc = {{"name", t.name},
                          {"in_flight", in_flight},
                          {"rps", rps},
                          {"requests_total", requests},
                          {"errors_total", errors},
                          {"servers", std::move(servers)}};
    if (std::optional<double> p95 = access_log_.P95Ms(be, now)) {
      svc["p95_ms"] = *p95;
    }
    const LatencyHistogram h = access_log_.Histogram(be);
    nlohmann::json buckets = nlohmann::json::array();
    for (size_t i = 0; i < kLatencyBucketsMs.size(); ++i) {
      buckets.push_back({kLatencyBucketsMs[i], h.counts[i]});
    }
    svc["latency"] = {{"buckets_ms", std::move(buckets)},
                      {"count", h.count},
                      {"sum_ms", h.sum_ms}};
    services.push_back(std::move(svc));
  }
  return nlohmann::json{{"gateway", options_.name},
                        {"services", std::move(services)}};
}

}  // namespace loom::gateway
