#include "loom/server/http_server.h"

#include <algorithm>
#include <cstdio>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "loom/common/job_id.h"
#include "loom/core/job_spec.h"
#include "loom/server/dashboard.h"
#include "loom/server/log_proxy.h"
#include "loom/server/redact.h"
#include "loom/server/submission_policy.h"
#include "loom/server/token_request.h"

namespace loom {
namespace {

using Request = http::HttpRequest;
using Response = http::HttpResponse;

// "request body:3:5: resources.gpu_model: reason" -> "resources.gpu_model".
std::string FieldOf(absl::string_view message) {
  std::vector<absl::string_view> parts = absl::StrSplit(message, ": ");
  if (parts.size() < 3) {
    // "tasks: must be positive" (no location)
    if (parts.size() == 2 && parts[0].find(' ') == absl::string_view::npos) {
      return std::string(parts[0]);
    }
    return "";
  }
  absl::string_view field = parts[1];
  if (field.find(' ') != absl::string_view::npos) return "";
  return std::string(field);
}

void Reply(Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  // Bytes that are not UTF-8 (a URL-decoded path quoted in an error, an
  // agent's message) become U+FFFD instead of throwing.
  res.set_content(
      body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
}

// The `{"code", "message", "field"?}` object of an error and its HTTP status.
nlohmann::json ErrorJson(const absl::Status& st, int* http_status) {
  int status = 500;
  std::string code = "internal";
  std::string message(st.message());
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
      status = 400;
      code = "invalid_argument";
      break;
    case absl::StatusCode::kNotFound:
      status = 404;
      code = "not_found";
      break;
    case absl::StatusCode::kFailedPrecondition:
      if (message.rfind("infeasible: ", 0) == 0) {
        status = 400;
        code = "infeasible";
        message = message.substr(12);
      } else {
        status = 409;
        code = "failed_precondition";
      }
      break;
    case absl::StatusCode::kPermissionDenied:
      status = 403;
      code = "permission_denied";
      break;
    case absl::StatusCode::kUnauthenticated:
      status = 401;
      code = "unauthenticated";
      break;
    case absl::StatusCode::kAlreadyExists:
      if (message.rfind("Idempotency-Key ", 0) == 0) {
        status = 422;  // the key was used for a different request
        code = "idempotency_key_reused";
      } else {
      status = 409;
      code = "already_exists";
      }
      break;
    case absl::StatusCode::kUnavailable:
      status = 503;
      code = "unavailable";
      break;
    case absl::StatusCode::kResourceExhausted:
      // A limit of the caller's (`limit: ...`); other exhaustion (a full
      // disk) stays a 500.
      if (message.rfind("limit: ", 0) == 0) {
        status = 429;
        code = "limit_exceeded";
        message = message.substr(7);
      }
      break;
    default:
      break;
  }
  nlohmann::json err = {{"code", code}, {"message", message}};
  if (code == "invalid_argument") {
    std::string field = FieldOf(st.message());
    if (!field.empty()) err["field"] = field;
  }
  *http_status = status;
  return err;
}

void ReplyError(Response& res, const absl::Status& st) {
  int status = 500;
  nlohmann::json err = ErrorJson(st, &status);
  Reply(res, status, {{"error", err}});
}

void ReplyResult(Response& res, const absl::StatusOr<nlohmann::json>& r,
                 int ok_status = 200) {
  if (r.ok()) {
    Reply(res, ok_status, *r);
  } else {
    ReplyError(res, r.status());
  }
}

// The filters of `GET /v1/jobs`.
absl::StatusOr<JobQuery> JobQueryOf(const Request& req) {
  JobQuery f;
  if (req.has_param("state")) {
    for (absl::string_view s :
         absl::StrSplit(req.get_param_value("state"), ',')) {
      absl::StatusOr<JobState> st = ParseJobState(std::string(s));
      if (!st.ok()) return st.status();
      f.states.push_back(*st);
    }
  }
  f.project = req.get_param_value("project");
  f.user = req.get_param_value("user");
  if (req.has_param("limit") &&
      !absl::SimpleAtoi(req.get_param_value("limit"), &f.limit)) {
    return absl::InvalidArgumentError("limit: not a number");
  }
  return f;
}

absl::StatusOr<nlohmann::json> JsonBody(const Request& req) {
  nlohmann::json j = nlohmann::json::parse(req.body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  return j;
}

// The job ID of a route (`ParseJobId`): one too large to be any job's is
// "no job N" (404, N as written), anything else that is not a canonical
// positive decimal is 400.
absl::StatusOr<JobId> JobIdOf(const Request& req) {
  const std::string text = req.matches[1];
  absl::StatusOr<int64_t> id = ParseJobId(text);
  if (id.status().code() == absl::StatusCode::kOutOfRange) {
    return absl::NotFoundError(absl::StrCat("no job ", text));
  }
  if (!id.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad job id: ", id.status().message()));
  }
  return *id;
}

// A job ID in a JSON body: an integer from 1 to 2^63-1 (an unsigned one
// beyond used to wrap to a negative ID).
absl::StatusOr<JobId> JobIdOfJson(const nlohmann::json& v) {
  if (v.is_number_unsigned() &&
      v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
    return absl::InvalidArgumentError(
        absl::StrCat(v.dump(), " is not a job ID (at most ", INT64_MAX, ")"));
  }
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(v.dump(), " is not a job ID"));
  }
  return v.get<int64_t>();
}

// Fault injection (`POST /v1/chaos`, docs/fault-tolerance.md): turns an
// action into a call to the agent that serves the node or task, and returns
// what to answer.
absl::StatusOr<nlohmann::json> Chaos(
    Controller& controller, const nlohmann::json& body,
    const std::function<std::string(const std::string&)>& agent_auth) {
  auto text_field = [&](const char* key) -> std::string {
    auto it = body.find(key);
    return it != body.end() && it->is_string() ? it->get<std::string>() : "";
  };
  const std::string action = text_field("action");
  static constexpr const char* kActions[] = {
      "kill_agent", "freeze_heartbeats", "thaw_heartbeats", "kill_task",
      "fail_gpu",   "heal_gpu",          "slow_agent",      "heal"};
  if (std::find(std::begin(kActions), std::end(kActions), action) ==
      std::end(kActions)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "action: '", action,
        "' is not one of kill_agent, freeze_heartbeats, thaw_heartbeats, "
        "kill_task, fail_gpu, heal_gpu, slow_agent, heal"));
  }
  auto int_field = [&](const char* key) -> absl::StatusOr<int64_t> {
    auto it = body.find(key);
    if (it == body.end() || !it->is_number_integer() ||
        (it->is_number_unsigned() &&
         it->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": required, a whole number, for ", action));
    }
    return it->get<int64_t>();
  };
  std::string node = text_field("node");
  std::string path = "/v1/faults";
  nlohmann::json fault;
  if (action == "kill_task") {
    absl::StatusOr<int64_t> job = int_field("job");
    if (!job.ok()) return job.status();
    int64_t task = 0;
    if (body.contains("task")) {
      absl::StatusOr<int64_t> t = int_field("task");
      if (!t.ok()) return t.status();
      task = *t;
    }
    absl::StatusOr<nlohmann::json> j = controller.GetJob(*job, absl::Now());
    if (!j.ok()) return j.status();
    std::string task_id;
    if ((*j)["placement"].is_object()) {
      for (const nlohmann::json& t : (*j)["placement"]["tasks"]) {
        if (t.value("index", -1) == task && t.value("state", "") == "running") {
          node = t.value("node", "");
          task_id = t.value("task_id", "");
        }
      }
    }
    if (task_id.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", *job, " has no running task ", task));
    }
    path = absl::StrCat("/v1/tasks/", task_id, "/stop?node=", node);
    fault = {{"signal", 9}, {"grace_ms", 0}};
  } else {
    if (node.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("node: required for ", action));
    }
    fault["node"] = node;
    if (action == "kill_agent") {
      fault["exit"] = true;
    } else if (action == "freeze_heartbeats" || action == "thaw_heartbeats") {
      fault["drop_heartbeats"] = action == "freeze_heartbeats";
    } else if (action == "fail_gpu" || action == "heal_gpu") {
      absl::StatusOr<int64_t> gpu = int_field("gpu");
      if (!gpu.ok()) return gpu.status();
      fault[action] = *gpu;
    } else if (action == "slow_agent") {
      absl::StatusOr<int64_t> ms = int_field("delay_ms");
      if (!ms.ok()) return ms.status();
      fault["delay_ms"] = *ms;
    } else {  // heal
      fault["clear"] = true;
    }
  }
  absl::StatusOr<std::string> address = controller.NodeAddress(node);
  if (!address.ok()) return address.status();
  httplib::Client agent("http://" + *address);
  agent.set_connection_timeout(3);
  agent.set_read_timeout(10);
  httplib::Headers headers;
  if (const std::string key = agent_auth(node); !key.empty()) {
    headers.emplace("Authorization", key);
  }
  httplib::Result r =
      agent.Post(path, headers, fault.dump(), "application/json");
  if (!r) {
    return absl::UnavailableError(
        absl::StrCat("the agent of ", node, " at ", *address,
                     " cannot be reached: ", httplib::to_string(r.error())));
  }
  nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status >= 300) {
    std::string message = r->body.substr(0, 300);
    if (answer.is_object() && answer.contains("error") &&
        answer["error"].is_object()) {
      message = answer["error"].value("message", message);
    }
    return r->status == 400   ? absl::InvalidArgumentError(message)
           : r->status == 404 ? absl::NotFoundError(message)
                              : absl::FailedPreconditionError(absl::StrCat(
                                    "the agent refused: ", message));
  }
  std::fprintf(stderr, "loom server: chaos: %s on %s%s\n", action.c_str(),
               node.c_str(),
               action == "kill_task" ? (" (" + path + ")").c_str() : "");
  return nlohmann::json{{"ok", true}, {"action", action}, {"node", node}};
}

}  // namespace

const std::vector<RouteRule>& RouteTable() {
  static const std::vector<RouteRule> kTable = {
      {"GET", "/", Access::kPublic},
      {"GET", "/healthz", Access::kPublic},
      {"GET", "/v1/leader", Access::kPublic},
      {"GET", "/metrics", Access::kOperator},
      {"GET", "/v1/utilization", Access::kHuman},
      {"GET", "/v1/whoami", Access::kAnyone},
      {"POST", "/v1/jobs", Access::kHuman},
      {"GET", "/v1/jobs", Access::kHuman},
      {"POST", "/v1/jobs/release", Access::kHuman},
      {"GET", "/v1/jobs/{id}", Access::kHuman},
      {"GET", "/v1/jobs/{id}/events", Access::kHuman},
      {"POST", "/v1/jobs/{id}/cancel", Access::kHuman},
      {"POST", "/v1/jobs/{id}/release", Access::kHuman},
      {"POST", "/v1/jobs/{id}/checkpoint", Access::kJobOrHuman},
      {"GET", "/v1/jobs/{id}/logs", Access::kHuman},
      {"GET", "/v1/nodes", Access::kHuman},
      {"GET", "/v1/nodes/{name}", Access::kHuman},
      {"POST", "/v1/nodes/{name}/cordon", Access::kOperator},
      {"POST", "/v1/nodes/{name}/uncordon", Access::kOperator},
      {"POST", "/v1/nodes/{name}/drain", Access::kOperator},
      {"POST", "/v1/nodes/{name}/revoke", Access::kAdmin},
      {"GET", "/v1/projects", Access::kHuman},
      {"POST", "/v1/chaos", Access::kOperator},
      {"GET", "/v1/tokens", Access::kAdmin},
      {"POST", "/v1/tokens", Access::kAdmin},
      {"POST", "/v1/tokens/{token}/revoke", Access::kAdmin},
      {"POST", "/v1/agents/register", Access::kAgent},
      {"POST", "/v1/agents/heartbeat", Access::kNode},
  };
  return kTable;
}

namespace {

// Whether `path` (no query) fits `route`: "{id}" is a canonical job id (1
// to 2^63-1, decimal, no leading zero), "{token}" lowercase hex, "{name}"
// any one non-empty segment. With `captures`, what the placeholders
// matched, percent-decoded.
bool RouteMatches(absl::string_view route, absl::string_view path,
                  std::vector<std::string>* captures) {
  std::vector<absl::string_view> want =
      absl::StrSplit(route, '/', absl::SkipEmpty());
  std::vector<absl::string_view> have = absl::StrSplit(path, '/');
  // "/v1/jobs" and "/": a leading '/' gives one empty first segment; a
  // trailing '/' or "//" give empty ones, which no route has.
  if (have.empty() || !have.front().empty()) return false;
  have.erase(have.begin());
  if (path == "/") have.clear();
  if (want.size() != have.size()) return false;
  std::vector<std::string> got;
  for (size_t i = 0; i < want.size(); ++i) {
    const absl::string_view w = want[i], h = have[i];
    if (w == "{id}") {
      JobId id = 0;
      if (h.empty() || h.size() > 19 || h[0] == '0' ||
          h.find_first_not_of("0123456789") != absl::string_view::npos ||
          !absl::SimpleAtoi(h, &id) || id <= 0) {
        return false;
      }
      got.emplace_back(h);
    } else if (w == "{token}") {
      if (h.empty() || h.size() > 64 ||
          h.find_first_not_of("0123456789abcdef") != absl::string_view::npos) {
        return false;
      }
      got.emplace_back(h);
    } else if (w == "{name}") {
      if (h.empty()) return false;
      std::string decoded = http::PercentDecode(h, false);
      if (decoded.empty() || decoded.find('/') != std::string::npos) {
        return false;
      }
      got.push_back(std::move(decoded));
    } else if (w != h) {
      return false;
    }
  }
  if (captures != nullptr) *captures = std::move(got);
  return true;
}

absl::string_view PathOf(std::string_view full) {
  absl::string_view path(full.data(), full.size());
  const size_t q = path.find('?');
  if (q != absl::string_view::npos) path = path.substr(0, q);
  return path;
}

}  // namespace

const RouteRule* FindRoute(std::string_view method, std::string_view full,
                           std::vector<std::string>* captures) {
  const absl::string_view path = PathOf(full);
  for (const RouteRule& r : RouteTable()) {
    if (r.method == method && RouteMatches(r.route, path, captures)) return &r;
  }
  return nullptr;
}

bool PathHasRoute(std::string_view full) {
  const absl::string_view path = PathOf(full);
  for (const RouteRule& r : RouteTable()) {
    if (RouteMatches(r.route, path, nullptr)) return true;
  }
  return false;
}

std::string RouteOf(std::string_view full) {
  absl::string_view path = PathOf(full);
  if (path.empty()) path = "/";
  // Literal routes first ("/v1/jobs/release" over "/v1/jobs/{id}").
  for (const RouteRule& r : RouteTable()) {
    if (RouteMatches(r.route, path, nullptr)) return r.route;
  }
  return "other";
}

HttpServer::HttpServer(Controller* controller, HttpServerOptions options)
    : controller_(controller), options_(std::move(options)) {
  pass_seconds_ =
      *Histogram::Create({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                          0.025, 0.05, 0.1, 0.25, 0.5, 1});
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

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Routes() {
  Handle("GET", "/v1/whoami", [this](const Request& req, Response& res) {
    const Principal p = PrincipalOf(req);
    nlohmann::json j = {{"role", std::string(RoleName(p.role))},
                        {"user", p.user},
                        {"projects", p.projects},
                        {"token", p.token_id}};
    if (p.role == Role::kJob) j["job"] = p.job;
    Reply(res, 200, j);
  });
  Handle("GET", "/v1/tokens", [this](const Request&, Response& res) {
    nlohmann::json out = nlohmann::json::array();
    if (options_.auth != nullptr) {
      for (const TokenRecord& t : options_.auth->List()) {
        out.push_back(TokenRecordToJson(t, /*with_hash=*/false));
      }
    }
    Reply(res, 200, {{"tokens", std::move(out)}});
  });
  Handle("POST", "/v1/tokens", [this](const Request& req, Response& res) {
    if (options_.auth == nullptr) {
      return ReplyError(res,
                        absl::FailedPreconditionError("authentication is off"));
    }
    absl::StatusOr<nlohmann::json> body = JsonBody(req);
    if (!body.ok()) return ReplyError(res, body.status());
           absl::StatusOr<TokenRequest> t =
               ParseTokenRequest(*body, controller_->cluster());
           if (!t.ok()) return ReplyError(res, t.status());
    absl::StatusOr<std::pair<TokenRecord, std::string>> made =
               options_.auth->Create(*t, absl::Now());
    if (!made.ok()) return ReplyError(res, made.status());
           nlohmann::json j =
               TokenRecordToJson(made->first, /*with_hash=*/false);
    j["token"] = made->second;  // the only time it is shown
    Reply(res, 201, j);
  });
  Handle("POST", "/v1/tokens/{token}/revoke",
         [this](const Request& req, Response& res) {
           if (options_.auth == nullptr) {
             return ReplyError(
                 res, absl::FailedPreconditionError("authentication is off"));
           }
           absl::StatusOr<TokenRecord> t =
               options_.auth->Revoke(req.matches[1], absl::Now());
           if (!t.ok()) return ReplyError(res, t.status());
           Reply(res, 200, TokenRecordToJson(*t, /*with_hash=*/false));
         });
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

  Handle("POST", "/v1/jobs", [this](const Request& req, Response& res) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(req.body, "request body");
    if (!spec.ok()) return ReplyError(res, spec.status());
           // Without authentication, everyone is an admin (X-Loom-User
           // names the user).
      const Principal p = PrincipalOf(req);
           if (absl::Status st =
                   CheckSubmission(p, controller_->cluster(), &*spec);
               !st.ok()) {
             return ReplyError(res, st);
    }
           const std::string user = p.user;
    bool created = false;
    std::string key = req.get_header_value("Idempotency-Key");
    if (key.size() > 128) {
      return ReplyError(
          res, absl::InvalidArgumentError("Idempotency-Key: at most 128 "
                                          "characters"));
    }
    // Keys are per user: another user's key never finds (and shows)
    // someone else's job.
    if (!key.empty() && options_.auth != nullptr) {
      key = absl::StrCat(PrincipalOf(req).user, ":", key);
    }
    absl::StatusOr<nlohmann::json> job =
        controller_->Submit(*std::move(spec), user, absl::Now(), key, &created);
    // A retried submission (same Idempotency-Key) gets its job with 200.
    ReplyResult(res, job, created ? 201 : 200);
    if (created) Wake();
  });
  Handle("GET", "/v1/jobs", [this](const Request& req, Response& res) {
    absl::StatusOr<JobQuery> f = JobQueryOf(req);
    if (!f.ok()) return ReplyError(res, f.status());
    nlohmann::json jobs = controller_->ListJobs(*f, absl::Now());
    const Principal p = PrincipalOf(req);
    for (nlohmann::json& j : jobs["jobs"]) Redact(p, j);
    Reply(res, 200, jobs);
  });
  Handle("GET", "/v1/jobs/{id}", [this](const Request& req, Response& res) {
    absl::StatusOr<JobId> id = JobIdOf(req);
    if (!id.ok()) return ReplyError(res, id.status());
    absl::StatusOr<nlohmann::json> job = controller_->GetJob(*id, absl::Now());
    if (job.ok()) Redact(PrincipalOf(req), *job);
    ReplyResult(res, job);
  });
  Handle("GET", "/v1/jobs/{id}/events",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobIdOf(req);
           if (!id.ok()) return ReplyError(res, id.status());
           absl::StatusOr<nlohmann::json> job =
               controller_->GetJob(*id, absl::Now());
           if (!job.ok()) return ReplyError(res, job.status());
           Redact(PrincipalOf(req), *job);
           Reply(res, 200, {{"events", (*job)["events"]}});
         });
  Handle("POST", "/v1/jobs/{id}/cancel",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobIdOf(req);
           if (!id.ok()) return ReplyError(res, id.status());
           if (absl::Status st = MayTouchJob(PrincipalOf(req), *id, false);
               !st.ok()) {
             return ReplyError(res, st);
           }
           ReplyResult(res, controller_->Cancel(*id, absl::Now()));
           Wake();
         });
  Handle("POST", "/v1/jobs/{id}/checkpoint",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobIdOf(req);
           if (!id.ok()) return ReplyError(res, id.status());
           if (absl::Status st = MayTouchJob(PrincipalOf(req), *id, true);
               !st.ok()) {
             return ReplyError(res, st);
           }
           std::optional<int64_t> step;
           if (!req.body.empty()) {
             nlohmann::json body =
                 nlohmann::json::parse(req.body, nullptr, false);
             if (body.is_discarded() || !body.is_object()) {
               return ReplyError(res, absl::InvalidArgumentError(
                                          "body: must be a JSON object, e.g. "
                                          "{\"step\": 120}, or empty"));
             }
             if (body.contains("step")) {
               if (!body["step"].is_number_integer() ||
                   body["step"].get<int64_t>() < 0) {
                 return ReplyError(res,
                                   absl::InvalidArgumentError(
                                       "step: must be a non-negative integer"));
               }
               step = body["step"].get<int64_t>();
             }
           }
           ReplyResult(res, controller_->Checkpoint(*id, step, absl::Now()));
         });
  Handle("POST", "/v1/jobs/release", [this](const Request& req, Response& res) {
    // {"ids": [1, 2, ...]}: one write for all (`loom release --all`).
    constexpr size_t kMaxIds = 100000;
    nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("ids") ||
        !body["ids"].is_array()) {
      return ReplyError(res, absl::InvalidArgumentError(
                                 "ids: the body must be an object with a list "
                                 "of job IDs under `ids`"));
    }
    if (body["ids"].size() > kMaxIds) {
      return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                 "ids: at most ", kMaxIds, " per request")));
    }
    // Each id once (in the order given): naming a job 5,000 times costs
    // what naming it once does.
    std::vector<JobId> ids;
    absl::flat_hash_set<JobId> seen;
    for (const nlohmann::json& v : body["ids"]) {
      absl::StatusOr<JobId> id = JobIdOfJson(v);
      if (!id.ok()) {
        return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                       "ids: ", id.status().message())));
      }
      if (seen.insert(*id).second) ids.push_back(*id);
    }
    // Another user's jobs are refused one by one.
    const Principal p = PrincipalOf(req);
    std::vector<JobId> mine;
    std::map<JobId, absl::Status> refused;
    for (JobId id : ids) {
      absl::Status st = MayTouchJob(p, id, false);
      if (st.ok()) {
        mine.push_back(id);
      } else {
        refused[id] = st;
      }
    }
    std::vector<absl::Status> mine_errors;
    controller_->ReleaseMany(mine, absl::Now(), &mine_errors);
    std::vector<absl::Status> errors;
    for (size_t i = 0, k = 0; i < ids.size(); ++i) {
      auto r = refused.find(ids[i]);
      errors.push_back(r != refused.end() ? r->second : mine_errors[k++]);
    }
    nlohmann::json released = nlohmann::json::array();
    nlohmann::json failed = nlohmann::json::array();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (errors[i].ok()) {
        released.push_back(ids[i]);
      } else {
        int status = 0;
        failed.push_back(
            {{"id", ids[i]}, {"error", ErrorJson(errors[i], &status)}});
      }
    }
    Reply(res, 200, {{"released", released}, {"errors", failed}});
    Wake();
  });
  Handle("POST", "/v1/jobs/{id}/release",
         [this](const Request& req, Response& res) {
           absl::StatusOr<JobId> id = JobIdOf(req);
           if (!id.ok()) return ReplyError(res, id.status());
           if (absl::Status st = MayTouchJob(PrincipalOf(req), *id, false);
               !st.ok()) {
             return ReplyError(res, st);
           }
           ReplyResult(res, controller_->Release(*id, absl::Now()));
           Wake();
         });
  Handle(
      "GET", "/v1/jobs/{id}/logs", [this](const Request& req, Response& res) {
        absl::StatusOr<JobId> id = JobIdOf(req);
        if (!id.ok()) return ReplyError(res, id.status());
        // Logs are their owner's (and an admin's): not an operator's.
        if (absl::Status st = MayTouchJob(PrincipalOf(req), *id, false);
            !st.ok()) {
          return ReplyError(res, st);
        }
        // Numbers only: they are passed on to the agent's URL.
        int64_t task = 0, process = 0, offset = 0;
        for (auto [name, value] :
             {std::pair<const char*, int64_t*>{"task", &task},
              {"process", &process},
              {"offset", &offset}}) {
          if (req.has_param(name) &&
              (!absl::SimpleAtoi(req.get_param_value(name), value) ||
               *value < 0)) {
            return ReplyError(res, absl::InvalidArgumentError(absl::StrCat(
                                       name, ": not a non-negative number")));
          }
        }
        if (task > INT32_MAX) {
          return ReplyError(res,
                            absl::InvalidArgumentError("task: out of range"));
        }
        absl::StatusOr<Controller::TaskLogSource> where =
            controller_->TaskLogs(*id, static_cast<int>(task));
        if (!where.ok()) return ReplyError(res, where.status());
        TaskLogRequest r;
        r.address = where->address;
        r.node = where->node;
        r.task_id = where->task_id;
        r.agent_auth = AgentAuthorization(where->node);
        r.stream = req.has_param("stream") ? req.get_param_value("stream")
                                           : std::string("stdout");
        if (r.stream != "stdout" && r.stream != "stderr") {
          return ReplyError(res, absl::InvalidArgumentError(
                                     "stream: must be stdout or stderr"));
        }
        r.process = process;
        r.offset = offset;
        const std::string follow = req.get_param_value("follow");
        r.follow = follow == "1" || follow == "true";
        const JobId job = *id;
        const std::string task_id = where->task_id;
        const std::string authorization = req.get_header_value("Authorization");
        ServeTaskLogs(
            r,
            [this, job, task_id] {
              return controller_->TaskMayWrite(job, task_id);
            },
            [this, authorization] {
              return options_.auth == nullptr ||
                     options_.auth->Authenticate(authorization, absl::Now())
                         .ok();
            },
            LogProxyOptions(), res);
      });

  Handle("GET", "/v1/nodes", [this](const Request&, Response& res) {
    Reply(res, 200, controller_->ListNodes(absl::Now()));
  });
  Handle("GET", "/v1/nodes/{name}", [this](const Request& req, Response& res) {
    ReplyResult(res, controller_->GetNode(req.matches[1], absl::Now()));
  });
  for (const std::string op : {"cordon", "uncordon", "drain"}) {
    Handle("POST", absl::StrCat("/v1/nodes/{name}/", op),
           [this, op](const Request& req, Response& res) {
             ReplyResult(res, controller_->SetNodeMode(req.matches[1], op,
                                                       absl::Now()));
             Wake();
           });
  }
  Handle("POST", "/v1/nodes/{name}/revoke",
         [this](const Request& req, Response& res) {
           if (options_.auth == nullptr) {
             return ReplyError(
                 res, absl::FailedPreconditionError("authentication is off"));
           }
           const std::string node = req.matches[1];
           absl::Status st = options_.auth->RevokeNode(node, absl::Now());
           if (!st.ok()) return ReplyError(res, st);
           Reply(res, 200, {{"node", node}, {"revoked", true}});
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
  Handle("POST", "/v1/agents/register",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           const std::string node = body->value("name", std::string());
           std::optional<JoinedNode> joined;
           Principal p;
           if (options_.auth != nullptr) {
             p = PrincipalOf(req);
             if (p.role == Role::kNode && p.user != node) {
               return ReplyError(res, absl::PermissionDeniedError(absl::StrCat(
                                          "this credential is node ", p.user,
                                          "'s, not ", node, "'s")));
             }
             if (!controller_->GetNode(node, absl::Now()).ok()) {
               return ReplyError(
                   res, absl::NotFoundError(absl::StrCat("no node '", node,
                                                         "' in the cluster "
                                                         "spec")));
             }
             // Before the node's address changes: a join token takes no
             // node that has a live credential (409).
             if (p.role == Role::kJoin) {
               absl::StatusOr<JoinedNode> j =
                   options_.auth->JoinNode(p, node, absl::Now());
               if (!j.ok()) return ReplyError(res, j.status());
               joined = *std::move(j);
             }
           }
           absl::StatusOr<nlohmann::json> r =
               controller_->Register(*body, absl::Now());
           if (!r.ok() && joined) {
             // Nobody got the credential: the token keeps its use.
             (void)options_.auth->UndoJoin(p, node, *joined, absl::Now());
           }
           if (r.ok() && options_.auth != nullptr) {
             // The key this server shows the agent on every call (new with
             // every join), and, for a node that joined just now, the
             // credential of its heartbeats.
             (*r)["agent_key"] = options_.auth->AgentKey(node);
             if (joined) (*r)["credential"] = joined->credential;
           }
           ReplyResult(res, r);
           Wake();
         });
  Handle("POST", "/v1/agents/heartbeat",
         [this](const Request& req, Response& res) {
           absl::StatusOr<nlohmann::json> body = JsonBody(req);
           if (!body.ok()) return ReplyError(res, body.status());
           if (options_.auth != nullptr &&
               PrincipalOf(req).user != body->value("name", std::string())) {
             return ReplyError(res, absl::PermissionDeniedError(
                                        "this credential is another node's"));
           }
           absl::StatusOr<nlohmann::json> r =
               controller_->Heartbeat(*body, absl::Now());
           ReplyResult(res, r);
           if (r.ok() && !(*r)["ack"].empty()) Wake();
         });
}

absl::StatusOr<int> HttpServer::Start() {
  Routes();
  http::EventLoopServerOptions o = options_.http;
  o.host = options_.host;
  o.port = options_.port;
  o.tls_cert = options_.tls_cert;
  o.tls_key = options_.tls_key;
  http_ = std::make_unique<http::EventLoopServer>(
      std::move(o), [this](Request& req, Response& res) { Serve(req, res); },
      [this](const Request& req) { return Classify(req); });
  absl::StatusOr<int> port = http_->Start();
  if (!port.ok()) return port.status();
  if (controller_ != nullptr) StartWorkers();
  return *port;
}

http::Dispatch HttpServer::Classify(const Request& req) const {
  http::Dispatch d;
  // The agent protocol has threads of its own: no user request, however
  // slow or many, delays a heartbeat (agents fence after `fence_after`).
  d.lane = absl::StartsWith(req.path, "/v1/agents/") ? http::Lane::kPriority
                                                     : http::Lane::kUser;
  // The caller, for the per-caller limits: the id part of its token
  // ("loom.<id>.<secret>", "loomjob.<job>.<mac>"), else its address. Not
  // verified here (no I/O on the event loop): a made-up id only shares a
  // queue with that id's requests, which are refused with 401 at once.
  const std::string header = req.get_header_value("authorization");
  absl::string_view auth = header;
  std::string key;
  if (absl::ConsumePrefix(&auth, "Bearer ")) {
    std::vector<absl::string_view> parts = absl::StrSplit(auth, '.');
    if (parts.size() == 3 && parts[1].size() <= 32) {
      key = absl::StrCat(parts[0].substr(0, 8), ":", parts[1]);
    }
  }
  d.principal = key.empty() ? absl::StrCat("addr:", req.remote_addr) : key;
  return d;
}

void HttpServer::Serve(Request& req, Response& res) {
  std::vector<std::string> captures;
  const RouteRule* rule = FindRoute(req.method, req.path, &captures);
  auto count = [&] {
    absl::MutexLock lock(&metrics_mu_);
    ++requests_[{RouteOf(req.path), req.method, res.status}];
  };
  if (rule == nullptr) {
    // No rule, no handler: nothing unlisted is ever served (or allowed).
    const bool other_method = PathHasRoute(req.path);
    if (other_method) {
      std::string allow;
      for (const RouteRule& r : RouteTable()) {
        if (RouteMatches(r.route, PathOf(req.path), nullptr)) {
          absl::StrAppend(&allow, allow.empty() ? "" : ", ", r.method);
        }
      }
      res.set_header("Allow", allow);
    }
    Reply(
        res, other_method ? 405 : 404,
        {{"error",
          {{"code", other_method ? "method_not_allowed" : "not_found"},
           {"message", absl::StrCat(other_method ? "method " : "no route ",
                                    req.method, " ", req.path,
                                    other_method ? " is not allowed" : "")}}}});
    return count();
  }
  req.matches.clear();
  req.matches.push_back(req.path);
  for (std::string& c : captures) req.matches.push_back(std::move(c));
  if (!Authorize(req, res) || Redirect(req, res)) return count();
  auto it = handlers_.find(static_cast<size_t>(rule - RouteTable().data()));
  if (it == handlers_.end()) {
    Reply(res, 404,
          {{"error",
            {{"code", "not_found"},
             {"message",
              absl::StrCat("no route ", req.method, " ", req.path)}}}});
    return count();
  }
  try {
    it->second(req, res);
  } catch (const std::exception& e) {
    res = Response();
    Reply(res, 500, {{"error", {{"code", "internal"}, {"message", e.what()}}}});
  }
  count();
}

void HttpServer::StartWorkers() {
  leading_ = true;
  scheduler_thread_ = std::thread([this] { SchedulerLoop(); });
  for (int i = 0; i < options_.dispatch_threads; ++i) {
    dispatchers_.emplace_back([this] { DispatchLoop(); });
  }
}

void HttpServer::Lead(Controller* controller) {
  if (leading_ || stopping_) return;
  controller_ = controller;
  StartWorkers();
}

void HttpServer::Handle(const std::string& method, const std::string& route,
                        Handler handler) {
  bool known = false;
  for (const RouteRule& r : RouteTable()) {
    known |= r.method == method && r.route == route;
  }
  if (!known) {
    std::fprintf(stderr,
                 "loom server: route %s %s is not in RouteTable(); every "
                 "route needs an access rule\n",
                 method.c_str(), route.c_str());
    std::abort();
  }
  for (size_t i = 0; i < RouteTable().size(); ++i) {
    const RouteRule& r = RouteTable()[i];
    if (r.method == method && r.route == route) {
      handlers_[i] = std::move(handler);
    }
  }
}

Principal HttpServer::PrincipalOf(const Request& req) const {
  if (options_.auth == nullptr) {
    Principal admin;
    admin.role = Role::kAdmin;
    admin.user = req.has_header("X-Loom-User")
                     ? req.get_header_value("X-Loom-User")
                     : std::string("default");
    admin.projects = {"*"};
    return admin;
  }
  absl::StatusOr<Principal> p = options_.auth->Authenticate(
      req.get_header_value("Authorization"), absl::Now());
  // `Authorize` let the request through, so this holds (a token revoked in
  // between gets the rights of nobody).
  return p.ok() ? *p : Principal{.role = Role::kJoin};
}

bool HttpServer::Authorize(const Request& req, Response& res) {
  if (options_.auth == nullptr) return true;
  const RouteRule* rule = FindRoute(req.method, req.path);
  if (rule != nullptr && rule->access == Access::kPublic) return true;
  absl::StatusOr<Principal> p = options_.auth->Authenticate(
      req.get_header_value("Authorization"), absl::Now());
  if (!p.ok()) {
    if (p.status().code() == absl::StatusCode::kUnavailable) {
      ReplyError(res, p.status());
      return false;
    }
    res.set_header("WWW-Authenticate", "Bearer realm=\"loom\"");
    Reply(res, 401,
          {{"error",
            {{"code", "unauthenticated"},
             {"message", std::string(p.status().message())}}}});
    return false;
  }
  if (rule == nullptr) return false;  // `Serve` answered 404 already
  bool allowed = false;
  const Role role = p->role;
  const bool human =
      role == Role::kAdmin || role == Role::kOperator || role == Role::kUser;
  switch (rule->access) {
    case Access::kPublic:
    case Access::kAnyone:
      allowed = true;
      break;
    case Access::kHuman:
      allowed = human;
      break;
    case Access::kJobOrHuman:
      allowed = human || role == Role::kJob;
      break;
    case Access::kOperator:
      allowed = role == Role::kAdmin || role == Role::kOperator;
      break;
    case Access::kAdmin:
      allowed = role == Role::kAdmin;
      break;
    case Access::kAgent:
      allowed = role == Role::kJoin || role == Role::kNode;
      break;
    case Access::kNode:
      allowed = role == Role::kNode;
      break;
  }
  if (!allowed) {
    Reply(res, 403,
          {{"error",
            {{"code", "permission_denied"},
             {"message",
              absl::StrCat("a ", std::string(RoleName(role)), " token (",
                           p->user.empty() ? p->token_id : p->user,
                           ") may not ", req.method, " ", rule->route)}}}});
    return false;
  }
  return true;
}

absl::Status HttpServer::MayTouchJob(const Principal& p, JobId id,
                                     bool allow_job_token) {
  if (p.admin()) return absl::OkStatus();
  if (p.role == Role::kJob) {
    if (allow_job_token && p.job == id) return absl::OkStatus();
    return absl::PermissionDeniedError(
        absl::StrCat("job ", p.job,
                     "'s token may only report its own "
                     "checkpoints"));
  }
  absl::StatusOr<std::string> user = controller_->JobUser(id);
  if (!user.ok()) return user.status();
  const std::string& owner = *user;
  if (owner == p.user) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat("job ", id, " belongs to ", owner, ", not to ", p.user));
}

void HttpServer::Redact(const Principal& p, nlohmann::json& job) {
  RedactJobFor(p, job);
}

std::string HttpServer::AgentAuthorization(const std::string& node) const {
  if (options_.auth == nullptr || node.empty()) return "";
  return absl::StrCat("Bearer ", options_.auth->AgentKey(node));
}

bool HttpServer::ServeStandbyRead(const Request& req, Response& res) {
  if (options_.standby_reads == nullptr || req.method != "GET") return false;
  const StandbyReader& reads = *options_.standby_reads;
  absl::string_view path = req.path;
  if (path == "/v1/jobs") {
    absl::StatusOr<JobQuery> f = JobQueryOf(req);
    absl::StatusOr<nlohmann::json> jobs =
        f.ok() ? reads.ListJobs(*f)
               : absl::StatusOr<nlohmann::json>(f.status());
    if (jobs.ok()) {
      const Principal p = PrincipalOf(req);
      for (nlohmann::json& j : (*jobs)["jobs"]) Redact(p, j);
    }
    ReplyResult(res, jobs);
  } else if (absl::ConsumePrefix(&path, "/v1/jobs/")) {
    const bool events = absl::ConsumeSuffix(&path, "/events");
    absl::StatusOr<int64_t> parsed = ParseJobId(std::string(path));
    if (!parsed.ok()) {
      return false;  // logs, other job routes and bad IDs go to the leader
    }
    const JobId id = *parsed;
    absl::StatusOr<nlohmann::json> job = reads.GetJob(id);
    if (job.ok()) Redact(PrincipalOf(req), *job);
    if (job.ok() && events) {
      ReplyResult(res, nlohmann::json{{"events", (*job)["events"]}});
    } else {
      ReplyResult(res, job);
    }
  } else {
    return false;
  }
  res.set_header("X-Loom-Served-By", "standby");
  return true;
}

bool HttpServer::Redirect(const Request& req, Response& res) {
  if (leading_) return false;
  if (req.path == "/healthz" || req.path == "/metrics" ||
      req.path == "/v1/leader") {
    return false;
  }
  if (ServeStandbyRead(req, res)) return true;
  const std::string leader =
      options_.leader_url ? options_.leader_url() : std::string();
  if (leader.empty()) {
    res.set_header("Retry-After", "1");
    Reply(res, 503,
          {{"error",
            {{"code", "no_leader"},
             {"message",
              "this server is a standby and no leader is elected yet; "
              "retry in a moment"}}}});
    return true;
  }
  // 307 keeps the method and body, so a client may simply follow it; loom's
  // own clients try the next server of their list instead.
  res.set_header("Location", leader + req.target);
  res.set_header("X-Loom-Leader", leader);
  Reply(res, 307,
        {{"error",
          {{"code", "not_leader"},
           {"message",
            absl::StrCat("this server is a standby; the leader is ", leader)},
           {"leader", leader}}}});
  return true;
}

void HttpServer::Stop() {
  if (stopping_.exchange(true)) return;
  if (http_ != nullptr) http_->Stop();
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  wake_.notify_all();
  work_.notify_all();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  for (std::thread& t : dispatchers_) {
    if (t.joinable()) t.join();
  }
}

void HttpServer::Wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  wake_.notify_one();
}

void HttpServer::SchedulerLoop() {
  const auto tick = absl::ToChronoMilliseconds(options_.tick);
  absl::Time last_pass = absl::InfinitePast();
  while (!stopping_) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, tick, [this] { return woken_; });
    }
    const absl::Duration since = absl::Now() - last_pass;
    if (since < options_.min_pass_interval) {
      std::this_thread::sleep_for(
          absl::ToChronoMicroseconds(options_.min_pass_interval - since));
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      woken_ = false;
    }
    if (stopping_) break;
    last_pass = absl::Now();
    controller_->Tick(absl::Now());
    {
      const absl::Time now = absl::Now();
      bool sample;
      {
        absl::MutexLock lock(&metrics_mu_);
        sample = utilization_.empty() ||
                 now - utilization_.back().t >= kUtilizationEvery;
      }
      const Controller::Utilization u = sample
                                            ? controller_->CurrentUtilization()
                                            : Controller::Utilization{};
      absl::MutexLock lock(&metrics_mu_);
      pass_seconds_.Observe(absl::ToDoubleSeconds(now - last_pass));
      if (sample) {
        utilization_.push_back({now, u});
        if (utilization_.size() > kUtilizationSamples) utilization_.pop_front();
      }
    }
    std::vector<AgentAction> actions = controller_->TakeActions();
    if (actions.empty()) continue;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (AgentAction& a : actions) queue_.push_back(std::move(a));
    }
    work_.notify_all();
  }
}

void HttpServer::DispatchLoop() {
  // One keep-alive client per agent address and thread.
  std::map<std::string, std::unique_ptr<httplib::Client>> clients;
  while (true) {
    AgentAction a;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (stopping_) return;
      a = std::move(queue_.front());
      queue_.pop_front();
    }
    std::unique_ptr<httplib::Client>& c = clients[a.address];
    if (c == nullptr) {
      c = std::make_unique<httplib::Client>("http://" + a.address);
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);

      c->set_connection_timeout(3);
      c->set_read_timeout(30);
    }
    const std::string path =
        a.kind == AgentAction::Kind::kLaunch
            ? std::string("/v1/tasks")
            : absl::StrCat("/v1/tasks/", a.task_id, "/stop?node=", a.node);
    httplib::Headers headers;
    if (const std::string key = AgentAuthorization(a.node); !key.empty()) {
      headers.emplace("Authorization", key);
    }
    if (a.kind == AgentAction::Kind::kLaunch && options_.auth != nullptr &&
        a.body.contains("env") && a.body["env"].is_object()) {
      // The job's own token, for `loom checkpoint` inside the task. Added
      // here, not in the controller, so that it is never stored.
      a.body["env"]["LOOM_TOKEN"] = options_.auth->JobToken(a.job, a.run);
    }
    httplib::Result r =
        c->Post(path, headers, a.body.dump(), "application/json");
    absl::Status st;
    if (!r) {
      st = absl::UnavailableError(
          absl::StrCat("agent ", a.node, " at ", a.address,
                       " unreachable: ", httplib::to_string(r.error())));
      clients.erase(a.address);
    } else if (r->status >= 300 &&
               !(a.kind == AgentAction::Kind::kLaunch && r->status == 409)) {
      // The agent's own message when it sent one, else the start of its
      // answer; as UTF-8 (whatever answers at an agent's address).
      std::string what = r->body.substr(0, 300);
      nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
      if (answer.is_object() && answer.contains("error") &&
          answer["error"].is_object() &&
          answer["error"].value("message", nlohmann::json()).is_string()) {
        what = answer["error"]["message"].get<std::string>();
      }
      what = nlohmann::json(what).dump(
          -1, ' ', false, nlohmann::json::error_handler_t::replace);
      // 400: the agent refused the request as specified (a task with an
      // unknown user, say), which the controller does not retry.
      const std::string message =
          absl::StrCat("agent ", a.node, " answered ", r->status, ": ", what);
      st = r->status == 400 ? absl::InvalidArgumentError(message)
                            : absl::InternalError(message);
    }
    try {
      controller_->ActionDone(a, st, absl::Now());
    } catch (const std::exception& e) {
      // Never let one bad answer end a dispatcher thread (and the server).
      std::fprintf(stderr, "loom server: dispatching to %s failed: %s\n",
                   a.node.c_str(), e.what());
    }
  }
}

}  // namespace loom
