#include "loom/agent/agent_api.h"

#include <signal.h>

#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "loom/agent/agent_address.h"
#include "loom/agent/api_reply.h"
#include "loom/agent/image_prepull.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"
#include "loom/common/metrics_text.h"
#include "loom/image/image_ref.h"

namespace loom {
namespace {

using json = nlohmann::json;
using httplib::Request;
using httplib::Response;

constexpr size_t kMaxBodyBytes = size_t{1} << 20;

}  // namespace

AgentApi::AgentApi(AgentApiOptions options, const NodeTable& nodes,
                   TaskRunner& runner, MaintenanceRunner& maintenance,
                   FaultInjector& faults, const ApiGuard& guard,
                   HeartbeatStats& stats, const AgentLog& log)
    : options_(std::move(options)),
      nodes_(nodes),
      runner_(runner),
      maintenance_(maintenance),
      faults_(faults),
      guard_(guard),
      stats_(stats),
      log_(log) {}

AgentApi::~AgentApi() { Stop(); }

absl::Status AgentApi::Bind() {
  server_ = std::make_unique<httplib::Server>();
  const size_t threads = static_cast<size_t>(options_.http_threads);
  server_->new_task_queue = [threads] {
    return new httplib::ThreadPool(threads);
  };
  server_->set_payload_max_length(kMaxBodyBytes);
  server_->set_tcp_nodelay(true);
  // A connection holds a pool thread while it is open, idle keep-alive
  // included: keep idle ones short so that launches never wait long.
  server_->set_keep_alive_max_count(100);
  server_->set_keep_alive_timeout(2);
  server_->set_read_timeout(10);
  server_->set_write_timeout(10);
  InstallRoutes();
  int port = options_.listen_port;
  if (port == 0) {
    port = server_->bind_to_any_port(options_.listen_host);
  } else if (!server_->bind_to_port(options_.listen_host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ",
                     HostPort(options_.listen_host, options_.listen_port),
                     " (address in use, or not an address of this host)"));
  }
  port_ = port;
  address_ = HostPort(options_.listen_host, port_);
  return absl::OkStatus();
}

void AgentApi::Serve() {
  listen_thread_ = std::thread([this] { server_->listen_after_bind(); });
}

void AgentApi::Stop() {
  if (stopping_.exchange(true)) return;
  if (server_ != nullptr && port_ > 0) {
    // `stop` only acts on a running server; a bound listener that was never
    // served is served now so that its socket gets closed.
    if (!listen_thread_.joinable()) Serve();
    for (int i = 0; i < 400 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    server_->stop();
  }
  if (listen_thread_.joinable()) listen_thread_.join();
}

bool AgentApi::Authorized(const Request& req, Response& res) {
  const ApiVerdict v = guard_.Check(req.get_header_value("Authorization"));
  if (v.allowed) return true;
  if (v.status == 401) {
    res.set_header("WWW-Authenticate", "Bearer realm=\"loom-agent\"");
  }
  SendError(res, v.status, v.code, v.message);
  return false;
}

void AgentApi::InstallRoutes() {
  auto route = [this](void (AgentApi::*handler)(const Request&, Response&)) {
    return [this, handler](const Request& req, Response& res) {
      // An injected slow agent (`POST /v1/faults` delay_ms); never the
      // fault route itself, so that the fault can be lifted.
      if (const int64_t ms = faults_.api_delay_ms();
          ms > 0 && handler != &AgentApi::HandleFaults) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      }
      Guarded(res, [&] { (this->*handler)(req, res); });
    };
  };
  // Public: health, telemetry and heartbeat statistics, like node-exporter.
  // Everything else needs the server's key.
  auto secured = [this,
                  route](void (AgentApi::*handler)(const Request&, Response&)) {
    return [this, inner = route(handler)](const Request& req, Response& res) {
      if (Authorized(req, res)) inner(req, res);
    };
  };
  server_->Post("/v1/tasks", secured(&AgentApi::HandleLaunch));
  server_->Get("/v1/tasks", secured(&AgentApi::HandleList));
  server_->Post(R"(/v1/tasks/([^/]+)/stop)", secured(&AgentApi::HandleStop));
  server_->Get(R"(/v1/tasks/([^/]+)/logs)", secured(&AgentApi::HandleLogs));
  server_->Get(R"(/v1/tasks/([^/]+))", secured(&AgentApi::HandleGet));
  server_->Post("/v1/images/pull", secured(&AgentApi::HandleImagePull));
  server_->Get("/v1/images", secured(&AgentApi::HandleImages));
  server_->Post("/v1/datasets/prefetch",
                secured(&AgentApi::HandleDatasetPrefetch));
  // Peers, with a dataset token instead of the server's key.
  server_->Get(R"(/v1/datasets/([0-9a-f]{16})/manifest)",
               route(&AgentApi::HandleDatasetManifest));
  server_->Get(R"(/v1/datasets/([0-9a-f]{16})/files/(.+))",
               route(&AgentApi::HandleDatasetFile));
  server_->Post("/v1/maintenance", secured(&AgentApi::HandleMaintenanceStart));
  server_->Get("/v1/maintenance", secured(&AgentApi::HandleMaintenanceGet));
  server_->Post("/v1/faults", secured(&AgentApi::HandleFaults));
  server_->Get("/v1/stats", route(&AgentApi::HandleStats));
  server_->Get("/metrics", route(&AgentApi::HandleMetrics));
  server_->Get("/healthz", [](const Request&, Response& res) {
    SendJson(res, 200, {{"ok", true}});
  });
  server_->set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    switch (res.status) {
      case 404:
        SendError(res, 404, "not_found",
                  absl::StrCat("no route ", req.method, " ", req.path));
        break;
      case 413:
        SendError(res, 413, "too_large", "the request body is over 1 MiB");
        break;
      case 400:
        SendError(res, 400, "invalid_argument", "bad request");
        break;
      default:
        SendError(res, res.status, "internal",
                  absl::StrCat("HTTP ", res.status));
    }
  });
}

void AgentApi::HandleLaunch(const Request& req, Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded()) {
    SendError(res, 400, "invalid_argument",
              "the request body is not valid JSON", "body");
    return;
  }
  std::string field;
  absl::StatusOr<LaunchRequest> request = ParseLaunchRequest(body, &field);
  if (!request.ok()) {
    SendStatus(res, request.status(), field);
    return;
  }
  std::string node_name = req.get_param_value("node");
  if (!node_name.empty() && !request->node.empty() &&
      node_name != request->node) {
    SendError(res, 400, "invalid_argument",
              absl::StrCat("node: the query names '", node_name,
                           "', the body '", request->node, "'"),
              "node");
    return;
  }
  if (node_name.empty()) node_name = request->node;
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(node_name);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  field.clear();
  absl::StatusOr<json> launched = runner_.Launch(**node, *request, &field);
  if (!launched.ok()) {
    const absl::Status& s = launched.status();
    switch (s.code()) {
      case absl::StatusCode::kAlreadyExists:
        SendError(res, 409, "failed_precondition", Str(s.message()));
        break;
      case absl::StatusCode::kInvalidArgument:
      case absl::StatusCode::kNotFound:
      case absl::StatusCode::kPermissionDenied:
      case absl::StatusCode::kFailedPrecondition:
      case absl::StatusCode::kOutOfRange:
        // The request cannot run here (missing program, bad directory, ...).
        SendError(res, 400, "invalid_argument", Str(s.message()), field);
        break;
      case absl::StatusCode::kAborted:
        // The node cannot run it now (a GPU waits for a reset), and says
        // so in its health: the server queues the job again.
        SendError(res, 503, "unavailable", Str(s.message()), field);
        break;
      default:
        SendError(res, 500, "internal", Str(s.message()), field);
    }
    return;
  }
  // 202: accepted, the task waits for its image (its state `pulling`).
  SendJson(res, launched->value("state", "") == "pulling" ? 202 : 201,
           *launched);
}

void AgentApi::HandleImagePull(const Request& req, Response& res) {
  const json body = json::parse(req.body, nullptr, false);
  if (!body.is_object() || !body.contains("image") ||
      !body["image"].is_string()) {
    SendError(res, 400, "invalid_argument",
              "the body must be a JSON object with \"image\": a reference "
              "with a digest",
              "image");
    return;
  }
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(req.get_param_value("node"));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  if ((*node)->prepulls == nullptr) {
    SendError(res, 400, "failed_precondition",
              absl::StrCat("node ", (*node)->name,
                           " has no image store (its agent runs no container "
                           "tasks)"));
    return;
  }
  const std::string text = body["image"].get<std::string>();
  absl::StatusOr<image::ImageRef> ref = image::ParseImageRef(text);
  if (!ref.ok() || ref->digest.empty()) {
    SendError(res, 400, "invalid_argument",
              ref.ok() ? absl::StrCat("image: ", text, " has no digest")
                       : absl::StrCat("image: ", Str(ref.status().message())),
              "image");
    return;
  }
  const std::string as_given =
      body.contains("image_ref") && body["image_ref"].is_string()
          ? body["image_ref"].get<std::string>()
          : text;
  const std::string state = (*node)->prepulls->Start(*ref, as_given);
  SendJson(res, state == "present" ? 200 : 202,
           {{"node", (*node)->name},
            {"image", as_given},
            {"digest", ref->digest},
            {"state", state}});
}

void AgentApi::HandleImages(const Request& req, Response& res) {
  absl::StatusOr<AgentNode*> node = nodes_.Resolve(req.get_param_value("node"));
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  const AgentNode& n = **node;
  SendJson(res, 200,
           {{"node", n.name},
            {"images", n.images ? NodeImagesJson(*n.images) : json::array()},
            {"pulls", n.prepulls ? n.prepulls->Json() : json::array()}});
}

void AgentApi::HandleList(const Request& req, Response& res) {
  absl::StatusOr<std::vector<AgentNode*>> nodes =
      nodes_.Select(req.get_param_value("node"));
  if (!nodes.ok()) {
    SendStatus(res, nodes.status(), "node");
    return;
  }
  json tasks = json::array();
  for (AgentNode* node : *nodes) runner_.ListDetailed(*node, &tasks);
  SendJson(res, 200, {{"tasks", std::move(tasks)}});
}

void AgentApi::HandleGet(const Request& req, Response& res) {
  const std::string id = TaskIdOf(req, res);
  if (id.empty()) return;
  absl::StatusOr<AgentNode*> node =
      nodes_.ForTask(req.get_param_value("node"), id);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  absl::StatusOr<json> status = runner_.Get(**node, id);
  if (!status.ok()) {
    SendStatus(res, status.status());
    return;
  }
  SendJson(res, 200, *status);
}

void AgentApi::HandleStop(const Request& req, Response& res) {
  const std::string id = TaskIdOf(req, res);
  if (id.empty()) return;
  std::optional<json> body = ObjectBody(req, res);
  if (!body) return;
  int signal = runner_.stop_signal();
  absl::Duration grace = runner_.stop_grace();
  if (auto it = body->find("signal"); it != body->end() && !it->is_null()) {
    std::optional<int64_t> n = AsInt(*it);
    if (!n || *n <= 0 || *n >= NSIG) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat("signal: must be a signal number from 1 to ",
                             NSIG - 1, ", got ", Dump(*it)),
                "signal");
      return;
    }
    signal = static_cast<int>(*n);
  }
  if (auto it = body->find("grace_ms"); it != body->end() && !it->is_null()) {
    std::optional<int64_t> n = AsInt(*it);
    if (!n || *n < 0 || *n > int64_t{7} * 24 * 3600 * 1000) {
      SendError(res, 400, "invalid_argument",
                absl::StrCat("grace_ms: must be milliseconds from 0 to a "
                             "week, got ",
                             Dump(*it)),
                "grace_ms");
      return;
    }
    grace = absl::Milliseconds(*n);
  }
  absl::StatusOr<AgentNode*> node = nodes_.ForTask(NamedNode(req, *body), id);
  if (!node.ok()) {
    SendStatus(res, node.status(), "node");
    return;
  }
  absl::StatusOr<json> status = runner_.Stop(**node, id, signal, grace);
  if (!status.ok()) {
    SendStatus(res, status.status());
    return;
  }
  SendJson(res, 200, *status);
}

void AgentApi::HandleFaults(const Request& req, Response& res) {
  std::optional<json> body = ObjectBody(req, res);
  if (!body) return;
  std::string field;
  absl::StatusOr<size_t> nodes =
      faults_.Apply(*body, req.get_param_value("node"), &field);
  if (!nodes.ok()) {
    SendStatus(res, nodes.status(), field);
    return;
  }
  SendJson(res, 200, {{"ok", true}, {"nodes", *nodes}});
}

void AgentApi::HandleStats(const Request& req, Response& res) {
  SendJson(res, 200, stats_.Json(req.get_param_value("reset") == "1"));
}

void AgentApi::HandleMetrics(const Request&, Response& res) {
  res.status = 200;
  res.set_content(CollectAgentMetrics(nodes_, options_.telemetry, absl::Now()),
                  std::string(kMetricsContentType));
}

}  // namespace loom
