#include "loom/agent/node_session.h"

#include <signal.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/image_prepull.h"
#include "loom/agent/json_values.h"
#include "loom/agent/lease.h"
#include "loom/agent/nic_probe.h"
#include "loom/common/atomic_file.h"
#include "loom/common/units.h"
#include "loom/common/version.h"
#include "loom/core/labels.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr absl::Duration kInitialBackoff = absl::Milliseconds(200);
constexpr absl::Duration kMaxBackoff = absl::Seconds(5);
constexpr absl::Duration kDefaultHeartbeat = absl::Seconds(1);
// How soon a heartbeat follows the end of a task.
constexpr absl::Duration kReportDelay = absl::Milliseconds(20);

std::string DescribeHttpError(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection:
      return "cannot connect";
    case httplib::Error::ConnectionTimeout:
      return "connection timed out";
    case httplib::Error::Read:
      return "no complete answer (read failed or timed out)";
    case httplib::Error::Write:
      return "sending the request failed";
    default:
      return absl::StrCat("request failed (", httplib::to_string(e), ")");
  }
}

// The first line of `path`; "" when there is none.
std::string FirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (in && std::getline(in, line)) return line;
  return "";
}

}  // namespace

struct NodeSession::Worker {
  std::vector<Link*> links;
  std::vector<std::unique_ptr<httplib::Client>> clients;  // per server URL
  size_t preferred = 0;
  std::thread thread;
};

struct NodeSession::ServerReply {
  bool answered = false;
  int status = 0;
  json body;
  std::string text;
  std::string url;
  std::string error;  // when not answered

  // The server's error message, else the start of the body.
  std::string Message() const {
    if (body.is_object()) {
      auto error = body.find("error");
      if (error != body.end() && error->is_object()) {
        auto message = error->find("message");
        if (message != error->end() && message->is_string()) {
          return message->get<std::string>();
        }
      }
    }
    return text;
  }
};

NodeSession::NodeSession(NodeSessionOptions options, const NodeTable& nodes,
                         TaskRunner& runner,
                         const MaintenanceRunner& maintenance,
                         const HealthMonitor& health, ApiGuard& guard,
                         HeartbeatStats& stats, const AgentLog& log)
    : options_(std::move(options)),
      nodes_(nodes),
      runner_(runner),
      maintenance_(maintenance),
      health_(health),
      guard_(guard),
      stats_(stats),
      log_(log) {
  for (const auto& node : nodes_.nodes()) {
    auto link = std::make_unique<Link>();
    link->node = node.get();
    link->backoff = kInitialBackoff;
    link->interval = kDefaultHeartbeat;
    links_.push_back(std::move(link));
  }
}

NodeSession::~NodeSession() { Stop(); }

void NodeSession::Load(AgentNode& node) {
  Link& link = *links_[node.index];
  const std::string credential =
      FirstLine(absl::StrCat(node.root, "/credential"));
  const std::string key = FirstLine(absl::StrCat(node.root, "/agent_key"));
  if (!key.empty()) guard_.SetKey(node.name, key);
  if (!credential.empty() || !options_.join_token.empty()) {
    guard_.SetCanRegister(true);
  }
  // The lease of the agent before this one: when its last answered
  // heartbeat is older than the fence limit, the server may already run
  // these tasks' jobs elsewhere, and `Start` fences them before anything
  // registers.
  std::optional<Lease> lease = ReadLease(LeasePath(node));
  absl::MutexLock lock(&mu_);
  link.credential = credential;
  if (lease) {
    link.last_ack_sent = lease->last_ack_sent;
    link.fence_after = lease->fence_after;
  }
}

void NodeSession::Start() {
  const size_t n = links_.size();
  size_t k = options_.heartbeat_threads > 0
                 ? static_cast<size_t>(options_.heartbeat_threads)
                 : std::min<size_t>(n, 8);
  k = std::clamp<size_t>(k, 1, n);
  const absl::Time now = absl::Now();
  {
    absl::MutexLock lock(&mu_);
    for (size_t i = 0; i < n; ++i) {
      // Spread the first registrations of a fleet over a second.
      links_[i]->next_due = now + absl::Milliseconds(1000) *
                                      static_cast<double>(i) /
                                      static_cast<double>(n);
    }
  }
  for (size_t w = 0; w < k; ++w) {
    auto worker = std::make_unique<Worker>();
    for (size_t i = w; i < n; i += k) worker->links.push_back(links_[i].get());
    for (const std::string& url : options_.server_urls) {
      auto client = std::make_unique<httplib::Client>(url);
      const int64_t connect_us =
          absl::ToInt64Microseconds(options_.connect_timeout);
      const int64_t request_us =
          absl::ToInt64Microseconds(options_.request_timeout);
      client->set_connection_timeout(connect_us / 1000000,
                                     connect_us % 1000000);
      client->set_read_timeout(request_us / 1000000, request_us % 1000000);
      client->set_write_timeout(request_us / 1000000, request_us % 1000000);
      client->set_keep_alive(true);
      if (!options_.ca_cert.empty()) {
        client->set_ca_cert_path(options_.ca_cert.c_str());
      }
      client->enable_server_certificate_verification(true);
      // httplib writes headers and body separately: without NODELAY, Nagle
      // and delayed ACKs stall every request by ~40 ms.
      client->set_tcp_nodelay(true);
      worker->clients.push_back(std::move(client));
    }
    workers_.push_back(std::move(worker));
  }
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    w->thread = std::thread([this, w] { WorkerLoop(*w); });
  }
}

void NodeSession::Stop() {
  stopping_.store(true);
  {
    absl::MutexLock lock(&mu_);
    cv_.SignalAll();
  }
  for (auto& worker : workers_) {
    for (auto& client : worker->clients) client->stop();
  }
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
}

bool NodeSession::Registered(const AgentNode& node) const {
  return links_[node.index]->registered_flag.load();
}

void NodeSession::ReportSoon(AgentNode& node) {
  Link& link = *links_[node.index];
  absl::MutexLock lock(&mu_);
  link.report_pending = true;
  if (!link.registered) return;
  const absl::Time soon = absl::Now() + kReportDelay;
  if (link.next_due > soon) link.next_due = soon;
  cv_.SignalAll();
}

void NodeSession::FenceSilentNodes() {
  const absl::Time now = absl::Now();
  for (auto& link : links_) {
    absl::Duration silent;
    absl::Duration limit;
    {
      absl::MutexLock lock(&mu_);
      if (link->fenced || link->fence_after <= absl::ZeroDuration() ||
          link->last_ack_sent == absl::InfinitePast() ||
          now - link->last_ack_sent <= link->fence_after) {
        continue;
      }
      link->fenced = true;
      silent = now - link->last_ack_sent;
      limit = link->fence_after;
    }
    // The server declares this node down soon (its heartbeat timeout is
    // longer than `fence_after`) and runs the node's jobs elsewhere: kill
    // the tasks first, so that no job runs twice.
    const int killed = runner_.KillAll(*link->node);
    log_("warn", link->node->name,
         absl::StrCat("fenced: no heartbeat answered for ",
                      FormatDurationShort(silent), " (limit ",
                      FormatDurationShort(limit), "); killed ", killed,
                      " task(s) so that no job runs twice"));
  }
}

void NodeSession::KeepLease(Link& link, absl::Time sent,
                            absl::Duration fence_after) {
  if (!options_.keep_lease) return;
  const std::string path = LeasePath(*link.node);
  absl::Status s = WriteLease(path, Lease{sent, fence_after});
  // A stale lease fences nothing while this agent runs (it fences its own
  // tasks), but if it dies the shims go by the lease: say so once.
  if (!s.ok() && !link.lease_write_failed.exchange(true)) {
    log_("warn", link.node->name,
         absl::StrCat("cannot write the lease ", path, " (", Str(s.message()),
                      "); should this agent die, its tasks' shims will fence "
                      "them from the last lease written"));
  } else if (s.ok() && link.lease_write_failed.exchange(false)) {
    log_("info", link.node->name,
         absl::StrCat("the lease ", path, " is written again"));
  }
}

void NodeSession::WorkerLoop(Worker& worker) {
  while (!stopping_.load()) {
    std::vector<Link*> due;
    {
      absl::MutexLock lock(&mu_);
      absl::Time next = absl::InfiniteFuture();
      const absl::Time now = absl::Now();
      for (Link* link : worker.links) {
        if (link->next_due <= now) {
          due.push_back(link);
        } else {
          next = std::min(next, link->next_due);
        }
      }
      if (due.empty()) {
        if (stopping_.load()) break;
        cv_.WaitWithDeadline(&mu_, next);
        continue;
      }
    }
    for (Link* link : due) {
      if (stopping_.load()) break;
      Tick(worker, *link);
    }
  }
}

void NodeSession::Tick(Worker& worker, Link& link) {
  bool registered;
  {
    absl::MutexLock lock(&mu_);
    registered = link.registered;
  }
  if (registered) {
    Heartbeat(worker, link);
  } else {
    Register(worker, link);
  }
}

void NodeSession::ScheduleNext(Link& link, absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  if (link.report_pending) delay = std::min(delay, kReportDelay);
  link.next_due = absl::Now() + delay;
}

void NodeSession::Backoff(Link& link) {
  thread_local std::minstd_rand rng(std::random_device{}());
  std::uniform_real_distribution<double> jitter(0.8, 1.2);
  absl::MutexLock lock(&mu_);
  link.next_due = absl::Now() + link.backoff * jitter(rng);
  link.backoff = std::min(link.backoff * 2, kMaxBackoff);
}

void NodeSession::Problem(Link& link, const std::string& message) {
  if (message == link.last_problem) return;
  link.last_problem = message;
  log_("warn", link.node->name, message);
}

NodeSession::ServerReply NodeSession::Post(Worker& worker,
                                           const std::string& path,
                                           const json& body,
                                           const std::string& bearer,
                                           absl::Duration timeout) {
  if (timeout <= absl::ZeroDuration()) timeout = options_.request_timeout;
  const int64_t timeout_us = absl::ToInt64Microseconds(timeout);
  ServerReply reply;
  const std::string payload = Dump(body);
  const size_t n = worker.clients.size();
  std::vector<std::string> errors;
  httplib::Headers headers;
  if (!bearer.empty()) headers.emplace("Authorization", "Bearer " + bearer);
  for (size_t i = 0; i < n; ++i) {
    const size_t idx = (worker.preferred + i) % n;
    const std::string& url = options_.server_urls[idx];
    worker.clients[idx]->set_read_timeout(timeout_us / 1000000,
                                          timeout_us % 1000000);
    httplib::Result res = worker.clients[idx]->Post(
        path.c_str(), headers, payload, "application/json");
    if (!res) {
      errors.push_back(absl::StrCat(url, ": ", DescribeHttpError(res.error())));
      continue;
    }
    // 503: busy or no leader yet; 307: a standby of a replicated
    // controller (docs/ha.md). The leader is another server of the list.
    if ((res->status == 503 || res->status == 307) && i + 1 < n) {
      errors.push_back(absl::StrCat(url, res->status == 307
                                             ? ": a standby"
                                             : ": HTTP 503 (unavailable)"));
      continue;
    }
    worker.preferred = idx;
    reply.answered = true;
    reply.status = res->status;
    reply.url = url;
    reply.text = res->body.substr(0, 300);
    reply.body = json::parse(res->body, nullptr, false);
    if (reply.body.is_discarded()) reply.body = json();
    return reply;
  }
  reply.error = absl::StrJoin(errors, "; ");
  return reply;
}

namespace {

// What the node says of itself for selectors (docs/agent.md): its GPU model,
// driver and CUDA versions and kernel. Empty values are left out.
json NodeLabelsJson(const AgentNode& node) {
  json labels = json::object();
  auto add = [&](const char* key, const std::string& value) {
    if (!value.empty()) labels[key] = value;
  };
  add(kLabelGpuModel, node.gpus.empty() ? "" : node.gpus.front().model);
  const GpuSoftware software = node.Software();
  add(kLabelGpuDriver, software.driver);
  add(kLabelGpuCuda, software.cuda);
  add(kLabelKernel, node.host.kernel);
  return labels;
}

// The GPUs whose change of MIG mode waits (`AgentNode::mig_waits`): the
// server gives the node no new work while there are any.
json MigWaitsJson(const AgentNode& node) {
  json out = json::array();
  const uint32_t waits = node.mig_waits.load();
  for (int g = 0; g < 32; ++g) {
    if ((waits >> g) & 1) out.push_back(g);
  }
  return out;
}

// The node's software stack, which the server compares with its pool's
// `stack` (drift).
json NodeStackJson(const AgentNode& node) {
  const GpuSoftware software = node.Software();
  json stack = {{"loom", kLoomVersion}};
  if (!software.driver.empty()) stack["driver"] = software.driver;
  if (!software.cuda.empty()) stack["cuda"] = software.cuda;
  return stack;
}

}  // namespace

json NodeSession::RegistrationBody(Link& link,
                                   std::vector<std::string>* ended_ids) {
  AgentNode& node = *link.node;
  json gpus = json::array();
  for (const GpuDevice& gpu : node.gpus) {
    gpus.push_back({{"index", gpu.index},
                    {"model", gpu.model},
                    {"uuid", gpu.uuid},
                    {"memory_bytes", gpu.memory_bytes}});
    // Read-only (mig_control.h); left out where it cannot be read.
    if (node.mig == nullptr) continue;
    if (absl::StatusOr<MigState> mig = node.mig->Describe(gpu.index);
        mig.ok()) {
      gpus.back()["mig"] = MigStateJson(*mig);
    }
  }
  // Read before the stack, as in `Heartbeat`.
  std::optional<json> maintenance = maintenance_.Status(node);
  json body = {
      {"name", node.name},
      {"address", options_.address},
      {"hostname", node.host.hostname},
      {"cpus", node.host.cpus},
      {"memory_bytes", node.host.memory_bytes},
      {"gpus", std::move(gpus)},
      {"nics", NicsJson(node.nics)},
      {"emulated", node.emulated},
      {"labels", NodeLabelsJson(node)},
      {"stack", NodeStackJson(node)},
      {"health", health_.HealthJson(node)},
      {"tasks", runner_.Statuses(node, ended_ids)},
      {"mig_waits", MigWaitsJson(node)},
      {"images", node.images ? NodeImagesJson(*node.images) : json::array()},
      {"image_pulls", node.prepulls ? node.prepulls->Json() : json::array()},
      {"datasets", node.datasets ? node.datasets->CompleteVersions()
                                 : std::vector<std::string>()}};
  if (maintenance) body["maintenance"] = *std::move(maintenance);
  return body;
}

void NodeSession::AcceptServerKey(AgentNode& node, const std::string& key) {
  if (!guard_.SetKey(node.name, key)) return;
  if (absl::Status s =
          WriteSecretFile(absl::StrCat(node.root, "/agent_key"), key + "\n");
      !s.ok()) {
    // The key comes again with the next registration.
    log_("warn", node.name,
         absl::StrCat("cannot save the server's key (", Str(s.message()),
                      "); until the next registration after a restart, this "
                      "agent answers 503"));
  }
}

void NodeSession::Register(Worker& worker, Link& link) {
  AgentNode& node = *link.node;
  {
    absl::MutexLock lock(&mu_);
    link.report_pending = false;
  }
  std::vector<std::string> ended;
  // Read before the body is: a change after it is sent again.
  const uint64_t images_gen = node.images ? node.images->Generation() : 0;
  const uint64_t pulls_gen = node.prepulls ? node.prepulls->Generation() : 0;
  const json body = RegistrationBody(link, &ended);
  const absl::Time sent = absl::Now();
  std::string bearer;
  {
    absl::MutexLock lock(&mu_);
    bearer = link.credential;
  }
  const bool joining = bearer.empty();
  if (joining) bearer = options_.join_token;
  ServerReply reply = Post(worker, "/v1/agents/register", body, bearer);
  if (!reply.answered) {
    Problem(link, absl::StrCat("cannot register: no server answers (",
                               reply.error, "); retrying"));
    Backoff(link);
    return;
  }
  if (reply.status != 200) {
    std::string hint;
    if (reply.status == 401 && joining) {
      hint = options_.join_token.empty()
                 ? " (this node has no credential: start the agent with "
                   "--join-token-file, a token from `loom token create "
                   "--join`)"
                 : " (the join token is not valid: expired, used or revoked?)";
    } else if (reply.status == 401) {
      hint = absl::StrCat(
          " (this node's credential in ", node.root,
          "/credential was refused: revoked? Remove the file and join again "
          "with a new join token)");
    }
    Problem(link, absl::StrCat("registration refused by ", reply.url, ": HTTP ",
                               reply.status, ": ", reply.Message(), hint,
                               "; retrying"));
    Backoff(link);
    return;
  }
  if (reply.body.is_object()) {
    if (reply.body.contains("agent_key") &&
        reply.body["agent_key"].is_string()) {
      AcceptServerKey(node, reply.body["agent_key"].get<std::string>());
    }
    if (reply.body.contains("credential") &&
        reply.body["credential"].is_string()) {
      const std::string credential = reply.body["credential"];
      if (absl::Status s = WriteSecretFile(
              absl::StrCat(node.root, "/credential"), credential + "\n");
          !s.ok()) {
        log_("warn", node.name,
             absl::StrCat("cannot save the node credential (", Str(s.message()),
                          "): the node must join again after a restart"));
      }
      absl::MutexLock lock(&mu_);
      link.credential = credential;
    }
  }
  absl::Duration interval = options_.heartbeat_interval;
  if (interval <= absl::ZeroDuration()) {
    interval = kDefaultHeartbeat;
    if (reply.body.is_object() &&
        reply.body.contains("heartbeat_interval_ms")) {
      std::optional<int64_t> ms = AsInt(reply.body["heartbeat_interval_ms"]);
      if (ms && *ms >= 10 && *ms <= 600000) interval = absl::Milliseconds(*ms);
    }
  }
  absl::Duration fence_after = absl::ZeroDuration();
  if (reply.body.is_object() && reply.body.contains("fence_after_ms")) {
    std::optional<int64_t> ms = AsInt(reply.body["fence_after_ms"]);
    if (ms && *ms > 0) fence_after = absl::Milliseconds(*ms);
  }
  {
    absl::MutexLock lock(&mu_);
    link.images_sent = images_gen;
    link.pulls_sent = pulls_gen;
    link.datasets_sent = body.at("datasets").get<std::vector<std::string>>();
    link.last_ack_sent = sent;
    link.fence_after = fence_after;
    link.fenced = false;
    link.registered = true;
    link.interval = interval;
    link.backoff = kInitialBackoff;
    link.next_due =
        absl::Now() + (link.report_pending ? kReportDelay : interval);
  }
  KeepLease(link, sent, fence_after);
  link.registered_flag.store(true);
  link.last_problem.clear();
  log_(
      "info", node.name,
      absl::StrCat("registered with ", reply.url, " as ", options_.address,
                   ": ", node.gpus.size(), " GPUs, ", body["tasks"].size(),
                   " tasks; heartbeat every ", absl::FormatDuration(interval)));
  HandleServerReply(link, reply.body, ended);
}

void NodeSession::Heartbeat(Worker& worker, Link& link) {
  AgentNode& node = *link.node;
  absl::Duration interval;
  {
    absl::MutexLock lock(&mu_);
    interval = link.interval;
    link.report_pending = false;
  }
  if (node.drop_heartbeats.load()) {
    ScheduleNext(link, interval);
    return;
  }
  std::vector<std::string> ended;
  // The latest maintenance command before the stack: its end is recorded
  // only once the stack was read again (maintenance_runner.h), so a body
  // that says it ended carries the new stack.
  std::optional<json> maintenance = maintenance_.Status(node);
  json body = {{"name", node.name},
               {"stack", NodeStackJson(node)},
               {"health", health_.HealthJson(node)},
               {"tasks", runner_.Statuses(node, &ended)}};
  if (maintenance) body["maintenance"] = *std::move(maintenance);
  // Only while some GPU's MIG mode change waits: the server takes its
  // absence for none.
  if (node.mig_waits.load() != 0) body["mig_waits"] = MigWaitsJson(node);
  // The node's images and pulls only when they changed since the server
  // last heard of them (pulls in progress: every time, for their progress).
  const uint64_t images_gen = node.images ? node.images->Generation() : 0;
  const uint64_t pulls_gen = node.prepulls ? node.prepulls->Generation() : 0;
  if (node.images && images_gen != link.images_sent) {
    body["images"] = NodeImagesJson(*node.images);
  }
  if (node.prepulls && (pulls_gen != link.pulls_sent || node.prepulls->Any())) {
    body["image_pulls"] = node.prepulls->Json();
  }
  // The complete dataset versions when they changed since the server last
  // heard of them (docs/datasets.md, "Locality and prefetch").
  std::vector<std::string> datasets;
  if (node.datasets) {
    datasets = node.datasets->CompleteVersions();
    absl::MutexLock lock(&mu_);
    if (link.datasets_sent != datasets) body["datasets"] = datasets;
  }
  // What prefetches copied, until the server has it.
  uint64_t prefetched_through = 0;
  if (node.dataset_prefetches) {
    json prefetched = node.dataset_prefetches->Reports(&prefetched_through);
    if (!prefetched.empty()) body["prefetched"] = std::move(prefetched);
  }
  const absl::Time sent = absl::Now();
  std::string bearer;
  // With several servers, one that took the connection and never answers
  // (a frozen leader) must not hold the heartbeat until the fence: each
  // gets half the time left before it (at least 1 s), so that the others
  // are tried in time, while a slow but live leader still has seconds to
  // answer (docs/ha.md). With one server there is nothing else to try.
  absl::Duration timeout = options_.request_timeout;
  {
    absl::MutexLock lock(&mu_);
    bearer = link.credential;
    if (options_.server_urls.size() > 1 &&
        link.fence_after > absl::ZeroDuration()) {
      const absl::Duration left =
          link.fence_after - (absl::Now() - link.last_ack_sent);
      timeout =
          std::clamp(left / 2, std::min(absl::Seconds(1), timeout), timeout);
    }
  }
  ServerReply reply =
      Post(worker, "/v1/agents/heartbeat", body, bearer, timeout);
  if (!reply.answered || reply.status != 200) {
    stats_.Failed();
  } else {
    stats_.Answered(absl::Now() - sent);
  }
  if (!reply.answered) {
    Problem(link, absl::StrCat("heartbeat failed: no server answers (",
                               reply.error, ")"));
    ScheduleNext(link, interval);
    return;
  }
  if (reply.status == 200) {
    absl::Duration fence_after;
    {
      absl::MutexLock lock(&mu_);
      if (body.contains("images")) link.images_sent = images_gen;
      if (body.contains("image_pulls")) link.pulls_sent = pulls_gen;
      if (body.contains("datasets")) link.datasets_sent = std::move(datasets);
      if (body.contains("prefetched")) {
        node.dataset_prefetches->Acknowledge(prefetched_through);
      }
      link.last_ack_sent = sent;
      link.fenced = false;
      fence_after = link.fence_after;
    }
    KeepLease(link, sent, fence_after);
    if (!link.last_problem.empty()) {
      link.last_problem.clear();
      log_("info", node.name,
           absl::StrCat("heartbeats reach ", reply.url, " again"));
    }
    ScheduleNext(link, interval);
    HandleServerReply(link, reply.body, ended);
    return;
  }
  const std::string message = reply.Message();
  if (reply.status == 404 || reply.status == 409 || reply.status == 412 ||
      absl::StrContains(absl::AsciiStrToLower(message), "not registered")) {
    log_("info", node.name,
         absl::StrCat("the server asks this node to register again (HTTP ",
                      reply.status, ": ", message, ")"));
    {
      absl::MutexLock lock(&mu_);
      link.registered = false;
      link.backoff = kInitialBackoff;
      link.next_due = absl::Now();
    }
    link.registered_flag.store(false);
    return;
  }
  Problem(link, absl::StrCat("heartbeat refused by ", reply.url, ": HTTP ",
                             reply.status, ": ", message));
  ScheduleNext(link, interval);
}

void NodeSession::HandleServerReply(
    Link& link, const json& reply,
    const std::vector<std::string>& reported_ended) {
  if (!reply.is_object()) return;
  auto ids = [&](const char* key) {
    std::vector<std::string> out;
    auto it = reply.find(key);
    if (it == reply.end() || !it->is_array()) return out;
    for (const json& v : *it) {
      if (v.is_string()) out.push_back(v.get<std::string>());
    }
    return out;
  };
  const std::vector<std::string> acks = ids("ack");
  const std::vector<std::string> stops = ids("stop");
  if (acks.empty() && stops.empty()) return;
  runner_.ApplyServerOrders(
      *link.node, acks, stops,
      std::set<std::string>(reported_ended.begin(), reported_ended.end()));
}

}  // namespace loom
