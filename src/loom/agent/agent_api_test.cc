// The agent API (agent_api.h, log_route.cc, api_reply.h) through a whole
// agent: garbage gets clear errors, injected faults show in health and
// answers, an agent without its server's key fails closed, and --insecure
// is for loopback only.

#include "loom/agent/agent_api.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_command.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/api_guard.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::HasProblem;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

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

// A MIG launch on a GPU that another process holds open (an injected
// fault): 503, which the server takes as "queue the job again"; the
// heartbeats name the GPU in `mig_waits` until a health round finds the
// change made (after a reset), and then leave it out.
TEST(AgentTest, AMigModeChangeThatWaitsAnswers503) {
  FakeServer server;
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.health_interval = absl::Milliseconds(100);
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  AgentClient client(*agent);
  httplib::Result res = client.Post("/v1/faults", json{{"hold_gpu", 1}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json layout = json::array({json::array({"1g.18gb", 0})});
  const json launch = {
      {"task_id", "1.0.0"},
      {"job_id", 1},
      {"argv", json::array({"sleep", "30"})},
      {"gpus", json::array({1})},
      {"slice",
       {{"mig", "1g.18gb"}, {"profile", 0}, {"start", 0}, {"layout", layout}}}};
  res = client.Post("/v1/tasks", launch.dump());
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  EXPECT_THAT(res->body, HasSubstr("GPU 1: MIG mode must be turned on"));
  auto last_waits = [&] {
    const std::vector<json> beats = server.Heartbeats("h200-0");
    return beats.empty() ? json() : beats.back().value("mig_waits", json());
  };
  ASSERT_TRUE(WaitFor([&] { return last_waits() == json::array({1}); }))
      << last_waits();
  res = client.Post("/v1/faults", json{{"reset_gpu", 1}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_TRUE(WaitFor([&] { return last_waits().is_null(); }));
  // A fault for a GPU the node lacks is refused.
  res = client.Post("/v1/faults", json{{"hold_gpu", 8}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
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

}  // namespace
}  // namespace loom
