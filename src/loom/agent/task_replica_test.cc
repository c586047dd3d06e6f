// Service replicas end to end (task_replica.cc, docs/agent.md "Service
// replicas"): a real task that serves HTTP on its $PORT, probed by the
// agent: its port in the statuses, unique and given back when the task
// ends; readiness false, true, false and true again; a liveness failure
// stopping the task with the reason; the port and probes kept across an
// agent restart. And `TaskRunner` directly on fake tasks (no probes run:
// ready while running).

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/free_ports_test_util.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/node_table.h"
#include "loom/agent/replica_port.h"
#include "loom/agent/task_runner.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::FakeServer;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::StateIs;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// A replica: serves GET /healthz on $LOOM_HOST:$PORT with 503 for its first
// `argv[1]` seconds, then 200, and 500 while the file `argv[2]` exists;
// writes its port to stdout.
constexpr char kReplicaScript[] = R"(
import http.server, os, sys, time
port, host = int(os.environ["PORT"]), os.environ["LOOM_HOST"]
assert os.environ["LOOM_PORT"] == os.environ["PORT"]
start, delay, flag = time.time(), float(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        code = 404
        if self.path == "/healthz":
            code = 500 if os.path.exists(flag) else (
                503 if time.time() - start < delay else 200)
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer((host, port), H)
print(port, flush=True)
server.serve_forever()
)";

std::string ReplicaPython() {
  return ::access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3"
                                                 : "python3";
}

bool HaveReplicaPython() {
  return std::system((ReplicaPython() + " -c pass >/dev/null 2>&1").c_str()) ==
         0;
}

// `n` ports free on 127.0.0.1 (free_ports_test_util.h).
PortRange FreshPorts(int n) { return agent_testing::FreePortRange(n); }

json ReplicaProbeJson(int failures = 2) {
  return {{"http", "/healthz"},
          {"period_ms", 200},
          {"timeout_ms", 200},
          {"failures", failures}};
}

json ReplicaLaunch(const std::string& id, double ready_after,
                   const std::string& flag) {
  json body = Launch(id, {ReplicaPython(), "-c", kReplicaScript,
                          absl::StrCat(ready_after), flag});
  body["port"] = true;
  return body;
}

class ReplicaAgentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveReplicaPython()) GTEST_SKIP() << "no python3";
    flag_ = dir_.path() + "/unhealthy";
  }
  AgentOptions Options(PortRange ports) {
    AgentOptions o = BaseOptions(server_, dir_.path() + "/agent");
    o.service_ports = ports;
    return o;
  }
  // The task's last status in a heartbeat ({} before the first).
  json Status(const std::string& id) {
    json s = server_.LastStatus("h200-0", id);
    return s.is_object() ? s : json::object();
  }
  void Touch(const std::string& path) { std::ofstream(path) << "x"; }

  FakeServer server_;
  TempDir dir_;
  std::string flag_;
};

TEST_F(ReplicaAgentTest, GetsAUniquePortAndGoesReadyThenNotReady) {
  const PortRange ports = FreshPorts(1);
  std::unique_ptr<Agent> agent = StartAgent(Options(ports));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  json body = ReplicaLaunch("21.0.0", 1.0, flag_);
  body["readiness"] = ReplicaProbeJson(2);
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  const json launched = json::parse(res->body);
  EXPECT_EQ(launched["port"], ports.first);
  EXPECT_EQ(launched["ready"], false);
  EXPECT_THAT(launched.value("ready_reason", ""),
              HasSubstr("readiness probe GET /healthz has not passed yet"));

  // The range holds one port, and it is taken: a second replica cannot
  // start here now (a launch that failed, not one refused as specified).
  res = client.Post("/v1/tasks", ReplicaLaunch("21.0.1", 0, flag_));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500) << res->body;
  EXPECT_THAT(res->body, HasSubstr("no free port in"));
  // A plain task needs no port and has none.
  res = client.Post("/v1/tasks", Launch("21.0.2", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  EXPECT_FALSE(json::parse(res->body).contains("port"));
  EXPECT_FALSE(json::parse(res->body).contains("ready"));

  // 503 for 1 s (not ready, and the heartbeat says why), then 200.
  ASSERT_TRUE(WaitFor([&] {
    return Status("21.0.0").value("ready_reason", "").find("answered 503") !=
           std::string::npos;
  }));
  EXPECT_EQ(Status("21.0.0")["ready"], false);
  EXPECT_EQ(Status("21.0.0")["port"], ports.first);
  ASSERT_TRUE(WaitFor([&] { return Status("21.0.0").value("ready", false); }));
  EXPECT_FALSE(Status("21.0.0").contains("ready_reason"));
  res = client.Get("/v1/tasks/21.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["ready"], true);
  EXPECT_EQ(json::parse(res->body)["port"], ports.first);
  res = client.Get("/v1/tasks/21.0.0/logs");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->body, absl::StrCat(ports.first, "\n"));

  // Failing (500): not ready after 2 failures in a row; then ready again.
  Touch(flag_);
  ASSERT_TRUE(WaitFor([&] { return !Status("21.0.0").value("ready", true); }));
  EXPECT_THAT(Status("21.0.0").value("ready_reason", ""),
              HasSubstr("GET /healthz: answered 500"));
  EXPECT_TRUE(StateIs(Status("21.0.0"), "running"));
  fs::remove(flag_);
  ASSERT_TRUE(WaitFor([&] { return Status("21.0.0").value("ready", false); }));

  // Stopped: not ready at once, and its port is free for the next replica.
  res = client.Post("/v1/tasks/21.0.0/stop", json::object());
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["ready"], false);
  ASSERT_TRUE(WaitFor([&] { return StateIs(Status("21.0.0"), "exited"); }));
  EXPECT_EQ(Status("21.0.0")["ready"], false);
  EXPECT_FALSE(Status("21.0.0").contains("liveness_failed"));
  body = ReplicaLaunch("21.0.3", 0, flag_);
  body["readiness"] = ReplicaProbeJson(2);
  // Its process may hold the port a moment after its exit was recorded.
  ASSERT_TRUE(WaitFor([&] {
    res = client.Post("/v1/tasks", body);
    return res && res->status == 201;
  }));
  EXPECT_EQ(json::parse(res->body)["port"], ports.first);
  ASSERT_TRUE(WaitFor([&] { return Status("21.0.3").value("ready", false); }));
  for (const char* id : {"21.0.2", "21.0.3"}) {
    res = client.Post(absl::StrCat("/v1/tasks/", id, "/stop"), json::object());
    ASSERT_TRUE(res);
  }
  for (const char* id : {"21.0.2", "21.0.3"}) {
    ASSERT_TRUE(WaitFor([&] { return StateIs(Status(id), "exited"); })) << id;
  }
}

TEST_F(ReplicaAgentTest, FailedLivenessStopsTheTaskWithTheReason) {
  std::unique_ptr<Agent> agent = StartAgent(Options(FreshPorts(4)));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  json body = ReplicaLaunch("22.0.0", 0, flag_);
  body["liveness"] = ReplicaProbeJson(2);
  httplib::Result res = client.Post("/v1/tasks", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  // No readiness probe: ready while it runs.
  EXPECT_EQ(json::parse(res->body)["ready"], true);
  ASSERT_TRUE(WaitFor([&] { return Status("22.0.0").value("ready", false); }));
  // Healthy a while: it runs on.
  absl::SleepFor(absl::Milliseconds(600));
  ASSERT_TRUE(StateIs(Status("22.0.0"), "running"));

  Touch(flag_);
  ASSERT_TRUE(WaitFor([&] { return StateIs(Status("22.0.0"), "exited"); }));
  const json status = Status("22.0.0");
  EXPECT_EQ(status["liveness_failed"], true);
  EXPECT_THAT(status.value("reason", ""),
              StartsWith("liveness probe failed 2 times: GET /healthz: "
                         "answered 500"));
  EXPECT_THAT(status.value("reason", ""), HasSubstr("killed by SIGTERM"));
  EXPECT_EQ(status["signal"], SIGTERM);
  EXPECT_EQ(status["ready"], false);
}

TEST_F(ReplicaAgentTest, ARestartedAgentKeepsThePortAndProbesAgain) {
  const PortRange ports = FreshPorts(2);
  std::unique_ptr<Agent> first = StartAgent(Options(ports));
  ASSERT_NE(first, nullptr);
  json body = ReplicaLaunch("23.0.0", 0, flag_);
  body["readiness"] = ReplicaProbeJson(2);
  body["liveness"] = ReplicaProbeJson(2);
  int port = 0;
  {
    AgentClient client(*first);
    httplib::Result res = client.Post("/v1/tasks", body);
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
    port = json::parse(res->body)["port"].get<int>();
  }
  ASSERT_TRUE(WaitFor([&] { return Status("23.0.0").value("ready", false); }));
  first.reset();  // the agent stops; the replica runs on

  Touch(flag_);  // and fails while no agent watches
  const int before = server_.registration_count("h200-0");
  std::unique_ptr<Agent> second = StartAgent(Options(ports));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server_.registration_count("h200-0") > before; }));
  const json registration = server_.registrations().back();
  ASSERT_EQ(registration["tasks"].size(), 1u);
  EXPECT_EQ(registration["tasks"][0]["port"], port);
  EXPECT_TRUE(StateIs(registration["tasks"][0], "running"));
  // Probed again: the new agent sees it fail, and stops it.
  ASSERT_TRUE(WaitFor([&] { return StateIs(Status("23.0.0"), "exited"); }));
  EXPECT_EQ(Status("23.0.0")["liveness_failed"], true);
  EXPECT_THAT(Status("23.0.0").value("reason", ""),
              StartsWith("liveness probe failed 2 times"));
}

// ---------------------------------------------------------------------------
// `TaskRunner` itself, on fake tasks.

class ReplicaRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"h200-0", "h200-1"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
    LaunchStepsOptions steps;
    steps.server_urls = {"http://127.0.0.1:7000"};
    steps.checkpoint_dirs = false;
    TaskRunnerOptions options;
    options.steps = DefaultLaunchSteps(steps);
    options.service_ports = FreshPorts(2);
    options.run_probes = false;
    options.on_task_ended = [this](AgentNode&) { ++reports_; };
    ports_ = options.service_ports;
    runner_ = std::make_unique<TaskRunner>(std::move(options), log_.log());
    runner_->Start();
  }
  AgentNode& node(int i) { return *nodes_->nodes()[i]; }
  static LaunchRequest Request(const std::string& id, int seconds) {
    LaunchRequest r;
    r.task_id = id;
    r.job_id = 3;
    r.argv = {"serve"};
    r.env = {{"LOOM_FAKE_SECONDS", absl::StrCat(seconds)}};
    r.port = true;
    ProbeSpec p;
    p.http = "/healthz";
    r.readiness = p;
    return r;
  }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
  std::unique_ptr<TaskRunner> runner_;
  PortRange ports_;
  std::atomic<int> reports_{0};
};

TEST_F(ReplicaRunnerTest, PortsAreUniqueAcrossNodesAndGivenBackAtTheEnd) {
  std::string field;
  absl::StatusOr<json> a =
      runner_->Launch(node(0), Request("3.0.0", 30), &field);
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<json> b =
      runner_->Launch(node(1), Request("3.0.1", 30), &field);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE((*a)["port"], (*b)["port"]);
  // Fake tasks answer no probe: ready while they run.
  EXPECT_EQ((*a)["ready"], true);
  EXPECT_EQ(runner_->ports().held(), 2u);
  EXPECT_EQ(runner_->probed_tasks(), 0u);
  absl::StatusOr<json> c =
      runner_->Launch(node(0), Request("3.0.2", 30), &field);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("task 3.0.2 on node h200-0: no free port in"));
  // Nothing of the refused launch is left: its id can be launched later.
  EXPECT_FALSE(runner_->Get(node(0), "3.0.2").ok());

  // A duplicate id takes no port.
  EXPECT_EQ(
      runner_->Launch(node(0), Request("3.0.0", 30), &field).status().code(),
      absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(runner_->ports().held(), 2u);

  const int port_a = (*a)["port"].get<int>();
  ASSERT_TRUE(runner_->Stop(node(0), "3.0.0", SIGTERM, absl::Seconds(1)).ok());
  runner_->Poll(node(0));
  absl::StatusOr<json> ended = runner_->Get(node(0), "3.0.0");
  ASSERT_TRUE(ended.ok());
  EXPECT_EQ((*ended)["state"], "exited");
  EXPECT_EQ((*ended)["ready"], false);
  EXPECT_EQ(runner_->ports().Holder(port_a), "");
  c = runner_->Launch(node(0), Request("3.0.2", 30), &field);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*c)["port"], port_a);

  // Acknowledged (forgotten) tasks hold nothing either.
  runner_->ApplyServerOrders(node(0), {"3.0.0"}, {}, {});
  ASSERT_TRUE(runner_->Stop(node(1), "3.0.1", SIGTERM, absl::Seconds(1)).ok());
  runner_->Poll(node(1));
  runner_->ApplyServerOrders(node(1), {"3.0.1"}, {}, {});
  EXPECT_EQ(runner_->ports().held(), 1u);
  EXPECT_EQ(runner_->ports().Holder(port_a), "h200-0/3.0.2");
}

}  // namespace
}  // namespace loom
