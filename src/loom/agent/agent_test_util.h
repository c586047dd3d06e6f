#pragma once

// What the tests of agent_test share (test-only; not part of loom_agent): a
// loom server stand-in (`FakeServer`) that answers registrations and
// heartbeats and records them, the options and start of an agent against it
// (`BaseOptions`, `StartAgent`), a client of the agent API (`AgentClient`),
// a launch body (`Launch`), and small helpers: `WaitFor`, `TempDir`,
// `StateIs`, `HasProblem`, `kGi`. For the tests of single parts, without an
// agent: emulated nodes with fake tasks (`FakeNodes`) and a log that keeps
// its lines (`CapturedLog`).

#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/node_table.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace agent_testing {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline constexpr int64_t kGi = int64_t{1} << 30;

// Polls `done` every 20 ms until it holds or `timeout` passes.
inline bool WaitFor(const std::function<bool()>& done,
                    absl::Duration timeout = absl::Seconds(15)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return done();
}

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/loom-agent-test-XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A loom server stand-in on 127.0.0.1: answers registrations and heartbeats
// (heartbeat_interval_ms 100) and records them.
class FakeServer {
 public:
  FakeServer() {
    server_.Post("/v1/agents/register",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   OnRegister(req, res);
                 });
    server_.Post("/v1/agents/heartbeat",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   OnHeartbeat(req, res);
                 });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    WaitFor([this] { return server_.is_running(); });
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

  // Heartbeat replies ack every task reported as ended.
  void set_auto_ack(bool on) {
    absl::MutexLock lock(&mu_);
    auto_ack_ = on;
  }
  // The next reply to `node` lists `task_id` in `stop`.
  void StopOnce(const std::string& node, const std::string& task_id) {
    absl::MutexLock lock(&mu_);
    stops_[node].push_back(task_id);
  }
  // The next heartbeat of `node` is answered with `status`.
  void RejectHeartbeatOnce(const std::string& node, int status) {
    absl::MutexLock lock(&mu_);
    reject_heartbeat_[node] = status;
  }
  // The next `count` registrations are answered with `status`.
  void RejectRegistrations(int count, int status) {
    absl::MutexLock lock(&mu_);
    reject_registrations_ = count;
    reject_status_ = status;
  }

  std::vector<json> registrations() const {
    absl::MutexLock lock(&mu_);
    return registrations_;
  }
  int registration_count(const std::string& node) const {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const json& r : registrations_) n += r.value("name", "") == node;
    return n;
  }
  int attempts() const {
    absl::MutexLock lock(&mu_);
    return attempts_;
  }
  // As `loom server` with authentication: a registration bearing
  // `join_token` gets `credential`; every registration gets `agent_key`.
  void set_auth(std::string join_token, std::string credential,
                std::string agent_key) {
    absl::MutexLock lock(&mu_);
    join_token_ = std::move(join_token);
    credential_ = std::move(credential);
    agent_key_ = std::move(agent_key);
  }
  // The `Authorization` header of the latest call to `path`.
  std::string LastBearer(const std::string& path) const {
    absl::MutexLock lock(&mu_);
    auto it = bearers_.find(path);
    return it == bearers_.end() ? "" : it->second;
  }
  // Heartbeats get no answer until unfrozen (a frozen leader).
  void set_frozen(bool frozen) { frozen_.store(frozen); }
  // Told to agents at registration (`fence_after_ms`); 0: not sent.
  void set_fence_after_ms(int ms) {
    absl::MutexLock lock(&mu_);
    fence_after_ms_ = ms;
  }
  // The `health` of the latest heartbeat from `node` (null: none yet).
  json LastHealth(const std::string& node) const {
    absl::MutexLock lock(&mu_);
    auto it = last_health_.find(node);
    return it == last_health_.end() ? json() : it->second;
  }
  // The bodies of every heartbeat from `node`, oldest first.
  std::vector<json> Heartbeats(const std::string& node) const {
    absl::MutexLock lock(&mu_);
    auto it = heartbeat_bodies_.find(node);
    return it == heartbeat_bodies_.end() ? std::vector<json>() : it->second;
  }
  int heartbeat_count(const std::string& node) const {
    absl::MutexLock lock(&mu_);
    auto it = heartbeats_.find(node);
    return it == heartbeats_.end() ? 0 : it->second;
  }
  // The status of `task_id` in the latest call from `node` that listed it;
  // null when none did.
  json LastStatus(const std::string& node, const std::string& task_id) const {
    absl::MutexLock lock(&mu_);
    auto n = last_status_.find(node);
    if (n == last_status_.end()) return json();
    auto t = n->second.find(task_id);
    return t == n->second.end() ? json() : t->second;
  }
  // The task ids of the latest call from `node`.
  std::set<std::string> LastTaskIds(const std::string& node) const {
    absl::MutexLock lock(&mu_);
    auto n = last_ids_.find(node);
    return n == last_ids_.end() ? std::set<std::string>() : n->second;
  }

 private:
  void Record(const std::string& node, const json& tasks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    std::set<std::string> ids;
    if (tasks.is_array()) {
      for (const json& t : tasks) {
        last_status_[node][t.value("task_id", "")] = t;
        ids.insert(t.value("task_id", ""));
      }
    }
    last_ids_[node] = ids;
  }
  json TakeStops(const std::string& node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    json stop = json::array();
    for (const std::string& id : stops_[node]) stop.push_back(id);
    stops_[node].clear();
    return stop;
  }

  void OnRegister(const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body, nullptr, false);
    absl::MutexLock lock(&mu_);
    ++attempts_;
    bearers_[req.path] = req.get_header_value("Authorization");
    if (reject_registrations_ > 0) {
      --reject_registrations_;
      res.status = reject_status_;
      res.set_content(
          R"({"error": {"code": "unavailable", "message": "not yet"}})",
          "application/json");
      return;
    }
    registrations_.push_back(body);
    const std::string node = body.value("name", "");
    Record(node, body.value("tasks", json::array()));
    json out = {{"heartbeat_interval_ms", 100}, {"stop", TakeStops(node)}};
    if (fence_after_ms_ > 0) out["fence_after_ms"] = fence_after_ms_;
    if (!agent_key_.empty()) out["agent_key"] = agent_key_;
    if (!join_token_.empty() &&
        req.get_header_value("Authorization") == "Bearer " + join_token_) {
      out["credential"] = credential_;
    }
    res.set_content(out.dump(), "application/json");
  }

  void OnHeartbeat(const httplib::Request& req, httplib::Response& res) {
    // A frozen server: the connection is taken, the answer never comes in
    // time (waits up to 30 s, less once unfrozen or stopped).
    for (int i = 0; i < 300 && frozen_.load(); ++i) {
      absl::SleepFor(absl::Milliseconds(100));
    }
    const json body = json::parse(req.body, nullptr, false);
    absl::MutexLock lock(&mu_);
    const std::string node = body.value("name", "");
    ++heartbeats_[node];
    bearers_[req.path] = req.get_header_value("Authorization");
    if (auto it = reject_heartbeat_.find(node); it != reject_heartbeat_.end()) {
      res.status = it->second;
      reject_heartbeat_.erase(it);
      res.set_content(R"({"error": {"code": "failed_precondition",
                          "message": "node is not registered"}})",
                      "application/json");
      return;
    }
    const json tasks = body.value("tasks", json::array());
    heartbeat_bodies_[node].push_back(body);
    last_health_[node] = body.value("health", json());
    Record(node, tasks);
    json ack = json::array();
    if (auto_ack_) {
      for (const json& t : tasks) {
        if (t.value("state", "") != "running") ack.push_back(t["task_id"]);
      }
    }
    json out = {{"stop", TakeStops(node)}, {"ack", ack}};
    res.set_content(out.dump(), "application/json");
  }

  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;

  mutable absl::Mutex mu_;
  std::vector<json> registrations_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> heartbeats_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::map<std::string, json>> last_status_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::string>> last_ids_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<std::string>> stops_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int> reject_heartbeat_ ABSL_GUARDED_BY(mu_);
  bool auto_ack_ ABSL_GUARDED_BY(mu_) = false;
  std::string join_token_ ABSL_GUARDED_BY(mu_);
  std::string credential_ ABSL_GUARDED_BY(mu_);
  std::string agent_key_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> bearers_ ABSL_GUARDED_BY(mu_);
  int fence_after_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, json> last_health_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<json>> heartbeat_bodies_
      ABSL_GUARDED_BY(mu_);
  int reject_registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int reject_status_ ABSL_GUARDED_BY(mu_) = 503;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> frozen_{false};
};

inline AgentOptions BaseOptions(const FakeServer& server,
                                const std::string& dir) {
  AgentOptions o;
  o.server_urls = {server.url()};
  o.listen_host = "127.0.0.1";
  o.listen_port = 0;
  o.node_names = {"h200-0"};
  o.data_dir = dir;
  o.emulation = ParseGpuEmulation("8xH200").value();
  o.poll_interval = absl::Milliseconds(20);
  o.stop_grace = absl::Seconds(2);
  o.use_cgroups = false;
  // Most tests' fake server hands out no key: their agents serve their
  // loopback API open, as `loom agent --insecure` does.
  o.insecure = true;
  o.log = [](const std::string& line) {
    if (std::getenv("LOOM_TEST_VERBOSE") != nullptr) {
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  };
  return o;
}

inline std::unique_ptr<Agent> StartAgent(AgentOptions options) {
  absl::StatusOr<std::unique_ptr<Agent>> agent =
      Agent::Create(std::move(options));
  EXPECT_TRUE(agent.ok()) << agent.status();
  if (!agent.ok()) return nullptr;
  EXPECT_TRUE((*agent)->Start().ok());
  return *std::move(agent);
}

// Calls the agent API.
class AgentClient {
 public:
  explicit AgentClient(const Agent& agent)
      : client_("127.0.0.1", agent.port()) {
    client_.set_read_timeout(30, 0);
  }
  httplib::Result Post(const std::string& path, const std::string& body) {
    return client_.Post(path.c_str(), body, "application/json");
  }
  httplib::Result Post(const std::string& path, const json& body) {
    return Post(path, body.dump());
  }
  httplib::Result Get(const std::string& path) {
    return client_.Get(path.c_str());
  }

 private:
  httplib::Client client_;
};

inline json Launch(const std::string& task_id, std::vector<std::string> argv,
                   json env = json::object(), int processes = 1) {
  return {{"task_id", task_id},    {"job_id", 42}, {"task_index", 0},
          {"argv", argv},          {"env", env},   {"gpus", {0, 1}},
          {"processes", processes}};
}

inline bool StateIs(const json& status, const std::string& state) {
  return status.is_object() && status.value("state", "") == state;
}

inline bool HasProblem(const json& health, const std::string& text) {
  if (!health.is_object() || !health.contains("problems")) return false;
  for (const json& p : health["problems"]) {
    if (p.is_string() && absl::StrContains(p.get<std::string>(), text)) {
      return true;
    }
  }
  return false;
}

// An `AgentLog` whose lines a test can count.
class CapturedLog {
 public:
  CapturedLog()
      : log_([this](const std::string& line) {
          absl::MutexLock lock(&mu_);
          lines_.push_back(line);
        }) {}

  const AgentLog& log() const { return log_; }
  // How many lines contain `text`.
  int LinesWith(const std::string& text) const {
    absl::MutexLock lock(&mu_);
    return static_cast<int>(std::count_if(
        lines_.begin(), lines_.end(),
        [&](const std::string& l) { return absl::StrContains(l, text); }));
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
  const AgentLog log_;
};

// The nodes `names` (a fleet when more than one) under `data_dir`: emulated
// 8xH200, with fake tasks (nothing runs) on the clock `now`. Null, and the
// test fails, when they cannot be made.
inline std::unique_ptr<NodeTable> FakeNodes(
    const std::string& data_dir, const std::vector<std::string>& names,
    const AgentLog& log,
    std::function<absl::Time()> now = [] { return absl::Now(); }) {
  NodeTableOptions options;
  options.data_dir = data_dir;
  options.fleet = names.size() > 1;
  options.emulation = ParseGpuEmulation("8xH200").value();
  options.fake_tasks = true;
  options.use_cgroups = false;
  options.now = std::move(now);
  absl::StatusOr<std::unique_ptr<NodeTable>> table = NodeTable::Create(
      options, names, HostInfo{"test-host", 16, 64 * kGi}, {}, log);
  EXPECT_TRUE(table.ok()) << table.status();
  return table.ok() ? *std::move(table) : nullptr;
}

}  // namespace agent_testing
}  // namespace loom
