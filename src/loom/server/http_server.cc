#include "loom/server/http_server.h"

#include <algorithm>
#include <cstdio>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "httplib.h"
#include "loom/common/dataset_token.h"
#include "loom/common/job_id.h"
#include "loom/server/agent_probe.h"
#include "loom/server/redact.h"
#include "loom/server/route_util.h"

namespace loom {
namespace {

// How long the server waits for an agent to answer a liveness probe.
constexpr absl::Duration kProbeDeadline = absl::Seconds(1);

// glibc keeps freed memory in its arenas; trimming returns it to the
// system (elsewhere there is nothing to do).
void ReturnFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

HttpServer::HttpServer(Controller* controller, HttpServerOptions options)
    : controller_(controller), options_(std::move(options)) {
  pass_seconds_ =
      *Histogram::Create({0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01,
                          0.025, 0.05, 0.1, 0.25, 0.5, 1});
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Routes() {
  ClusterRoutes();
  TokenRoutes();
  JobRoutes();
  NodeRoutes();
  ImageRoutes();
  DatasetRoutes();
  SpecRoutes();
  MaintenanceRoutes();
  ServiceRoutes();
  AccountingRoutes();
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
    if (other_method) res.set_header("Allow", AllowedMethods(req.path));
    Reply(res, other_method ? 405 : 404,
          ErrorBody(other_method ? "method_not_allowed" : "not_found",
                    absl::StrCat(other_method ? "method " : "no route ",
                                 req.method, " ", req.path,
                                 other_method ? " is not allowed" : "")));
    return count();
  }
  req.matches.clear();
  req.matches.push_back(req.path);
  for (std::string& c : captures) req.matches.push_back(std::move(c));
  if (!Authorize(req, res) || Redirect(req, res)) return count();
  auto it = handlers_.find(static_cast<size_t>(rule - RouteTable().data()));
  if (it == handlers_.end()) {
    Reply(res, 404,
          ErrorBody("not_found",
                    absl::StrCat("no route ", req.method, " ", req.path)));
    return count();
  }
  try {
    it->second(req, res);
  } catch (const std::exception& e) {
    res = Response();
    Reply(res, 500, ErrorBody("internal", e.what()));
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
  if (p.ok()) return *p;
  Principal nobody;
  nobody.role = Role::kJoin;
  return nobody;
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
          ErrorBody("unauthenticated", std::string(p.status().message())));
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
          ErrorBody("permission_denied",
                    absl::StrCat("a ", std::string(RoleName(role)), " token (",
                                 p->user.empty() ? p->token_id : p->user,
                                 ") may not ", req.method, " ", rule->route)));
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

absl::StatusOr<JobId> HttpServer::JobOfRoute(const Request& req) {
  const std::string& text = req.matches[1];
  if (text.find('_') == std::string::npos) return JobIdOf(req);
  absl::StatusOr<JobId> id = controller_->ResolveJobRef(text);
  if (id.status().code() == absl::StatusCode::kInvalidArgument) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad job id: ", id.status().message()));
  }
  return id;
}

absl::StatusOr<JobId> HttpServer::JobToTouch(const Request& req,
                                             bool allow_job_token) {
  absl::StatusOr<JobId> id = JobOfRoute(req);
  if (!id.ok()) return id.status();
  if (absl::Status st = MayTouchJob(PrincipalOf(req), *id, allow_job_token);
      !st.ok()) {
    return st;
  }
  return *id;
}

absl::Status HttpServer::NeedAuthentication() const {
  if (options_.auth == nullptr) {
    return absl::FailedPreconditionError("authentication is off");
  }
  return absl::OkStatus();
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
  const PrivateData hidden = reads.cluster().private_data;
  if (path == "/v1/jobs") {
    const Principal p = PrincipalOf(req);
    absl::StatusOr<JobQuery> f = JobQueryOf(req);
    JobQuery q = f.ok() ? *f : JobQuery();
    if (HidesJobsFrom(p, hidden)) q.limit = 0;  // filtered, then cut
    absl::StatusOr<nlohmann::json> jobs =
        f.ok() ? reads.ListJobs(q) : absl::StatusOr<nlohmann::json>(f.status());
    if (jobs.ok()) {
      FilterJobsFor(p, hidden, f->limit, (*jobs)["jobs"]);
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
    if (job.ok()) {
      if (absl::Status st = ShowJobTo(PrincipalOf(req), hidden, *job);
          !st.ok()) {
        job = st;
      }
    }
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
          ErrorBody("no_leader",
                    "this server is a standby and no leader is elected yet; "
                    "retry in a moment"));
    return true;
  }
  // 307 keeps the method and body, so a client may simply follow it; loom's
  // own clients try the next server of their list instead.
  res.set_header("Location", leader + req.target);
  res.set_header("X-Loom-Leader", leader);
  nlohmann::json body = ErrorBody(
      "not_leader",
      absl::StrCat("this server is a standby; the leader is ", leader));
  body["error"]["leader"] = leader;
  Reply(res, 307, body);
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
    // Finished jobs past their retention leave memory; give the freed
    // heap back to the system, so that the server's size follows its
    // live state, not its history.
    if (controller_->PurgeExpiredJobs(absl::Now()) > 0) ReturnFreedMemory();
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
    if (a.kind == AgentAction::Kind::kProbe) {
      // A fresh connection, not the kept-alive one: the question is
      // whether anything listens there now.
      const ProbeResult r = ProbeAgent(a.address, kProbeDeadline);
      const absl::Status st = r == ProbeResult::kAnswered ? absl::OkStatus()
                              : r == ProbeResult::kRefused
                                  ? absl::UnavailableError("connection refused")
                                  : absl::DeadlineExceededError("no answer");
      controller_->ActionDone(a, st, absl::Now());
      continue;
    }
    std::unique_ptr<httplib::Client>& c = clients[a.address];
    if (c == nullptr) {
      c = std::make_unique<httplib::Client>("http://" + a.address);
      c->set_keep_alive(true);
      c->set_tcp_nodelay(true);

      c->set_connection_timeout(3);
    }
    const std::string path =
        a.kind == AgentAction::Kind::kLaunch ? std::string("/v1/tasks")
        : a.kind == AgentAction::Kind::kPullImage
            ? absl::StrCat("/v1/images/pull?node=", a.node)
        : a.kind == AgentAction::Kind::kMaintain
            ? std::string("/v1/maintenance")
        : a.kind == AgentAction::Kind::kPrefetch
            ? absl::StrCat("/v1/datasets/prefetch?node=", a.node)
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
    if ((a.kind == AgentAction::Kind::kLaunch ||
         a.kind == AgentAction::Kind::kPrefetch) &&
        options_.auth != nullptr && a.body.contains("data") &&
        a.body["data"].is_array()) {
      // What a peer asks of this node for a dataset version: a token that
      // peer derives from its own key (docs/datasets.md).
      for (nlohmann::json& d : a.body["data"]) {
        if (!d.is_object() || !d.contains("peers")) continue;
        const std::string version = d.value("version", "");
        for (nlohmann::json& p : d["peers"]) {
          if (!p.is_object()) continue;
          const std::string key = options_.auth->AgentKey(p.value("node", ""));
          if (!key.empty()) p["token"] = DatasetPeerToken(key, version);
        }
      }
    }
    // An agent answers a launch once the task's processes are exec'd, or
    // at once with 202 when it pulls the task's image first.
    c->set_read_timeout(30);
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
      // 503: the agent is not ready (it has registered, but not yet taken
      // in its server's key), or the node cannot run it now (a GPU's change
      // of MIG mode waits): the task can go again as it is.
      st = r->status == 400   ? absl::InvalidArgumentError(message)
           : r->status == 503 ? absl::AbortedError(message)
                              : absl::InternalError(message);
    }
    try {
      controller_->ActionDone(a, st, absl::Now(),
                              /*started=*/!(st.ok() && r && r->status == 202));
    } catch (const std::exception& e) {
      // Never let one bad answer end a dispatcher thread (and the server).
      std::fprintf(stderr, "loom server: dispatching to %s failed: %s\n",
                   a.node.c_str(), e.what());
    }
  }
}

}  // namespace loom
