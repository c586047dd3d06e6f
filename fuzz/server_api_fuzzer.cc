// Fuzzes the bodies the server's REST API accepts, through the functions its
// routes call (src/loom/server/*_routes.cc), on a `Controller` over a
// `MemoryStateStore` and a six-node cluster. One input is a script
// of requests, so that a job can be submitted, started by a scheduling pass
// and then reported on by a fuzzed heartbeat:
//
//   POST /v1/agents/register
//   {"name": "h200-0", "address": "127.0.0.2:7100", "gpus": [...]}
//   POST /v1/jobs
//   name: train
//   command: [python3, train.py]
//   TICK 1
//   POST /v1/agents/heartbeat
//   {"name": "h200-0", "tasks": [{"task_id": "1.0.0", "state": "exited"}]}
//
// A line starting with `POST /` or `GET /` begins a request (the lines up to
// the next request are its body); `TICK [seconds] [fail]` runs a scheduling
// pass after `seconds` (default 1) and delivers the agent actions it made
// (as failed with `fail`: the agent unreachable, or answering 500 with the
// TICK's body); `RESTART` builds a new controller from the store,
// as a restarted server does. Each reply, and each error reply, is
// serialised as the server does (bytes that are not UTF-8 become U+FFFD),
// except that job spec errors must be UTF-8 as they are; launch bodies are
// serialised strictly, as the dispatcher does.
//
// Checks: no exception escapes a route; errors are statuses of the codes
// the server maps to 4xx and 503 answers (never Internal or Unknown); a
// restarted controller loads what the last one stored: every job, and
// finished jobs in the same state; `/metrics` writes without error.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_check.h"
#include "loom/common/metrics_text.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_spec.h"
#include "loom/core/service_spec.h"
#include "loom/server/controller.h"
#include "loom/server/job_record.h"
#include "loom/server/submission_policy.h"
#include "loom/server/token_request.h"
#include "loom/store/memory_state_store.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using nlohmann::json;

// At most this many requests of one input are run.
constexpr size_t kMaxRequests = 64;

struct Request {
  std::string verb;    // POST, GET, TICK or RESTART
  std::string target;  // path and query, or TICK's arguments
  std::string body;
};

bool IsRequestLine(absl::string_view line) {
  return absl::StartsWith(line, "POST /") || absl::StartsWith(line, "GET /") ||
         absl::StartsWith(line, "TICK") || absl::StartsWith(line, "RESTART");
}

std::vector<Request> SplitRequests(absl::string_view text) {
  std::vector<Request> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (IsRequestLine(line)) {
      if (out.size() == kMaxRequests) break;
      Request r;
      const size_t space = line.find(' ');
      r.verb = std::string(line.substr(0, space));
      if (space != absl::string_view::npos) {
        r.target = std::string(line.substr(space + 1));
      }
      out.push_back(std::move(r));
    } else if (!out.empty()) {
      absl::StrAppend(&out.back().body, out.back().body.empty() ? "" : "\n",
                      line);
    }
  }
  return out;
}

// The server's `JsonBody`: the body must be a JSON object.
absl::StatusOr<json> JsonBody(const std::string& body) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("the request body is not a JSON object");
  }
  return j;
}

// Splits "path?a=1&b=2".
std::pair<std::string, std::vector<std::pair<std::string, std::string>>>
SplitTarget(const std::string& target) {
  const size_t q = target.find('?');
  std::vector<std::pair<std::string, std::string>> params;
  if (q != std::string::npos) {
    for (absl::string_view kv :
         absl::StrSplit(absl::string_view(target).substr(q + 1), '&')) {
      std::pair<absl::string_view, absl::string_view> p =
          absl::StrSplit(kv, absl::MaxSplits('=', 1));
      params.emplace_back(std::string(p.first), std::string(p.second));
    }
  }
  return {target.substr(0, q), std::move(params)};
}

// "/v1/jobs/7/cancel" -> {"jobs", "7", "cancel"}; empty segments are kept
// (the server's route patterns match none). Empty for paths outside /v1/.
std::vector<std::string> V1Segments(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/v1/")) return {};
  return absl::StrSplit(path, '/');
}

// What `\d+` in a route pattern matches.
bool IsDigits(absl::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
}

// Route name of job spec parse errors.
constexpr absl::string_view kParseJobSpecRoute = "POST /v1/jobs (parse)";

// The server's `Reply`: bytes that are not UTF-8 become U+FFFD.
std::string ReplyText(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

class Harness {
 public:
  Harness() { Restart(); }

  void Run(const Request& r) {
    now_ += absl::Milliseconds(10);
    try {
      Dispatch(r);
    } catch (const std::exception& e) {
      fuzz::Fail(absl::StrCat("an exception escaped ", r.verb, " ", r.target),
                 e.what());
    }
  }

 private:
  // What the server's `ReplyResult`/`ReplyError` do with a route's outcome.
  void Reply(const absl::StatusOr<json>& r, absl::string_view route) {
    if (r.ok()) {
      (void)ReplyText(*r);
      return;
    }
    fuzz::CheckErrorCode(
        r.status(),
        {absl::StatusCode::kInvalidArgument, absl::StatusCode::kNotFound,
         absl::StatusCode::kFailedPrecondition,
         absl::StatusCode::kAlreadyExists, absl::StatusCode::kUnavailable},
        absl::StrCat(route, ": an error the API does not promise"));
    const json body = {{"error",
                        {{"code", absl::StatusCodeToString(r.status().code())},
                         {"message", std::string(r.status().message())}}}};
    // Job spec errors (core) must be UTF-8 themselves, not repaired.
    (void)(route == kParseJobSpecRoute ? body.dump() : ReplyText(body));
  }

  // Job id -> state of every job the controller has.
  std::map<int64_t, std::string> JobStates() const {
    std::map<int64_t, std::string> out;
    const json list = controller_->ListJobs(JobQuery{}, now_);
    for (const json& j : list["jobs"]) {
      out[j["id"].get<int64_t>()] = j["state"].get<std::string>();
    }
    return out;
  }

  // A new controller from the store, as a restarted server builds it. It
  // must know every job the last one acknowledged, and finished jobs must
  // stay finished as they were.
  void Restart() {
    std::map<int64_t, std::string> before;
    if (controller_ != nullptr) before = JobStates();
    controller_.reset();
    absl::StatusOr<std::unique_ptr<Controller>> c =
        Controller::Create(SmallCluster(), &store_, ControllerOptions{}, now_);
    LOOM_FUZZ_CHECK(c.ok(), "a controller cannot load what it stored: " +
                                c.status().ToString());
    controller_ = *std::move(c);
    const std::map<int64_t, std::string> after = JobStates();
    for (const auto& [id, state] : before) {
      auto it = after.find(id);
      LOOM_FUZZ_CHECK(it != after.end(),
                      absl::StrCat("job ", id, " lost by a restart"));
      if (state == "succeeded" || state == "failed" || state == "cancelled") {
        LOOM_FUZZ_CHECK(
            it->second == state,
            absl::StrCat("job ", id, " was ", state, " before a restart, ",
                         it->second, " after"));
      }
    }
  }

  // A scheduling pass, then the launches and stops it made are delivered, as
  // the server's `DispatchLoop` does: all succeed, or with `fail` all fail
  // (the agent unreachable, or when `answer` is not empty, the agent
  // answered 500 with `answer` as its body). An exception out of
  // `ActionDone` is a bug even though the dispatcher survives it: the job
  // may be left half-updated.
  void Tick(const std::string& args, const std::string& answer) {
    std::vector<std::string> words =
        absl::StrSplit(args, ' ', absl::SkipEmpty());
    int64_t seconds = 1;
    if (int64_t n = 0; !words.empty() && absl::SimpleAtoi(words[0], &n)) {
      seconds = std::clamp<int64_t>(n, 0, 7 * 24 * 3600);
    }
    const bool fail = absl::StrContains(args, "fail");
    now_ += absl::Seconds(seconds);
    controller_->Tick(now_);
    for (const AgentAction& a : controller_->TakeActions()) {
      (void)a.body.dump();  // the dispatcher's POST body
      absl::Status st;
      if (fail && answer.empty()) {
        st = absl::UnavailableError(absl::StrCat(
            "agent ", a.node, " at ", a.address, " unreachable: Connection"));
      } else if (fail) {
        // The agent's own message when it sent one, else the start of its
        // answer, as a JSON string.
        std::string what = answer.substr(0, 300);
        json parsed = json::parse(answer, nullptr, false);
        if (parsed.is_object() && parsed.contains("error") &&
            parsed["error"].is_object() &&
            parsed["error"].value("message", json()).is_string()) {
          what = parsed["error"]["message"].get<std::string>();
        }
        st = absl::InternalError(absl::StrCat(
            "agent ", a.node, " answered 500: ", ReplyText(json(what))));
      }
      controller_->ActionDone(a, st, now_);
    }
  }

  // Parses the job id of a route as the server's `JobIdOf` does.
  static absl::StatusOr<JobId> JobIdOf(const std::string& digits) {
    JobId id = 0;
    if (!absl::SimpleAtoi(digits, &id) || id <= 0) {
      return absl::InvalidArgumentError("bad job id");
    }
    return id;
  }

  void Post(const std::string& target, const std::string& body) {
    const std::string path = SplitTarget(target).first;
    const std::vector<std::string> seg = V1Segments(path);
    if (path == "/v1/jobs") {
      absl::StatusOr<JobSpec> spec = ParseJobSpec(body, "request body");
      if (!spec.ok()) return Reply(spec.status(), kParseJobSpecRoute);
      CheckSubmissionPolicy(*spec);
      return Reply(controller_->Submit(*std::move(spec), "", now_),
                   "POST /v1/jobs");
    }
    if (path == "/v1/tokens") return TokenRequestOf(body);
    if (path == "/v1/jobs/release") return ReleaseMany(body);
    if (path == "/v1/agents/register" || path == "/v1/agents/heartbeat") {
      absl::StatusOr<json> j = JsonBody(body);
      if (!j.ok()) return Reply(j.status(), path);
      return Reply(path == "/v1/agents/register"
                       ? controller_->Register(*j, now_)
                       : controller_->Heartbeat(*j, now_),
                   path);
    }
    // /v1/jobs/(\d+)/(cancel|checkpoint|release)
    if (seg.size() == 3 && seg[0] == "jobs" && IsDigits(seg[1])) {
      absl::StatusOr<JobId> id = JobIdOf(seg[1]);
      if (!id.ok()) return Reply(id.status(), path);
      if (seg[2] == "cancel") {
        return Reply(controller_->Cancel(*id, now_), "cancel");
      }
      if (seg[2] == "release") {
        return Reply(controller_->Release(*id, now_), "release");
      }
      if (seg[2] == "checkpoint") return Checkpoint(*id, body);
    }
    // Services and the gateway's reports (service_routes.cc).
    if (path == "/v1/services") {
      absl::StatusOr<ServiceSpec> spec =
          ParseServiceSpec(body, "request body");
      if (!spec.ok()) return Reply(spec.status(), "POST /v1/services (parse)");
      spec->user = "root";
      return Reply(controller_->ApplyService(*std::move(spec), now_),
                   "POST /v1/services");
    }
    if (path == "/v1/gateway/report") {
      absl::StatusOr<json> j = JsonBody(body);
      if (!j.ok()) return Reply(j.status(), path);
      absl::Status st = controller_->GatewayReport(*j, now_);
      return Reply(st.ok() ? absl::StatusOr<json>(json::object())
                           : absl::StatusOr<json>(st),
                   path);
    }
    if (seg.size() == 3 && seg[0] == "services" && seg[2] == "scale") {
      absl::StatusOr<json> j = JsonBody(body);
      if (!j.ok()) return Reply(j.status(), path);
      auto n = j->find("replicas");
      if (n == j->end() || !n->is_number_integer()) return;  // a 400
      const int64_t v = n->get<int64_t>();
      return Reply(controller_->ScaleService(
                       seg[1],
                       v < 0 || v > kMaxServiceReplicas ? -1
                                                        : static_cast<int>(v),
                       now_),
                   "POST /v1/services/{name}/scale");
    }
    if (seg.size() == 3 && seg[0] == "services" && seg[2] == "delete") {
      return Reply(controller_->DeleteService(seg[1], now_),
                   "POST /v1/services/{name}/delete");
    }
    // /v1/nodes/([^/]+)/(cordon|uncordon|drain)
    if (seg.size() == 3 && seg[0] == "nodes" && !seg[1].empty() &&
        (seg[2] == "cordon" || seg[2] == "uncordon" || seg[2] == "drain")) {
      return Reply(controller_->SetNodeMode(seg[1], seg[2], now_),
                   "POST /v1/nodes/{name}/{op}");
    }
  }

  // The route's `CheckSubmission`, as an admin and as a user of `search`,
  // on copies (the job is then submitted as the admin's would be, so that
  // the corpus keeps reaching the controller): errors are 400 or 403 only.
  static void CheckSubmissionPolicy(const JobSpec& spec) {
    const Principal admin = {.user = "root", .role = Role::kAdmin};
    const Principal user = {
        .user = "alice", .role = Role::kUser, .projects = {"search"}};
    for (const Principal& p : {admin, user}) {
      JobSpec copy = spec;
      absl::Status st = CheckSubmission(p, SmallCluster(), &copy);
      if (st.ok()) {
        LOOM_FUZZ_CHECK(!copy.user.empty(), "CheckSubmission left no user");
        continue;
      }
      fuzz::CheckErrorCode(st,
                           {absl::StatusCode::kInvalidArgument,
                            absl::StatusCode::kPermissionDenied},
                           "CheckSubmission: an error that is not 400 or 403");
      (void)ReplyText({{"error", {{"message", std::string(st.message())}}}});
    }
  }

  // POST /v1/tokens: the body is read by `ParseTokenRequest` (making the
  // token is the auth fuzzer's). A request it accepts names a valid user.
  static void TokenRequestOf(const std::string& body) {
    absl::StatusOr<json> j = JsonBody(body);
    if (!j.ok()) return;  // a 400
    absl::StatusOr<TokenRequest> t = ParseTokenRequest(*j, SmallCluster());
    if (!t.ok()) {
      fuzz::CheckErrorCode(t.status(), {absl::StatusCode::kInvalidArgument},
                           "POST /v1/tokens: an error that is not 400");
      (void)ReplyText(
          {{"error", {{"message", std::string(t.status().message())}}}});
      return;
    }
    LOOM_FUZZ_CHECK(t->role != Role::kNode && t->role != Role::kJob,
                    "POST /v1/tokens accepted a node or job token request");
    LOOM_FUZZ_CHECK(
        t->role == Role::kJoin ? t->user.empty() : IsValidUserName(t->user),
        absl::StrCat("POST /v1/tokens accepted user '", t->user, "'"));
    LOOM_FUZZ_CHECK(
        t->ttl == absl::ZeroDuration() || t->ttl >= absl::Seconds(1),
        "POST /v1/tokens accepted a TTL under 1 s");
  }

  // POST /v1/jobs/{id}/checkpoint: an empty body or {"step": n}.
  void Checkpoint(JobId id, const std::string& body) {
    std::optional<int64_t> step;
    if (!body.empty()) {
      json j = json::parse(body, nullptr, false);
      if (j.is_discarded() || !j.is_object()) return;  // a 400
      if (j.contains("step")) {
        if (!j["step"].is_number_integer() || j["step"].get<int64_t>() < 0) {
          return;  // a 400
        }
        step = j["step"].get<int64_t>();
      }
    }
    Reply(controller_->Checkpoint(id, step, now_), "checkpoint");
  }

  // POST /v1/jobs/release: {"ids": [1, 2, ...]}.
  void ReleaseMany(const std::string& body) {
    json j = json::parse(body, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("ids") ||
        !j["ids"].is_array() || j["ids"].size() > 100000) {
      return;  // a 400
    }
    std::vector<JobId> ids;
    for (const json& v : j["ids"]) {
      if (!v.is_number_integer()) return;  // a 400
      ids.push_back(v.get<JobId>());
    }
    std::vector<absl::Status> errors;
    controller_->ReleaseMany(ids, now_, &errors);
    LOOM_FUZZ_CHECK(errors.size() == ids.size(), "one status per id");
    for (const absl::Status& st : errors) {
      if (!st.ok()) Reply(st, "POST /v1/jobs/release");
    }
  }

  void Get(const std::string& target) {
    auto [path, params] = SplitTarget(target);
    const std::vector<std::string> seg = V1Segments(path);
    if (path == "/v1/services") {
      (void)ReplyText(controller_->ListServices(now_));
      return;
    }
    if (path == "/v1/gateway/config") {
      (void)ReplyText(controller_->GatewayConfig(now_));
      return;
    }
    if (seg.size() == 2 && seg[0] == "services") {
      return Reply(controller_->GetService(seg[1], now_),
                   "GET /v1/services/{name}");
    }
    if (path == "/v1/jobs") {
      JobQuery q;
      for (const auto& [key, value] : params) {
        if (key == "state") {
          for (absl::string_view s : absl::StrSplit(value, ',')) {
            absl::StatusOr<JobState> st = ParseJobState(std::string(s));
            if (!st.ok()) return Reply(st.status(), "GET /v1/jobs");
            q.states.push_back(*st);
          }
        } else if (key == "project") {
          q.project = value;
        } else if (key == "user") {
          q.user = value;
        } else if (key == "limit" && !absl::SimpleAtoi(value, &q.limit)) {
          return;  // a 400
        }
      }
      (void)ReplyText(controller_->ListJobs(q, now_));
    } else if ((seg.size() == 2 || seg.size() == 3) && seg[0] == "jobs" &&
               IsDigits(seg[1]) &&
               (seg.size() == 2 || seg[2] == "events" || seg[2] == "logs")) {
      // /v1/jobs/(\d+)(/events|/logs)?
      absl::StatusOr<JobId> id = JobIdOf(seg[1]);
      if (!id.ok()) return Reply(id.status(), "GET /v1/jobs/{id}");
      if (seg.size() == 3 && seg[2] == "logs") {
        int64_t task = 0;
        for (const auto& [key, value] : params) {
          if (key == "task" && (!absl::SimpleAtoi(value, &task) || task < 0 ||
                                task > INT32_MAX)) {
            return;  // a 400
          }
        }
        absl::StatusOr<std::pair<std::string, std::string>> where =
            controller_->TaskLocation(*id, static_cast<int>(task));
        if (!where.ok()) Reply(where.status(), "GET /v1/jobs/{id}/logs");
        return;
      }
      absl::StatusOr<json> job = controller_->GetJob(*id, now_);
      if (job.ok() && seg.size() == 3) {  // events
        (void)ReplyText(json{{"events", (*job)["events"]}});
        return;
      }
      Reply(job, "GET /v1/jobs/{id}");
    } else if (path == "/v1/nodes") {
      (void)ReplyText(controller_->ListNodes(now_));
    } else if (seg.size() == 2 && seg[0] == "nodes" && !seg[1].empty()) {
      // /v1/nodes/([^/]+)
      Reply(controller_->GetNode(seg[1], now_), "GET /v1/nodes/{name}");
    } else if (path == "/v1/projects") {
      (void)ReplyText(controller_->ListProjects(now_));
    } else if (path == "/metrics") {
      std::string text;
      MetricsWriter out(&text);
      controller_->WriteMetrics(out, now_);
      LOOM_FUZZ_CHECK(out.status().ok(), out.status().ToString());
    }
  }

  void Dispatch(const Request& r) {
    if (r.verb == "TICK") return Tick(r.target, r.body);
    if (r.verb == "RESTART") return Restart();
    // The server's routes never see more than a short path.
    if (r.target.size() > 256) return;
    if (r.verb == "POST") return Post(r.target, r.body);
    if (r.verb == "GET") return Get(r.target);
  }

  // Six nodes (h200-0..3, a100-0..1) under a three-level tree, two projects
  // with quotas: small enough that scripts reach contention, preemption and
  // quota reclaim, and that a controller is quick to build for each input.
  static const Cluster& SmallCluster() {
    static const Cluster* cluster = new Cluster(*ParseClusterSpec(R"yaml(
name: fuzz
pools:
  - {name: h200, nodes: 4, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
  - {name: a100, nodes: 2, gpu: {model: a100, count: 8}, cpus: 96, memory: 1Ti}
network: {nodes_per_leaf: 2, leaves_per_spine: 2}
projects:
  - {name: search, quota_gpus: 16, weight: 2}
  - {name: research, quota_gpus: 8}
)yaml",
                                                                  "fuzz.yaml"));
    return *cluster;
  }

  MemoryStateStore store_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
  std::unique_ptr<Controller> controller_;
};

}  // namespace
}  // namespace loom

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<loom::Request> requests = loom::SplitRequests(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  if (requests.empty()) return 0;
  loom::Harness harness;
  for (const loom::Request& r : requests) harness.Run(r);
  return 0;
}
