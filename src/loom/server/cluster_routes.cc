// The routes about the cluster and this server as a whole (docs/api.md):
// the dashboard page, health, who leads, metrics, utilisation, projects,
// and fault injection.

#include <cstdint>
#include <string>
#include <utility>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "loom/common/metrics_text.h"
#include "loom/server/chaos.h"
#include "loom/server/dashboard.h"
#include "loom/server/http_server.h"
#include "loom/server/route_util.h"

namespace loom {

void HttpServer::ClusterRoutes() {
  Handle("GET", "/v1/leader", [this](const Request&, Response& res) {
    const std::string leader =
        options_.leader_url ? options_.leader_url() : std::string();
    Reply(res, 200,
          {{"role", leading_ ? "leader" : "standby"},
           {"leader", leader.empty() ? nlohmann::json(nullptr)
                                     : nlohmann::json(leader)}});
  });
  Handle("GET", "/", [](const Request&, Response& res) {
    res.set_content(std::string(DashboardHtml()), "text/html; charset=utf-8");
  });
  Handle("GET", "/v1/utilization", [this](const Request&, Response& res) {
    nlohmann::json samples = nlohmann::json::array();
    absl::MutexLock lock(&metrics_mu_);
    for (const UtilizationSample& s : utilization_) {
      samples.push_back({{"t", absl::ToUnixSeconds(s.t)},
                         {"total", s.u.total_gpus},
                         {"allocated", s.u.allocated_gpus},
                         {"pending", s.u.pending_jobs},
                         {"running", s.u.running_jobs}});
    }
    Reply(res, 200,
          {{"every_s", absl::ToInt64Seconds(kUtilizationEvery)},
           {"samples", std::move(samples)}});
  });
  Handle("GET", "/metrics", [this](const Request&, Response& res) {
    res.set_content(Metrics(), std::string(kMetricsContentType));
  });
  Handle("GET", "/healthz", [this](const Request&, Response& res) {
    Reply(res, 200, {{"ok", true}, {"role", leading_ ? "leader" : "standby"}});
  });

  Handle("GET", "/v1/projects", [this](const Request&, Response& res) {
    Reply(res, 200, controller_->ListProjects(absl::Now()));
  });

  Handle("POST", "/v1/chaos", [this](const Request& req, Response& res) {
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
    ReplyResult(res,
                Chaos(*controller_, *body, [this](const std::string& node) {
                  return AgentAuthorization(node);
                }));
    Wake();
  });
}

std::string HttpServer::Metrics() {
  std::string text;
  MetricsWriter out(&text);
  const bool leading = leading_;
  if (leading) controller_->WriteMetrics(out, absl::Now());
  out.Family("loom_leader",
             "1 on the server that leads (schedules and launches), 0 on a "
             "standby.",
             MetricType::kGauge);
  out.Sample("loom_leader", {}, leading ? 1 : 0);
  absl::MutexLock lock(&metrics_mu_);
  out.Family("loom_scheduling_pass_seconds",
             "Duration of one scheduling round (liveness checks, restarts "
             "due, the scheduler's pass and writing its decisions).",
             MetricType::kHistogram);
  out.HistogramSample("loom_scheduling_pass_seconds", {}, pass_seconds_);
  if (http_ != nullptr) {
    const http::EventLoopServerStats h = http_->stats();
    out.Family("loom_http_connections",
               "Client connections open to the API (idle ones included).",
               MetricType::kGauge);
    out.Sample("loom_http_connections", {},
               static_cast<double>(h.connections_open));
    out.Family("loom_http_streams", "Streamed answers open (log follows).",
               MetricType::kGauge);
    out.Sample("loom_http_streams", {}, static_cast<double>(h.streams_open));
    out.Family("loom_http_refused_total",
               "What the HTTP front refused or cut before a handler ran: "
               "connections over a limit, malformed framing, deadlines "
               "missed (408, idle, write), callers over their limits "
               "(429/503); docs/server.md.",
               MetricType::kCounter);
    for (const auto& [reason, n] :
         {std::pair<const char*, int64_t>{"connection_limit",
                                          h.connections_refused},
          {"malformed", h.malformed},
          {"timeout", h.timeouts},
          {"throttled", h.throttled}}) {
      out.Sample("loom_http_refused_total", {{"reason", reason}},
                 static_cast<double>(n));
    }
  }
  out.Family("loom_api_requests_total",
             "API requests answered, by route, method and HTTP status.",
             MetricType::kCounter);
  for (const auto& [key, n] : requests_) {
    const auto& [route, method, status] = key;
    out.Sample("loom_api_requests_total",
               {{"route", route},
                {"method", method},
                {"status", std::to_string(status)}},
               static_cast<double>(n));
  }
  return text;
}

}  // namespace loom
