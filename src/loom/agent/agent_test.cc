#include "loom/agent/agent.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent_command.h"
#include "loom/agent/agent_metrics.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/fake_task_launcher.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/health_check.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/core/job_spec.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kGi = int64_t{1} << 30;

// Polls `done` every 20 ms until it holds or `timeout` passes.
bool WaitFor(const std::function<bool()>& done,
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
  int reject_registrations_ ABSL_GUARDED_BY(mu_) = 0;
  int reject_status_ ABSL_GUARDED_BY(mu_) = 503;
  int attempts_ ABSL_GUARDED_BY(mu_) = 0;
};

AgentOptions BaseOptions(const FakeServer& server, const std::string& dir) {
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

std::unique_ptr<Agent> StartAgent(AgentOptions options) {
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

json Launch(const std::string& task_id, std::vector<std::string> argv,
            json env = json::object(), int processes = 1) {
  return {{"task_id", task_id},    {"job_id", 42}, {"task_index", 0},
          {"argv", argv},          {"env", env},   {"gpus", {0, 1}},
          {"processes", processes}};
}

bool StateIs(const json& status, const std::string& state) {
  return status.is_object() && status.value("state", "") == state;
}

// ---------------------------------------------------------------------------

TEST(AgentTest, RegistersEmulatedInventoryAndHeartbeats) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registration_count("h200-0"); }));
  const json r = server.registrations().front();
  EXPECT_EQ(r["name"], "h200-0");
  EXPECT_EQ(r["address"], agent->address());
  EXPECT_EQ(r["address"], absl::StrCat("127.0.0.1:", agent->port()));
  EXPECT_FALSE(r["hostname"].get<std::string>().empty());
  EXPECT_EQ(r["emulated"], true);
  EXPECT_EQ(r["cpus"], 192);
  EXPECT_EQ(r["memory_bytes"], 2048 * kGi);
  ASSERT_EQ(r["gpus"].size(), 8u);
  std::set<std::string> uuids;
  for (int i = 0; i < 8; ++i) {
    const json& g = r["gpus"][i];
    EXPECT_EQ(g["index"], i);
    EXPECT_EQ(g["model"], "h200");
    EXPECT_EQ(g["memory_bytes"], 141 * kGi);
    EXPECT_TRUE(absl::StartsWith(g["uuid"].get<std::string>(), "GPU-"));
    uuids.insert(g["uuid"].get<std::string>());
  }
  EXPECT_EQ(uuids.size(), 8u);
  EXPECT_EQ(r["tasks"], json::array());
  // The server counts the registration before the agent reads the reply.
  EXPECT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  EXPECT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 3; }));

  AgentClient client(*agent);
  httplib::Result health = client.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["ok"], true);
}

TEST(AgentTest, LaunchesProcessesWithRanksReportsExitAndServesLogs) {
  FakeServer server;
  server.set_auto_ack(true);
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  json body = Launch("42.0.0",
                     {"/bin/sh", "-c",
                      "echo $RANK $LOCAL_RANK $WORLD_SIZE "
                      "$CUDA_VISIBLE_DEVICES $LOCAL_WORLD_SIZE; echo oops >&2"},
                     {{"WORLD_SIZE", "4"}}, 2);
  body["rank_base"] = 2;
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  const json launched = json::parse(res->body);
  EXPECT_EQ(launched["task_id"], "42.0.0");
  EXPECT_EQ(launched["processes"].size(), 2u);

  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "42.0.0"), "exited");
  }));
  const json status = server.LastStatus("h200-0", "42.0.0");
  EXPECT_EQ(status["exit_code"], 0);
  EXPECT_EQ(status["signal"], 0);

  res = client.Get("/v1/tasks/42.0.0/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "2 0 4 0,1 2\n");
  res = client.Get("/v1/tasks/42.0.0/logs?process=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "3 1 4 0,1 2\n");
  res = client.Get("/v1/tasks/42.0.0/logs?stream=stderr");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "oops\n");
  res = client.Get("/v1/tasks/42.0.0/logs?offset=2");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "0 4 0,1 2\n");

  // The server acknowledged the exit: the agent forgets the task (the logs
  // stay).
  ASSERT_TRUE(WaitFor(
      [&] { return !server.LastTaskIds("h200-0").contains("42.0.0"); }));
  res = client.Get("/v1/tasks/42.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/tasks/42.0.0/logs?process=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "3 1 4 0,1 2\n");
  EXPECT_FALSE(fs::exists(dir.path() + "/units/42.0.0.json"));
}

TEST(AgentTest, FollowStreamsLogsUntilTheTaskEnds) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("13.0.0", {"/bin/sh", "-c", "echo one; sleep 0.5; echo two"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  httplib::Client follower("127.0.0.1", agent->port());
  follower.set_read_timeout(20, 0);
  std::string received;
  httplib::Result streamed = follower.Get("/v1/tasks/13.0.0/logs?follow=1",
                                          [&](const char* data, size_t n) {
                                            received.append(data, n);
                                            return true;
                                          });
  ASSERT_TRUE(streamed);
  EXPECT_EQ(streamed->status, 200);
  EXPECT_EQ(received, "one\ntwo\n");
}

TEST(AgentTest, DuplicateLaunchIsAConflict) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const json body = Launch("7.0.0", {"/bin/sleep", "30"});
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  EXPECT_THAT(res->body, HasSubstr("already known"));
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"].size(), 1u);
  res = client.Post("/v1/tasks/7.0.0/stop", json{{"signal", 9}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "7.0.0"), "exited"); }));
}

TEST(AgentTest, GarbageGetsClearErrorsAndNeverCrashes) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const std::vector<std::string> bad = {
      "",
      "not json",
      "[]",
      "null",
      "{}",
      "{\"task_id\": 5, \"argv\": [\"x\"]}",
      "{\"task_id\": \"../x\", \"argv\": [\"x\"]}",
      "{\"task_id\": \"a/b\", \"argv\": [\"x\"]}",
      "{\"task_id\": \"a\", \"argv\": []}",
      "{\"task_id\": \"a\", \"argv\": \"sh\"}",
      "{\"task_id\": \"a\", \"argv\": [1]}",
      "{\"task_id\": \"a\", \"argv\": [\"\"]}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"env\": {\"A\": 1}}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"env\": {\"A=B\": \"1\"}}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"env\": []}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"processes\": 0}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"processes\": 100000}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"processes\": \"2\"}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"processes\": 1.5}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"processes\": 1e400}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"gpus\": [8]}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"gpus\": [-1]}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"gpus\": [0, 0]}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"gpus\": 3}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"rank_base\": -1}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"job_id\": \"x\"}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"job_id\": "
      "99999999999999999999999}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\"], \"limits\": {\"cpu_millis\": "
      "-1}}",
      "{\"task_id\": \"a\", \"argv\": [\"sh\\u0000x\"]}",
      "{\"task_id\": \"\xff\xfe\", \"argv\": [\"sh\"]}",
      std::string(100000, '[') + std::string(100000, ']'),
  };
  for (const std::string& body : bad) {
    httplib::Result res = client.Post("/v1/tasks", body);
    ASSERT_TRUE(res) << body.substr(0, 80);
    EXPECT_EQ(res->status, 400) << body.substr(0, 80) << " -> " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << res->body;
    EXPECT_EQ(error["error"]["code"], "invalid_argument") << body.substr(0, 80);
    EXPECT_FALSE(error["error"]["message"].get<std::string>().empty());
  }
  // A field error names the field.
  httplib::Result res = client.Post(
      "/v1/tasks", std::string("{\"task_id\": \"a\", \"argv\": [\"sh\"], "
                               "\"gpus\": [8]}"));
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["error"]["field"], "gpus");
  EXPECT_THAT(res->body, HasSubstr("has 8 GPUs"));

  json other = Launch("a", {"/bin/true"});
  other["node"] = "other";
  res = client.Post("/v1/tasks", other);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Post("/v1/tasks", std::string(2 << 20, ' '));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  res = client.Post("/v1/tasks/nope/stop", std::string("{"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = client.Post("/v1/tasks/nope/stop", json::object());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Post("/v1/tasks/nope/stop", json{{"signal", 999}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = client.Get("/v1/tasks/nope/logs?stream=stdin");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = client.Get("/v1/tasks/nope/logs?offset=-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  res = client.Get("/v1/tasks/nope/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/tasks/..%2F..%2Fetc%2Fpasswd/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Get("/v1/nowhere");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "not_found");

  res = client.Get("/healthz");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"], json::array());
}

TEST(AgentTest, ExecFailureIsReportedAndLeavesNothing) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("9.0.0", {"/nonexistent/prog"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_THAT(res->body, HasSubstr("/nonexistent/prog"));
  res = client.Get("/v1/tasks/9.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  // The id is free again.
  res = client.Post("/v1/tasks", Launch("9.0.0", {"/bin/true"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "9.0.0"), "exited"); }));
}

// Fails the launch of one chosen process id, once.
class FailingLauncher : public TaskLauncher {
 public:
  FailingLauncher(std::unique_ptr<TaskLauncher> inner, std::string fail_id)
      : inner_(std::move(inner)), fail_id_(std::move(fail_id)) {}

  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override {
    if (spec.task_id == fail_id_ && !failed_.exchange(true)) {
      return absl::InternalError("injected launch failure");
    }
    absl::StatusOr<TaskHandle> handle = inner_->Launch(spec);
    if (handle.ok()) last_pid_.store(handle->pid);
    return handle;
  }
  absl::Status Signal(const std::string& id, int signal) override {
    return inner_->Signal(id, signal);
  }
  absl::Status Stop(const std::string& id, int signal,
                    absl::Duration grace) override {
    return inner_->Stop(id, signal, grace);
  }
  std::vector<TaskEvent> Poll() override { return inner_->Poll(); }
  absl::StatusOr<std::vector<TaskInfo>> Recover() override {
    return inner_->Recover();
  }
  absl::Status Forget(const std::string& id) override {
    return inner_->Forget(id);
  }
  std::vector<TaskInfo> List() const override { return inner_->List(); }

  static std::atomic<pid_t> last_pid_;

 private:
  std::unique_ptr<TaskLauncher> inner_;
  const std::string fail_id_;
  std::atomic<bool> failed_{false};
};

std::atomic<pid_t> FailingLauncher::last_pid_{0};

TEST(AgentTest, PartialLaunchIsRolledBack) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.launcher_factory = [](const std::string&, const std::string& state)
      -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
    ShimTaskLauncherOptions shim;
    shim.state_dir = state;
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> inner =
        ShimTaskLauncher::Create(shim);
    if (!inner.ok()) return inner.status();
    return std::make_unique<FailingLauncher>(*std::move(inner), "8.0.0.p1");
  };
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const json body = Launch("8.0.0", {"/bin/sleep", "30"}, json::object(), 2);
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_THAT(res->body, HasSubstr("injected launch failure"));
  EXPECT_THAT(res->body, HasSubstr("process 1 of 2"));
  const pid_t first = FailingLauncher::last_pid_.load();
  ASSERT_GT(first, 0);
  // The process that had started is gone, and nothing is left behind.
  EXPECT_TRUE(WaitFor([&] { return ::kill(first, 0) != 0; }));
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"], json::array());
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  EXPECT_TRUE(fs::is_empty(dir.path() + "/units"));
  // A retry succeeds.
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks/8.0.0/stop", json{{"signal", 9}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "8.0.0"), "exited"); }));
}

// Records the spec of every launch and passes it on.
class RecordingLauncher : public TaskLauncher {
 public:
  explicit RecordingLauncher(std::unique_ptr<TaskLauncher> inner)
      : inner_(std::move(inner)) {}

  absl::StatusOr<TaskHandle> Launch(const TaskSpec& spec) override {
    {
      absl::MutexLock lock(&mu_);
      specs_.push_back(spec);
    }
    return inner_->Launch(spec);
  }
  absl::Status Signal(const std::string& id, int signal) override {
    return inner_->Signal(id, signal);
  }
  absl::Status Stop(const std::string& id, int signal,
                    absl::Duration grace) override {
    return inner_->Stop(id, signal, grace);
  }
  std::vector<TaskEvent> Poll() override { return inner_->Poll(); }
  absl::StatusOr<std::vector<TaskInfo>> Recover() override {
    return inner_->Recover();
  }
  absl::Status Forget(const std::string& id) override {
    return inner_->Forget(id);
  }
  std::vector<TaskInfo> List() const override { return inner_->List(); }

  std::vector<TaskSpec> specs() const {
    absl::MutexLock lock(&mu_);
    return specs_;
  }

 private:
  std::unique_ptr<TaskLauncher> inner_;
  mutable absl::Mutex mu_;
  std::vector<TaskSpec> specs_ ABSL_GUARDED_BY(mu_);
};

// An agent that may switch users (as if root), with a fake user database
// ("alice": uid 1234, gid 5678) and a launcher that records specs and runs
// nothing.
struct RunAsUserAgent {
  RunAsUserAgent(const FakeServer& server, const std::string& dir,
                 std::function<void(AgentOptions&)> adjust = nullptr) {
    AgentOptions options = BaseOptions(server, dir);
    options.can_switch_users = true;
    options.lookup_user =
        [this](const std::string& name) -> absl::StatusOr<UserAccount> {
      lookups.fetch_add(1);
      if (name == "broken") return absl::UnavailableError("NSS is down");
      if (name != "alice") return absl::NotFoundError("no such user");
      return UserAccount{"alice", 1234, 5678, "/nonexistent/home/alice"};
    };
    options.launcher_factory = [this](const std::string&, const std::string&)
        -> absl::StatusOr<std::unique_ptr<TaskLauncher>> {
      auto recording = std::make_unique<RecordingLauncher>(
          std::make_unique<FakeTaskLauncher>(FakeTaskLauncherOptions{}));
      launcher = recording.get();
      return recording;
    };
    options.log = [this](const std::string& line) {
      absl::MutexLock lock(&mu);
      log.push_back(line);
    };
    if (adjust) adjust(options);
    agent = StartAgent(std::move(options));
  }

  int LogLinesWith(const std::string& text) {
    absl::MutexLock lock(&mu);
    return static_cast<int>(
        std::count_if(log.begin(), log.end(), [&](const std::string& line) {
          return absl::StrContains(line, text);
        }));
  }

  std::atomic<int> lookups{0};
  RecordingLauncher* launcher = nullptr;
  absl::Mutex mu;
  std::vector<std::string> log ABSL_GUARDED_BY(mu);
  // Last, so that it is destroyed first: its threads log into `log` and
  // count `lookups` until it stops.
  std::unique_ptr<Agent> agent;
};

TEST(AgentTest, RunsTasksAsTheUserOfTheirJob) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path());
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  json body =
      Launch("30.0.0", {"/bin/true"}, {{"LOOM_CHECKPOINT_DIR", "/ckpt/30"}}, 2);
  body["user"] = "alice";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  std::vector<TaskSpec> specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 2u);
  for (const TaskSpec& spec : specs) {
    EXPECT_EQ(spec.uid, std::optional<uid_t>(1234));
    EXPECT_EQ(spec.gid, std::optional<gid_t>(5678));
    EXPECT_EQ(spec.env.at("HOME"), "/nonexistent/home/alice");
    EXPECT_EQ(spec.env.at("USER"), "alice");
    EXPECT_EQ(spec.env.at("LOGNAME"), "alice");
    // The home directory does not exist here.
    EXPECT_EQ(spec.working_dir, "/");
    EXPECT_EQ(spec.create_dirs, std::vector<std::string>{"/ckpt/30"});
  }

  // What the job sets wins; a working directory is kept.
  body = Launch("30.0.1", {"/bin/true"}, {{"HOME", "/scratch/alice"}});
  body["user"] = "alice";
  body["working_dir"] = "/scratch/alice/run";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[2].env.at("HOME"), "/scratch/alice");
  EXPECT_EQ(specs[2].working_dir, "/scratch/alice/run");
  EXPECT_TRUE(specs[2].create_dirs.empty());

  // A launch that names no user (an older server) runs as the agent.
  res = client.Post("/v1/tasks", Launch("30.0.2", {"/bin/true"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  specs = a.launcher->specs();
  ASSERT_EQ(specs.size(), 4u);
  EXPECT_FALSE(specs[3].uid.has_value());
  EXPECT_FALSE(specs[3].env.contains("USER"));
  EXPECT_EQ(a.LogLinesWith("not running as root"), 0);
}

TEST(AgentTest, AnUnknownUserFailsTheLaunchWithAClearReason) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path());
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  json body = Launch("31.0.0", {"/bin/true"});
  body["user"] = "bob";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const json error = json::parse(res->body)["error"];
  EXPECT_EQ(error["field"], "user");
  EXPECT_EQ(error["message"], "user 'bob' does not exist on node h200-0");
  EXPECT_TRUE(a.launcher->specs().empty());
  res = client.Get("/v1/tasks/31.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_EQ(a.LogLinesWith("user 'bob' does not exist on node h200-0"), 1);

  // A user database that cannot be read is the agent's problem: 500.
  body["user"] = "broken";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_THAT(res->body, HasSubstr("cannot look up user 'broken'"));
  EXPECT_THAT(res->body, HasSubstr("NSS is down"));

  // The task id is still free.
  body["user"] = "alice";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;

  body["user"] = 7;
  body["task_id"] = "31.0.1";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"]["field"], "user");
}

TEST(AgentTest, WithoutRootTasksRunAsTheAgentsUser) {
  FakeServer server;
  TempDir dir;
  RunAsUserAgent a(server, dir.path(),
                   [](AgentOptions& o) { o.can_switch_users = false; });
  ASSERT_NE(a.agent, nullptr);
  AgentClient client(*a.agent);
  for (const char* id : {"32.0.0", "32.0.1"}) {
    json body = Launch(id, {"/bin/true"});
    body["user"] = "bob";  // not even looked up
    httplib::Result res = client.Post("/v1/tasks", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 201) << res->body;
  }
  ASSERT_EQ(a.launcher->specs().size(), 2u);
  EXPECT_FALSE(a.launcher->specs()[0].uid.has_value());
  EXPECT_EQ(a.lookups.load(), 0);
  EXPECT_EQ(a.LogLinesWith("not running as root: tasks run as uid"), 1);

  // Turned off (--run-as-user=false): no switch and nothing to say.
  TempDir dir2;
  RunAsUserAgent off(server, dir2.path(),
                     [](AgentOptions& o) { o.run_as_user = false; });
  ASSERT_NE(off.agent, nullptr);
  AgentClient client2(*off.agent);
  json body = Launch("33.0.0", {"/bin/true"});
  body["user"] = "bob";
  httplib::Result res = client2.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(off.lookups.load(), 0);
  EXPECT_EQ(off.LogLinesWith("not running as root"), 0);
}

TEST(AgentTest, FakeTasksIgnoreTheUser) {
  FakeServer server;
  TempDir dir;
  std::atomic<int> lookups{0};
  AgentOptions options = BaseOptions(server, dir.path());
  options.fake_tasks = true;
  options.can_switch_users = true;
  options.lookup_user = [&](const std::string&) -> absl::StatusOr<UserAccount> {
    lookups.fetch_add(1);
    return absl::NotFoundError("no such user");
  };
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  json body = Launch("34.0.0", {"train"}, {{"LOOM_FAKE_SECONDS", "1"}});
  body["user"] = "bob";
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 201) << res->body;
  EXPECT_EQ(lookups.load(), 0);
}

TEST(UserAccountTest, LooksUpThePasswdDatabase) {
  absl::StatusOr<UserAccount> root = LookUpSystemUser("root");
  ASSERT_TRUE(root.ok()) << root.status();
  EXPECT_EQ(root->uid, 0u);
  EXPECT_EQ(root->gid, 0u);
  EXPECT_EQ(root->name, "root");
  EXPECT_FALSE(root->home.empty());
  EXPECT_TRUE(
      absl::IsNotFound(LookUpSystemUser("loom-no-such-user-xyz").status()));
}

TEST(AgentTest, StopSignalsThenKillsAfterTheGrace) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);

  // Ignores SIGTERM: SIGKILL after the grace.
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("5.0.0", {"/bin/sh", "-c", "trap '' TERM; sleep 30 & wait"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "5.0.0"), "running");
  }));
  res = client.Post("/v1/tasks/5.0.0/stop",
                    json{{"signal", 15}, {"grace_ms", 300}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.0"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.0")["signal"], SIGKILL);
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.0")["exit_code"], 128 + SIGKILL);

  // Default signal: SIGTERM.
  res = client.Post("/v1/tasks", Launch("5.0.1", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  res = client.Post("/v1/tasks/5.0.1/stop", std::string());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.1"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.1")["signal"], SIGTERM);

  // The server lists a task in `stop`.
  res = client.Post("/v1/tasks", Launch("5.0.2", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "5.0.2"), "running");
  }));
  server.StopOnce("h200-0", "5.0.2");
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.2"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "5.0.2")["signal"], SIGTERM);
}

TEST(AgentTest, AFailedProcessStopsItsSiblings) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("6.0.0",
             {"/bin/sh", "-c",
              "if [ \"$LOCAL_RANK\" = 1 ]; then exit 3; fi; exec sleep 30"},
             json::object(), 2));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "6.0.0"), "exited"); },
      absl::Seconds(10)));
  const json status = server.LastStatus("h200-0", "6.0.0");
  EXPECT_EQ(status["exit_code"], 3);
  EXPECT_THAT(status["reason"].get<std::string>(),
              HasSubstr("process 1 exited with code 3"));
}

TEST(AgentTest, FakeTasksExitAfterLoomFakeSeconds) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.fake_tasks = true;
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const absl::Time start = absl::Now();
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("3.0.0", {"python3", "train.py"}, {{"LOOM_FAKE_SECONDS", "1"}}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "3.0.0"), "running");
  }));
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "3.0.0"), "exited"); },
      absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(950));
  EXPECT_EQ(server.LastStatus("h200-0", "3.0.0")["exit_code"], 0);
  res = client.Get("/v1/tasks/3.0.0/logs");
  ASSERT_TRUE(res);
  EXPECT_THAT(res->body, HasSubstr("fake task 3.0.0"));
  EXPECT_TRUE(fs::is_empty(dir.path() + "/tasks"));
  // A bad LOOM_FAKE_SECONDS is a bad request.
  res = client.Post("/v1/tasks",
                    Launch("3.0.1", {"x"}, {{"LOOM_FAKE_SECONDS", "soon"}}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
}

TEST(AgentTest, RestartedAgentReportsItsRunningTasks) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> first = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(first, nullptr);
  {
    AgentClient client(*first);
    httplib::Result res =
        client.Post("/v1/tasks", Launch("11.0.0", {"/bin/sleep", "30"}));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
    res = client.Post(
        "/v1/tasks", Launch("11.0.1", {"/bin/sleep", "30"}, json::object(), 2));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "11.0.1"), "running");
  }));
  first.reset();  // the agent stops; its tasks run on

  const int before = server.registration_count("h200-0");
  std::unique_ptr<Agent> second = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  const json registration = server.registrations().back();
  std::map<std::string, std::string> states;
  for (const json& t : registration["tasks"]) {
    states[t["task_id"].get<std::string>()] = t["state"].get<std::string>();
  }
  EXPECT_EQ(states, (std::map<std::string, std::string>{
                        {"11.0.0", "running"}, {"11.0.1", "running"}}));

  AgentClient client(*second);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("11.0.0", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  for (const char* id : {"11.0.0", "11.0.1"}) {
    res = client.Post(absl::StrCat("/v1/tasks/", id, "/stop"), json::object());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  for (const char* id : {"11.0.0", "11.0.1"}) {
    ASSERT_TRUE(WaitFor(
        [&] { return StateIs(server.LastStatus("h200-0", id), "exited"); }));
    EXPECT_EQ(server.LastStatus("h200-0", id)["signal"], SIGTERM) << id;
  }
}

TEST(AgentTest, RestartedAgentFencesTasksWhoseLeaseRanOut) {
  FakeServer server;
  server.set_fence_after_ms(1000);
  TempDir dir;
  std::unique_ptr<Agent> first = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(first, nullptr);
  {
    AgentClient client(*first);
    for (const char* id : {"12.0.0", "12.0.1"}) {
      httplib::Result res =
          client.Post("/v1/tasks", Launch(id, {"/bin/sleep", "30"}));
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 201) << res->body;
    }
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "12.0.1"), "running");
  }));
  // Back within the lease: the task is re-adopted and keeps running.
  first.reset();
  std::unique_ptr<Agent> second = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitFor([&] { return second->Registered("h200-0"); }));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(StateIs(server.LastStatus("h200-0", "12.0.0"), "running"));
  // Gone longer than the lease: the server may run the job elsewhere, so
  // the recovered tasks are killed before the agent registers.
  second.reset();
  absl::SleepFor(absl::Milliseconds(1500));
  const int before = server.registration_count("h200-0");
  std::unique_ptr<Agent> third = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(third, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  for (const char* id : {"12.0.0", "12.0.1"}) {
    ASSERT_TRUE(WaitFor([&] {
      return StateIs(server.LastStatus("h200-0", id), "exited");
    })) << id;
    EXPECT_EQ(server.LastStatus("h200-0", id)["signal"], SIGKILL) << id;
  }
}

// A shim fences its task only once the process that launched it is gone
// (tests/e2e_faults_test.sh kills an agent process and checks that). Here
// the agent is an object in this process, which stays: the shim leaves its
// task to the live process, and the next agent fences it.
TEST(AgentTest, ShimsLeaveFencingToTheProcessThatLaunchedThem) {
  FakeServer server;
  server.set_fence_after_ms(1000);
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  const std::string pid_file = dir.path() + "/task.pid";
  {
    AgentClient client(*agent);
    httplib::Result res = client.Post(
        "/v1/tasks",
        Launch("13.0.0",
               {"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"}));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "13.0.0"), "running");
  }));
  pid_t pid = 0;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(pid_file);
    return static_cast<bool>(in >> pid) && pid > 0;
  }));
  // While the agent renews the lease, the task runs past the fence limit.
  absl::SleepFor(absl::Milliseconds(2500));
  ASSERT_EQ(::kill(pid, 0), 0) << "fenced while the lease was renewed";
  // The agent object goes; its process does not. The lease runs out, and
  // the shim, still this process's child, leaves the task alone.
  agent.reset();
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_EQ(::kill(pid, 0), 0) << "a shim fenced while its launcher lives";
  // The next agent finds the lease run out and fences the task itself.
  const int before = server.registration_count("h200-0");
  agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "13.0.0"), "exited");
  }));
  EXPECT_EQ(server.LastStatus("h200-0", "13.0.0")["signal"], SIGKILL);
}

TEST(AgentTest, SaysOnceWhenItCannotWriteTheLease) {
  FakeServer server;
  server.set_fence_after_ms(5000);
  TempDir dir;
  // A directory where the lease's temporary file goes: every write fails.
  ASSERT_TRUE(fs::create_directory(dir.path() + "/lease.tmp"));
  absl::Mutex mu;
  std::vector<std::string> lines;
  auto count = [&](const std::string& text) {
    absl::MutexLock lock(&mu);
    return std::count_if(lines.begin(), lines.end(), [&](const std::string& l) {
      return absl::StrContains(l, text);
    });
  };
  AgentOptions options = BaseOptions(server, dir.path());
  options.log = [&](const std::string& line) {
    absl::MutexLock lock(&mu);
    lines.push_back(line);
  };
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return count("cannot write the lease") > 0; }));
  absl::SleepFor(absl::Milliseconds(500));  // heartbeats every 100 ms
  EXPECT_EQ(count("cannot write the lease"), 1);
  EXPECT_EQ(count("(open: Is a directory)"), 1);
  fs::remove(dir.path() + "/lease.tmp");
  ASSERT_TRUE(WaitFor([&] { return count("is written again") > 0; }));
  EXPECT_TRUE(fs::exists(dir.path() + "/lease"));
  agent.reset();
}

TEST(AgentTest, FleetOfThreeRegistersDistinctNodesAndRoutesByName) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.node_names = {"fleet-0", "fleet-1", "fleet-2"};
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registrations().size() >= 3; }));
  std::set<std::string> names;
  std::set<std::string> uuids;
  for (const json& r : server.registrations()) {
    names.insert(r["name"].get<std::string>());
    EXPECT_EQ(r["address"], agent->address());
    EXPECT_EQ(r["gpus"].size(), 8u);
    uuids.insert(r["gpus"][0]["uuid"].get<std::string>());
  }
  EXPECT_EQ(names, (std::set<std::string>{"fleet-0", "fleet-1", "fleet-2"}));
  EXPECT_EQ(uuids.size(), 3u);

  AgentClient client(*agent);
  json body = Launch("21.0.0", {"/bin/sh", "-c", "echo $LOOM_NODE"});
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(json::parse(res->body)["error"]["field"], "node");
  body["node"] = "fleet-9";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  body["node"] = "fleet-1";
  res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("fleet-1", "21.0.0"), "exited");
  }));
  EXPECT_TRUE(server.LastStatus("fleet-0", "21.0.0").is_null());
  EXPECT_TRUE(server.LastStatus("fleet-2", "21.0.0").is_null());

  res = client.Get("/v1/tasks?node=fleet-1");
  ASSERT_TRUE(res);
  ASSERT_EQ(json::parse(res->body)["tasks"].size(), 1u);
  EXPECT_EQ(json::parse(res->body)["tasks"][0]["node"], "fleet-1");
  res = client.Get("/v1/tasks?node=fleet-0");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["tasks"], json::array());
  res = client.Get("/v1/tasks/21.0.0/logs?node=fleet-1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "fleet-1\n");
  res = client.Get("/v1/tasks/21.0.0/logs");  // found without the node
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, "fleet-1\n");
  res = client.Get("/v1/tasks/21.0.0/logs?node=fleet-0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  res = client.Post("/v1/tasks/21.0.0/stop?node=fleet-1", json::object());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_TRUE(fs::exists(dir.path() + "/nodes/fleet-1/logs/21.0.0.out"));

  // Fault injection: one node stops heartbeating, the others go on.
  res = client.Post("/v1/faults",
                    json{{"node", "fleet-2"}, {"drop_heartbeats", true}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  absl::SleepFor(absl::Milliseconds(150));
  const int dropped = server.heartbeat_count("fleet-2");
  const int alive = server.heartbeat_count("fleet-0");
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_EQ(server.heartbeat_count("fleet-2"), dropped);
  EXPECT_GT(server.heartbeat_count("fleet-0"), alive);
}

bool HasProblem(const json& health, const std::string& text) {
  if (!health.is_object() || !health.contains("problems")) return false;
  for (const json& p : health["problems"]) {
    if (p.is_string() && absl::StrContains(p.get<std::string>(), text)) {
      return true;
    }
  }
  return false;
}

TEST(AgentTest, InjectedFaultsShowInHealthAndAnswers) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  EXPECT_EQ(server.LastHealth("h200-0")["ok"], true);
  AgentClient client(*agent);
  httplib::Result res = client.Post("/v1/faults", json{{"fail_gpu", 3}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return HasProblem(server.LastHealth("h200-0"), "GPU 3 (GPU-") &&
           HasProblem(server.LastHealth("h200-0"), "failed (injected fault)");
  }));
  EXPECT_EQ(server.LastHealth("h200-0")["ok"], false);
  // A slow agent: every answer but the fault route's waits.
  res = client.Post("/v1/faults", json{{"delay_ms", 300}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const absl::Time before = absl::Now();
  res = client.Get("/v1/tasks");
  ASSERT_TRUE(res);
  EXPECT_GE(absl::Now() - before, absl::Milliseconds(300));
  res = client.Post("/v1/faults", json{{"clear", true}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(
      WaitFor([&] { return server.LastHealth("h200-0")["ok"] == true; }));
  // Bad faults change nothing and say what is wrong.
  for (const auto& [body, text] : std::vector<std::pair<json, std::string>>{
           {json{{"fail_gpu", 8}}, "GPU index from 0 to 7"},
           {json{{"fail_gpu", "x"}}, "GPU index"},
           {json{{"delay_ms", -1}}, "delay_ms"},
           {json{{"explode", true}}, "unknown fault 'explode'"},
           {json::object(), "no fault given"},
           {json{{"exit", 1}}, "exit: must be true or false"}}) {
    res = client.Post("/v1/faults", body);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 400) << body.dump();
    EXPECT_THAT(res->body, ::testing::HasSubstr(text)) << body.dump();
  }
  EXPECT_TRUE(
      WaitFor([&] { return server.LastHealth("h200-0")["ok"] == true; }));
}

TEST(AgentTest, FencesItsTasksWhenHeartbeatsGoUnanswered) {
  FakeServer server;
  server.set_fence_after_ms(400);
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("9.0.0", {"/bin/sleep", "60"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "9.0.0"), "running");
  }));
  // Heartbeats keep being answered: no fencing however long it runs.
  absl::SleepFor(absl::Milliseconds(800));
  EXPECT_TRUE(StateIs(server.LastStatus("h200-0", "9.0.0"), "running"));
  // A partition: no answer for 400 ms kills the task.
  res = client.Post("/v1/faults", json{{"drop_heartbeats", true}});
  ASSERT_TRUE(res);
  ASSERT_TRUE(WaitFor([&] {
    httplib::Result t = client.Get("/v1/tasks/9.0.0");
    return t && t->status == 200 &&
           json::parse(t->body, nullptr, false).value("state", "") == "exited";
  }));
  res = client.Post("/v1/faults", json{{"drop_heartbeats", false}});
  ASSERT_TRUE(res);
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "9.0.0"), "exited"); }));
  EXPECT_EQ(server.LastStatus("h200-0", "9.0.0")["signal"], SIGKILL);
}

// A node joins with the join token, keeps the credential it gets (0600) for
// its heartbeats and later starts, and its API accepts only its server's
// key (health and metrics stay open).
TEST(AgentTest, JoinsWithATokenAndAcceptsOnlyItsServer) {
  FakeServer server;
  server.set_auth("join-secret", "node-credential", "server-key");
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.join_token = "join-secret";
  options.insecure = false;
  std::unique_ptr<Agent> agent = StartAgent(options);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  EXPECT_EQ(server.LastBearer("/v1/agents/register"), "Bearer join-secret");
  EXPECT_EQ(server.LastBearer("/v1/agents/heartbeat"),
            "Bearer node-credential");
  const std::string file = absl::StrCat(dir.path(), "/credential");
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);

  httplib::Client c("127.0.0.1", agent->port());
  auto anonymous = c.Get("/v1/tasks");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  auto wrong = c.Get("/v1/tasks", {{"Authorization", "Bearer not-the-key"}});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto launch =
      c.Post("/v1/tasks", Launch("1.0.0", {"true"}).dump(), "application/json");
  ASSERT_TRUE(launch);
  EXPECT_EQ(launch->status, 401);
  auto right = c.Get("/v1/tasks", {{"Authorization", "Bearer server-key"}});
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  agent.reset();

  // Restarted without the join token: it uses its credential, and its API
  // is closed from the start (the key was kept too).
  options.join_token.clear();
  const int before = server.registration_count("h200-0");
  agent = StartAgent(options);
  ASSERT_NE(agent, nullptr);
  httplib::Client c2("127.0.0.1", agent->port());
  EXPECT_EQ(c2.Get("/v1/tasks")->status, 401);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  EXPECT_EQ(server.LastBearer("/v1/agents/register"), "Bearer node-credential");
}

// An agent that does not know its server's key runs nothing: without a join
// token or a credential it can never learn one, and it answers 503 (saying
// why) to every route but health and telemetry.
TEST(AgentTest, FailsClosedWithoutItsServersKey) {
  FakeServer server;  // registers anyone, hands out no key
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.insecure = false;
  std::unique_ptr<Agent> agent = StartAgent(options);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  const std::string marker = absl::StrCat(dir.path(), "/ran");
  httplib::Client c("127.0.0.1", agent->port());
  auto launch = c.Post(
      "/v1/tasks",
      Launch("1.0.0", {"/bin/sh", "-c", absl::StrCat("touch ", marker)}).dump(),
      "application/json");
  ASSERT_TRUE(launch);
  EXPECT_EQ(launch->status, 503);
  const json body = json::parse(launch->body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << launch->body;
  EXPECT_EQ(body["error"]["code"], "unavailable");
  EXPECT_NE(body["error"]["message"].get<std::string>().find("join token"),
            std::string::npos)
      << launch->body;
  EXPECT_EQ(c.Get("/v1/tasks")->status, 503);
  EXPECT_EQ(c.Post("/v1/tasks/1.0.0/stop", "{}", "application/json")->status,
            503);
  EXPECT_EQ(c.Post("/v1/faults", "{}", "application/json")->status, 503);
  EXPECT_EQ(c.Get("/healthz")->status, 200);
  EXPECT_EQ(c.Get("/metrics")->status, 200);
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "the task ran";
}

// `--insecure` is for loopback only.
TEST(AgentTest, InsecureIsRefusedOffLoopback) {
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.5"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("192.0.2.7"));
  EXPECT_FALSE(IsLoopbackHost("no-such-host.invalid"));
  EXPECT_TRUE(CheckInsecureListen(true, "127.0.0.2").ok());
  EXPECT_TRUE(CheckInsecureListen(false, "192.0.2.7").ok());
  EXPECT_EQ(CheckInsecureListen(true, "192.0.2.7").code(),
            absl::StatusCode::kInvalidArgument);

  // A non-loopback address of this host, if it has one.
  std::string local;
  ifaddrs* ifs = nullptr;
  if (getifaddrs(&ifs) == 0) {
    for (ifaddrs* i = ifs; i != nullptr; i = i->ifa_next) {
      if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
      char text[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr,
                text, sizeof(text));
      if (!absl::StartsWith(text, "127.")) {
        local = text;
        break;
      }
    }
    freeifaddrs(ifs);
  }
  if (local.empty()) GTEST_SKIP() << "this host has no non-loopback address";
  AgentFlags flags;
  flags.servers = "127.0.0.1:1";
  flags.listen = absl::StrCat(local, ":0");
  flags.data_dir = "/tmp/unused";
  flags.emulate = "8xH200";
  flags.insecure = true;
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(flags);
  ASSERT_FALSE(o.ok());
  EXPECT_EQ(o.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(o.status().message().find("--insecure"), std::string::npos);
  flags.insecure = false;
  o = AgentOptionsFromFlags(flags);
  ASSERT_TRUE(o.ok()) << o.status();
  o->insecure = true;  // a library user: `Create` refuses it too
  FakeServer server;
  o->server_urls = {server.url()};
  TempDir dir;
  o->data_dir = dir.path();
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(*std::move(o));
  EXPECT_EQ(agent.status().code(), absl::StatusCode::kInvalidArgument);
}

// What the agent keeps (task records with their argv, units, logs, the
// lease) is readable by root and the agent only: directories 0700 (0711 for
// the data dir, which tasks pass through to their checkpoint dir), files
// 0600, also in a data dir that an older agent made 0755.
TEST(AgentTest, KeepsItsFilesPrivate) {
  FakeServer server;
  server.set_fence_after_ms(60000);
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  fs::create_directories(dir.path() + "/tasks");
  ASSERT_EQ(::chmod((dir.path() + "/tasks").c_str(), 0755), 0);
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("5.0.0", {"/bin/sh", "-c", "echo secret-argv; echo err >&2"},
             json::object(), 2));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.0"), "exited"); }));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir.path() + "/lease"); }));

  auto mode = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(dir.path()), 0711u);
  for (const char* sub : {"/tasks", "/units", "/logs"}) {
    EXPECT_EQ(mode(dir.path() + sub), 0700u) << sub;
  }
  int files = 0;
  std::set<std::string> kinds;
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    if (!entry.is_regular_file()) continue;
    ++files;
    kinds.insert(entry.path().extension().string());
    EXPECT_EQ(mode(entry.path().string()), 0600u) << entry.path();
  }
  // Records, pid and exit files, a unit, logs, the lease.
  EXPECT_GE(files, 10);
  for (const char* ext : {".json", ".pid", ".exit", ".out", ".err"}) {
    EXPECT_TRUE(kinds.contains(ext)) << ext;
  }
}

// A task whose shim dies is not left running unsupervised: its processes
// (a background child included) die and the server hears at once that it
// was lost, and why.
TEST(AgentTest, ATaskWhoseShimDiesIsKilledAndReportedLost) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  const std::string pids = dir.path() + "/bg.pid";
  httplib::Result res = client.Post(
      "/v1/tasks", Launch("6.0.0", {"/bin/sh", "-c",
                                    absl::StrCat("sleep 600 & echo $! > ", pids,
                                                 "; sleep 600")}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(pids);
    pid_t p = 0;
    return static_cast<bool>(in >> p) && p > 0;
  }));
  pid_t background = 0;
  std::ifstream(pids) >> background;
  std::ifstream record(dir.path() + "/tasks/6.0.0.json");
  const json r = json::parse(record, nullptr, false);
  ASSERT_TRUE(r.is_object());
  const pid_t shim = r.value("shim_pid", 0);
  const pid_t main = r.value("pid", 0);
  ASSERT_GT(shim, 0);
  ASSERT_EQ(::kill(shim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "6.0.0"), "lost");
  })) << server.LastStatus("h200-0", "6.0.0").dump();
  EXPECT_THAT(server.LastStatus("h200-0", "6.0.0").dump(),
              HasSubstr("supervisor (shim) died"));
  auto dead = [](pid_t pid) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    return close == std::string::npos || text[close + 2] == 'Z';
  };
  EXPECT_TRUE(WaitFor([&] { return dead(main) && dead(background); }))
      << "the task's processes outlived its shim";
}

TEST(AgentTest, RegistersAgainWhenTheServerForgetsTheNode) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  server.RejectHeartbeatOnce("h200-0", 409);
  EXPECT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") >= 2; }));
}

TEST(AgentTest, RetriesRegistrationAndFailsOverToTheNextServer) {
  // A port nobody listens on.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int dead_port = ntohs(addr.sin_port);
  ::close(fd);

  FakeServer server;
  server.RejectRegistrations(2, 503);
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.server_urls = {absl::StrCat("http://127.0.0.1:", dead_port),
                         server.url()};
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  EXPECT_EQ(server.attempts(), 3);
}

// ---------------------------------------------------------------------------
// GPU discovery.

class UnavailableProbe : public GpuProbe {
 public:
  absl::StatusOr<std::vector<GpuDevice>> Probe() override {
    return absl::UnavailableError("NVML is not available: test");
  }
};

TEST(GpuProbeTest, NvmlIsUnavailableWithoutTheLibrary) {
  if (void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL)) {
    dlclose(lib);
    GTEST_SKIP() << "this host has libnvidia-ml.so.1";
  }
  NvmlGpuProbe probe;
  absl::StatusOr<std::vector<GpuDevice>> gpus = probe.Probe();
  ASSERT_FALSE(gpus.ok());
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  EXPECT_THAT(std::string(gpus.status().message()),
              HasSubstr("libnvidia-ml.so.1"));
}

TEST(GpuProbeTest, NvmlReportsAMissingLibraryOrFunction) {
  absl::StatusOr<std::vector<GpuDevice>> gpus =
      NvmlGpuProbe("/nonexistent/libnvidia-ml.so.1").Probe();
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  gpus = NvmlGpuProbe("libc.so.6").Probe();
  EXPECT_TRUE(absl::IsUnavailable(gpus.status())) << gpus.status();
  EXPECT_THAT(std::string(gpus.status().message()), HasSubstr("nvmlInit_v2"));
}

TEST(GpuProbeTest, NvmlReadsDevicesThroughTheLibrary) {
  absl::StatusOr<std::vector<GpuDevice>> gpus =
      NvmlGpuProbe(LOOM_FAKE_NVML_PATH).Probe();
  ASSERT_TRUE(gpus.ok()) << gpus.status();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[1].index, 1);
  EXPECT_EQ((*gpus)[1].name, "NVIDIA H200");
  EXPECT_EQ((*gpus)[1].model, "h200");
  EXPECT_EQ((*gpus)[1].uuid, "GPU-00000000-0000-0000-0000-000000000001");
  EXPECT_EQ((*gpus)[1].memory_bytes, 150754820096);
  EXPECT_EQ((*gpus)[1].ecc_uncorrected, 0);
  EXPECT_EQ((*gpus)[1].utilization_percent, 41);
  EXPECT_EQ((*gpus)[1].memory_used_bytes, 0);
  EXPECT_EQ((*gpus)[1].temperature_c, 55);
  EXPECT_DOUBLE_EQ((*gpus)[1].power_watts, 250.5);
  EXPECT_EQ((*gpus)[1].sm_clock_mhz, 1980);
}

TEST(GpuProbeTest, XidWatcherKeepsTheLastXidOfEachGpu) {
  NvmlXidWatcher missing("/nonexistent/libnvidia-ml.so.1");
  EXPECT_EQ(missing.Start().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(missing.LastXids().empty());
  setenv("LOOM_FAKE_NVML_XID", "79", 1);
  NvmlXidWatcher watcher(LOOM_FAKE_NVML_PATH);
  ASSERT_TRUE(watcher.Start().ok());
  EXPECT_TRUE(WaitFor([&] { return watcher.LastXids().size() == 1; }));
  unsetenv("LOOM_FAKE_NVML_XID");
  EXPECT_EQ(watcher.LastXids(), (std::map<int, int64_t>{{1, 79}}));
  watcher.Stop();
  watcher.Stop();  // idempotent
  EXPECT_TRUE(IsHardwareXid(79));
  EXPECT_TRUE(IsHardwareXid(48));
  EXPECT_FALSE(IsHardwareXid(13));  // an application's illegal access
  EXPECT_FALSE(IsHardwareXid(31));
}

TEST(AgentTest, RealGpusReportXidAndTelemetry) {
  setenv("LOOM_FAKE_NVML_XID", "79", 1);
  FakeServer server;
  TempDir dir;
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation.reset();
  options.gpu_probe = &probe;
  options.nvml_library = LOOM_FAKE_NVML_PATH;
  options.health_interval = absl::Milliseconds(100);
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  EXPECT_TRUE(WaitFor([&] {
    return HasProblem(server.LastHealth("h200-0"),
                      "GPU 1: Xid 79 (a hardware error)");
  }));
  unsetenv("LOOM_FAKE_NVML_XID");
  AgentClient client(*agent);
  httplib::Result res = client.Get("/metrics");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_XID_ERRORS\\{gpu=\"1\",[^}]*"
                             "emulated=\"false\"\\} 79\n"));
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_GPU_UTIL\\{gpu=\"0\",[^}]*\\} 40\n"));
  EXPECT_THAT(res->body, ::testing::ContainsRegex(
                             "DCGM_FI_DEV_POWER_USAGE\\{gpu=\"1\",[^}]*\\} "
                             "250.5\n"));
}

TEST(HealthCheckTest, GpusMissingOrWithEccErrors) {
  NvmlGpuProbe probe(LOOM_FAKE_NVML_PATH);
  EXPECT_THAT(CheckGpus(probe, 2), ::testing::IsEmpty());
  EXPECT_THAT(CheckGpus(probe, 3),
              ::testing::ElementsAre("GPUs missing: NVML sees 2 of 3"));
  setenv("LOOM_FAKE_NVML_ECC", "4", 1);
  std::vector<std::string> problems = CheckGpus(probe, 2);
  unsetenv("LOOM_FAKE_NVML_ECC");
  EXPECT_THAT(problems,
              ::testing::ElementsAre(
                  "GPU 1 (GPU-00000000-0000-0000-0000-000000000001): 4 "
                  "uncorrected ECC errors"));
  NvmlGpuProbe missing("/nonexistent/libnvidia-ml.so.1");
  problems = CheckGpus(missing, 8);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_THAT(problems[0], ::testing::StartsWith("GPU check failed: NVML"));
}

TEST(AgentMetricsTest, DcgmNamesAndLabels) {
  GpuDevice busy;
  busy.index = 3;
  busy.uuid = "GPU-abc";
  busy.name = "NVIDIA H200";
  busy.memory_bytes = 141 * kGi;
  GpuDevice idle = busy;
  idle.index = 4;
  idle.uuid = "GPU-def";
  const absl::Time now = absl::FromUnixSeconds(1000);
  EmulateTelemetry(busy, /*busy=*/true, /*failed=*/false, now);
  EmulateTelemetry(idle, /*busy=*/false, /*failed=*/false, now);
  EXPECT_GE(busy.utilization_percent, 85);
  EXPECT_LE(busy.utilization_percent, 100);
  EXPECT_GT(busy.memory_used_bytes, busy.memory_bytes / 2);
  EXPECT_LT(busy.power_watts, 700);  // an H200's limit
  EXPECT_EQ(idle.utilization_percent, 0);
  EXPECT_LT(idle.temperature_c, busy.temperature_c);
  GpuDevice again = busy;
  EmulateTelemetry(again, true, false, now);
  EXPECT_EQ(again.utilization_percent, busy.utilization_percent);

  GpuMetricsRow a{"host1", "h200-0", busy, true, 0, 42};
  GpuMetricsRow b{"host1", "h200-0", idle, true, 0, 0};
  b.gpu.temperature_c = -1;  // not known: not exported
  std::string text;
  MetricsWriter out(&text);
  WriteAgentMetrics(out, {a, b}, {{"h200-0", "42.0.1", 42, 0, 1.5, 4096}});
  EXPECT_TRUE(out.status().ok()) << out.status();
  EXPECT_THAT(text, ::testing::HasSubstr(absl::StrCat(
                        "DCGM_FI_DEV_GPU_UTIL{gpu=\"3\",UUID=\"GPU-abc\","
                        "device=\"nvidia3\",modelName=\"NVIDIA H200\","
                        "Hostname=\"host1\",node=\"h200-0\",job=\"42\","
                        "emulated=\"true\"} ",
                        busy.utilization_percent, "\n")));
  EXPECT_THAT(text, ::testing::HasSubstr("job=\"\",emulated=\"true\"} 0\n"));
  EXPECT_THAT(text, ::testing::HasSubstr("# TYPE DCGM_FI_DEV_FB_FREE gauge\n"));
  size_t temps = 0;
  for (size_t pos = text.find("DCGM_FI_DEV_GPU_TEMP{");
       pos != std::string::npos;
       pos = text.find("DCGM_FI_DEV_GPU_TEMP{", pos + 1)) {
    ++temps;
  }
  EXPECT_EQ(temps, 1u);  // the idle GPU's unknown temperature is left out
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "loom_task_cpu_seconds_total{node=\"h200-0\",job="
                        "\"42\",task=\"0\",task_id=\"42.0.1\"} 1.5\n"));
  EXPECT_THAT(text, ::testing::HasSubstr(
                        "loom_task_memory_bytes{node=\"h200-0\",job=\"42\","
                        "task=\"0\",task_id=\"42.0.1\"} 4096\n"));
}

TEST(AgentMetricsTest, ProcessGroupUsageAndVisibleGpus) {
  // A child in its own group with CUDA_VISIBLE_DEVICES, burning some CPU.
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    char env[] = "CUDA_VISIBLE_DEVICES=2,5";
    char* envp[] = {env, nullptr};
    char sh[] = "/bin/sh";
    char c[] = "-c";
    char script[] =
        "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; "
        "sleep 30";
    char* argv[] = {sh, c, script, nullptr};
    execve("/bin/sh", argv, envp);
    _exit(127);
  }
  ASSERT_GT(child, 0);
  setpgid(child, child);
  ASSERT_TRUE(WaitFor([&] {
    std::map<pid_t, GroupUsage> usage = ReadProcessGroupUsage();
    auto it = usage.find(child);
    return it != usage.end() && it->second.cpu_seconds > 0.05 &&
           it->second.rss_bytes > 0;
  }));
  EXPECT_EQ(VisibleGpusOf(child), (std::vector<int>{2, 5}));
  EXPECT_TRUE(VisibleGpusOf(getpid()).empty() ||
              getenv("CUDA_VISIBLE_DEVICES") != nullptr);
  EXPECT_TRUE(VisibleGpusOf(999999999).empty());
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(HealthCheckTest, DataDir) {
  TempDir dir;
  EXPECT_THAT(CheckDataDir(dir.path(), 0), ::testing::IsEmpty());
  std::vector<std::string> full =
      CheckDataDir(dir.path(), int64_t{1} << 62);  // more than any disk
  ASSERT_EQ(full.size(), 1u);
  EXPECT_THAT(full[0], ::testing::StartsWith("data disk full: "));
  EXPECT_THAT(full[0], ::testing::HasSubstr(dir.path()));
  std::vector<std::string> gone = CheckDataDir(dir.path() + "/missing", 0);
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_THAT(gone[0], ::testing::HasSubstr("is not a directory"));
  EXPECT_FALSE(fs::exists(dir.path() + "/.health-probe"));
}

TEST(HealthCheckTest, Command) {
  EXPECT_TRUE(RunHealthCommand("true", absl::Seconds(5)).ok());
  absl::Status st = RunHealthCommand(
      "echo; echo '  fan 3 failed  '; echo more >&2; exit 3", absl::Seconds(5));
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.message(),
            "health check command failed (exit code 3): fan 3 failed");
  const absl::Time start = absl::Now();
  st = RunHealthCommand("echo slow; sleep 30", absl::Milliseconds(300));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  EXPECT_EQ(st.message(), "health check command timed out after 300ms: slow");
  st = RunHealthCommand("kill -9 $$", absl::Seconds(5));
  EXPECT_EQ(st.message(), "health check command killed by signal 9");
}

TEST(GpuProbeTest, ModelNames) {
  EXPECT_EQ(GpuModelFromName("NVIDIA H200"), "h200");
  EXPECT_EQ(GpuModelFromName("NVIDIA A100-SXM4-80GB"), "a100");
  EXPECT_EQ(GpuModelFromName("NVIDIA A100 80GB PCIe"), "a100");
  EXPECT_EQ(GpuModelFromName("NVIDIA H100 80GB HBM3"), "h100");
  EXPECT_EQ(GpuModelFromName("Tesla V100-SXM2-32GB"), "v100");
  EXPECT_EQ(GpuModelFromName("NVIDIA L40S"), "l40s");
  EXPECT_EQ(GpuModelFromName("NVIDIA GeForce RTX 4090"), "rtx4090");
  EXPECT_EQ(GpuModelFromName(""), "unknown");
}

TEST(GpuProbeTest, Emulation) {
  absl::StatusOr<GpuEmulation> e = ParseGpuEmulation("8xH200");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->count, 8);
  EXPECT_EQ(e->model, "h200");
  EXPECT_EQ(e->gpu_memory_bytes, 141 * kGi);
  EXPECT_EQ(e->cpus, 192);
  EXPECT_EQ(e->memory_bytes, 2048 * kGi);
  e = ParseGpuEmulation("8xa100");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->gpu_memory_bytes, 80 * kGi);
  EXPECT_EQ(e->cpus, 96);
  EXPECT_EQ(e->memory_bytes, 1024 * kGi);
  e = ParseGpuEmulation("4xL4:24Gi");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->model, "l4");
  EXPECT_EQ(e->gpu_memory_bytes, 24 * kGi);
  EXPECT_EQ(e->cpus, 0);
  for (const char* bad : {"", "8", "xH200", "0xH200", "8xfoo", "8xH200:abc",
                          "2000xH200", "8xH 200"}) {
    EXPECT_FALSE(ParseGpuEmulation(bad).ok()) << bad;
  }
  std::vector<GpuDevice> a =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-0").Probe().value();
  std::vector<GpuDevice> b =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-1").Probe().value();
  std::vector<GpuDevice> a2 =
      EmulatedGpuProbe(*ParseGpuEmulation("2xH200"), "n-0").Probe().value();
  EXPECT_NE(a[0].uuid, b[0].uuid);
  EXPECT_NE(a[0].uuid, a[1].uuid);
  EXPECT_EQ(a[0].uuid, a2[0].uuid);
  EXPECT_EQ(a[0].uuid.size(), 40u);  // GPU- and 36 characters
}

TEST(GpuProbeTest, HostInfo) {
  absl::StatusOr<HostInfo> host = ProbeHost();
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_GT(host->cpus, 0);
  EXPECT_GT(host->memory_bytes, 0);
  EXPECT_FALSE(host->hostname.empty());
  EXPECT_FALSE(ProbeHost("/nonexistent/meminfo").ok());
}

TEST(AgentTest, RealGpusWithoutNvmlAskForEmulation) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation.reset();
  UnavailableProbe probe;
  options.gpu_probe = &probe;
  absl::StatusOr<std::unique_ptr<Agent>> agent = Agent::Create(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_TRUE(absl::IsUnavailable(agent.status()));
  EXPECT_THAT(std::string(agent.status().message()), HasSubstr("--emulate"));
  // A fleet needs emulation.
  options.node_names = {"a-0", "a-1"};
  agent = Agent::Create(options);
  ASSERT_FALSE(agent.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(agent.status()));
}

// ---------------------------------------------------------------------------
// Flags and addresses.

TEST(AgentFlagsTest, ListenAddress) {
  absl::StatusOr<ListenAddress> a = ParseListenAddress("127.0.0.2:7100");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->host, "127.0.0.2");
  EXPECT_EQ(a->port, 7100);
  a = ParseListenAddress("localhost:0");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->port, 0);
  EXPECT_TRUE(ParseListenAddress("[::1]:7100").ok());
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:", ":7100",
                          "127.0.0.1:70000", "0.0.0.0:7100", "[::]:7100",
                          "192.0.2.1:7100", "::1:7100", "127.0.0.1:x"}) {
    EXPECT_FALSE(ParseListenAddress(bad).ok()) << bad;
  }
  EXPECT_THAT(
      std::string(ParseListenAddress("192.0.2.1:7100").status().message()),
      HasSubstr("nor an address of this host"));
}

TEST(AgentFlagsTest, ServerUrls) {
  EXPECT_EQ(NormalizeAgentServerUrl("127.0.0.1:7000").value(),
            "http://127.0.0.1:7000");
  EXPECT_EQ(NormalizeAgentServerUrl("http://localhost:7000/").value(),
            "http://localhost:7000");
  EXPECT_EQ(NormalizeAgentServerUrl("HTTP://[::1]:7000").value(),
            "http://[::1]:7000");
  for (const char* bad : {"", "ftp://x:1", "http://x:1/v1", "http://", "x:0",
                          "x:", "http://x:99999"}) {
    EXPECT_FALSE(NormalizeAgentServerUrl(bad).ok()) << bad;
  }
}

TEST(AgentFlagsTest, CommandLineToOptions) {
  CLI::App app{"loom"};
  AgentFlags flags;
  AddAgentCommand(app, &flags);
  app.parse(std::vector<std::string>{
      // CLI11 takes the arguments in reverse order.
      "2s",
      "--stop-signal-grace",
      "USR1",
      "--stop-signal",
      "500ms",
      "--heartbeat-interval",
      "--fake-tasks",
      "4",
      "--names-from",
      "h200",
      "--name-prefix",
      "3",
      "--emulate-nodes",
      "8xH200",
      "--emulate",
      "/tmp/x",
      "--data-dir",
      "127.0.0.2:0",
      "--listen",
      "127.0.0.1:7000,http://127.0.0.1:7001",
      "--server",
      "agent"});
  absl::StatusOr<AgentOptions> o = AgentOptionsFromFlags(flags);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->server_urls,
            (std::vector<std::string>{"http://127.0.0.1:7000",
                                      "http://127.0.0.1:7001"}));
  EXPECT_EQ(o->listen_host, "127.0.0.2");
  EXPECT_EQ(o->node_names,
            (std::vector<std::string>{"h200-4", "h200-5", "h200-6"}));
  EXPECT_TRUE(o->fleet);
  EXPECT_TRUE(o->fake_tasks);
  EXPECT_EQ(o->emulation->cpus, 192);
  EXPECT_EQ(o->heartbeat_interval, absl::Milliseconds(500));
  EXPECT_EQ(o->stop_signal, SIGUSR1);
  EXPECT_EQ(o->stop_grace, absl::Seconds(2));
  EXPECT_TRUE(o->run_as_user);

  AgentFlags f;
  f.servers = "127.0.0.1:7000";
  f.listen = "127.0.0.1:0";
  f.data_dir = "/tmp/x";
  f.name = "a100-3";
  f.emulate = "8xA100";
  f.emulate_cpus = 64;
  f.emulate_memory = "512Gi";
  o = AgentOptionsFromFlags(f);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->node_names, std::vector<std::string>{"a100-3"});
  EXPECT_FALSE(o->fleet);
  EXPECT_EQ(o->emulation->cpus, 64);
  EXPECT_EQ(o->emulation->memory_bytes, 512 * kGi);
  EXPECT_EQ(o->stop_signal, SIGTERM);
  EXPECT_EQ(o->stop_grace, absl::Seconds(10));

  {
    CLI::App off_app{"loom"};
    AgentFlags off;
    AddAgentCommand(off_app, &off);
    off_app.parse(std::vector<std::string>{
        "--run-as-user=false", "/tmp/x", "--data-dir", "127.0.0.1:0",
        "--listen", "127.0.0.1:7000", "--server", "agent"});
    absl::StatusOr<AgentOptions> no_switch = AgentOptionsFromFlags(off);
    ASSERT_TRUE(no_switch.ok()) << no_switch.status();
    EXPECT_FALSE(no_switch->run_as_user);
  }

  AgentFlags bad = f;
  bad.emulate.clear();
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());  // --emulate-cpus alone
  bad = f;
  bad.emulate_nodes = 3;
  bad.emulate.clear();
  bad.emulate_cpus = 0;
  bad.emulate_memory.clear();
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());  // fleet without --emulate
  bad = f;
  bad.name_prefix = "x";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.stop_signal = "NOPE";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.heartbeat_interval = "1ms";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());
  bad = f;
  bad.listen = "0.0.0.0:7100";
  EXPECT_FALSE(AgentOptionsFromFlags(bad).ok());

  EXPECT_EQ(ParseSignal("TERM").value(), SIGTERM);
  EXPECT_EQ(ParseSignal("sigusr1").value(), SIGUSR1);
  EXPECT_EQ(ParseSignal("9").value(), SIGKILL);
  EXPECT_FALSE(ParseSignal("0").ok());
  EXPECT_FALSE(ParseSignal("SIGNOPE").ok());
}

TEST(FakeTaskLauncherTest, EndsOnTimeOrSignal) {
  absl::Time now = absl::FromUnixSeconds(1000);
  FakeTaskLauncherOptions options;
  options.now = [&] { return now; };
  FakeTaskLauncher launcher(options);
  TaskSpec spec;
  spec.task_id = "1.0";
  spec.argv = {"x"};
  spec.env = {{"LOOM_FAKE_SECONDS", "2.5"}};
  ASSERT_TRUE(launcher.Launch(spec).ok());
  EXPECT_TRUE(absl::IsAlreadyExists(launcher.Launch(spec).status()));
  spec.task_id = "1.1";
  spec.env.clear();
  ASSERT_TRUE(launcher.Launch(spec).ok());
  EXPECT_TRUE(launcher.Poll().empty());
  EXPECT_TRUE(absl::IsFailedPrecondition(launcher.Forget("1.0")));
  now += absl::Seconds(2.5);
  std::vector<TaskEvent> events = launcher.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].task_id, "1.0");
  EXPECT_EQ(events[0].exit_code, 0);
  EXPECT_TRUE(launcher.Poll().empty());
  ASSERT_TRUE(launcher.Stop("1.1", SIGTERM, absl::Seconds(10)).ok());
  events = launcher.Poll();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].term_signal, SIGTERM);
  EXPECT_TRUE(launcher.Forget("1.0").ok());
  EXPECT_TRUE(absl::IsNotFound(launcher.Forget("1.0")));
  EXPECT_EQ(launcher.List().size(), 1u);
}

}  // namespace
}  // namespace loom
