// The node's session with its servers (node_session.h), through a whole
// agent and a fake server: registration and its inventory, heartbeats,
// registering again, retries and failover, joining with a token and the
// credential, fencing when heartbeats go unanswered, the lease file, and a
// fleet's nodes registering and routing by name.

#include "loom/agent/node_session.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/common/refusing_port_test_util.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::kGi;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::StateIs;
using agent_testing::TempDir;
using agent_testing::WaitFor;

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
  // A port that refuses connections.
  testing::RefusingPort dead;
  ASSERT_NE(dead.port(), 0);

  FakeServer server;
  server.RejectRegistrations(2, 503);
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.server_urls = {dead.url(), server.url()};
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  EXPECT_EQ(server.attempts(), 3);
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

// A frozen server (it takes the connection and never answers, as a stopped
// leader does) holds a heartbeat half the time left before the fence at
// most: the agent tries the next server in time, and its task is not fenced.
TEST(AgentTest, AFrozenServerDoesNotHoldHeartbeatsPastTheFence) {
  FakeServer frozen;
  FakeServer next;
  frozen.set_fence_after_ms(4000);
  next.set_fence_after_ms(4000);
  TempDir dir;
  AgentOptions options = BaseOptions(frozen, dir.path());
  options.server_urls = {frozen.url(), next.url()};
  std::unique_ptr<Agent> agent = StartAgent(std::move(options));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("9.0.0", {"/bin/sleep", "60"}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] { return frozen.heartbeat_count("h200-0") >= 2; }));
  frozen.set_frozen(true);
  // The next server hears from the agent within half the time left before
  // the fence (under 2 s) and a heartbeat interval.
  const absl::Time froze = absl::Now();
  ASSERT_TRUE(WaitFor([&] { return next.heartbeat_count("h200-0") >= 1; },
                      absl::Seconds(3)));
  EXPECT_LT(absl::Now() - froze, absl::Seconds(3));
  // Past the fence time since the freeze, the task still runs.
  absl::SleepFor(absl::Seconds(4.5) - (absl::Now() - froze));
  res = client.Get("/v1/tasks/9.0.0");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body, nullptr, false).value("state", ""),
            "running")
      << res->body;
  frozen.set_frozen(false);
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

}  // namespace
}  // namespace loom
