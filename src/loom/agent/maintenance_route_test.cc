// `POST /v1/maintenance` and `GET /v1/maintenance` (maintenance_route.cc)
// through a whole agent against the fake server: 202 to start, 200 when
// asked again, 409 while another runs, 404 for unknown nodes, 400 naming
// the field, 401 without the server's key; the status in every heartbeat
// and registration, and the new stack in the first report of the end.

#include <unistd.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/common/atomic_file.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::StartAgent;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

json MaintenanceBody(const std::string& id, const std::string& command) {
  return {{"node", "h200-0"}, {"id", id}, {"command", command}};
}

// The latest status the agent gives through `GET /v1/maintenance`.
json MaintenanceNow(AgentClient& client) {
  httplib::Result res = client.Get("/v1/maintenance?node=h200-0");
  if (!res || res->status != 200) return json();
  return json::parse(res->body, nullptr, false);
}

TEST(MaintenanceRouteTest, StartsOnceConflictsAndReports) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  EXPECT_FALSE(server.Heartbeats("h200-0").back().contains("maintenance"));
  EXPECT_FALSE(server.registrations().back().contains("maintenance"));
  AgentClient client(*agent);
  httplib::Result res = client.Get("/v1/maintenance?node=h200-0");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404) << res->body;

  const json body =
      MaintenanceBody("pool-a:1", "echo \"upgrading $LOOM_NODE\"; sleep 0.4");
  res = client.Post("/v1/maintenance", body);
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 202) << res->body;
  json status = json::parse(res->body);
  EXPECT_EQ(status["id"], "pool-a:1");
  EXPECT_EQ(status["state"], "running");
  EXPECT_TRUE(status["exit_code"].is_null());
  EXPECT_TRUE(status.contains("ended"));
  EXPECT_TRUE(status.contains("output"));

  // The same id again: its status, it does not run twice.
  res = client.Post("/v1/maintenance", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["id"], "pool-a:1");
  // Another while it runs.
  res = client.Post("/v1/maintenance", MaintenanceBody("pool-a:2", "true"));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409) << res->body;
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "conflict");
  EXPECT_THAT(res->body, HasSubstr("pool-a:1"));

  ASSERT_TRUE(WaitFor([&] {
    const auto beats = server.Heartbeats("h200-0");
    return !beats.empty() && beats.back().contains("maintenance") &&
           beats.back()["maintenance"]["state"] == "exited";
  }));
  status = MaintenanceNow(client);
  EXPECT_EQ(status["state"], "exited");
  EXPECT_EQ(status["exit_code"], 0);
  EXPECT_EQ(status["output"], "upgrading h200-0\n");
  EXPECT_EQ(server.Heartbeats("h200-0").back()["maintenance"], status);
  res = client.Post("/v1/maintenance", body);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(json::parse(res->body)["state"], "exited");

  // A restarted agent registers with it.
  agent->Shutdown();
  agent.reset();
  const size_t before = server.registrations().size();
  agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.registrations().size() > before; }));
  EXPECT_EQ(server.registrations().back()["maintenance"], status);
}

TEST(MaintenanceRouteTest, BadRequestsNameTheirField) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  AgentClient client(*agent);
  const std::string marker = dir.path() + "/ran";
  const std::string touch = "touch " + marker;
  struct Case {
    std::string body;
    std::string field;
  };
  for (const Case& c : std::vector<Case>{
           {"", "body"},
           {"not json", "body"},
           {"[]", "body"},
           {json{{"id", "a"}, {"node", 3}, {"command", touch}}.dump(), "node"},
           {json{{"command", touch}}.dump(), "id"},
           {json{{"id", 7}, {"command", touch}}.dump(), "id"},
           {json{{"id", ""}, {"command", touch}}.dump(), "id"},
           {json{{"id", "a/b"}, {"command", touch}}.dump(), "id"},
           {json{{"id", std::string(129, 'a')}, {"command", touch}}.dump(),
            "id"},
           {json{{"id", "a"}}.dump(), "command"},
           {json{{"id", "a"}, {"command", ""}}.dump(), "command"},
           {json{{"id", "a"}, {"command", json::array({"sh"})}}.dump(),
            "command"},
           {json{{"id", "a"}, {"command", std::string(64 * 1024 + 1, ' ')}}
                .dump(),
            "command"}}) {
    httplib::Result res = client.Post("/v1/maintenance", c.body);
    ASSERT_TRUE(res) << c.body.substr(0, 80);
    EXPECT_EQ(res->status, 400) << c.body.substr(0, 80) << " -> " << res->body;
    const json error = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(error.is_object()) << res->body;
    EXPECT_EQ(error["error"]["code"], "invalid_argument");
    EXPECT_EQ(error["error"]["field"], c.field) << c.body.substr(0, 80);
  }
  // Unknown nodes.
  json other = MaintenanceBody("a", touch);
  other["node"] = "other";
  httplib::Result res = client.Post("/v1/maintenance", other);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404) << res->body;
  res = client.Post("/v1/maintenance?node=other", MaintenanceBody("a", touch));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404) << res->body;
  res = client.Get("/v1/maintenance?node=other");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "a bad request ran";
}

TEST(MaintenanceRouteTest, OnlyTheServerMayAsk) {
  FakeServer server;
  server.set_auth("join-secret", "node-credential", "server-key");
  TempDir dir;
  AgentOptions options = BaseOptions(server, dir.path());
  options.join_token = "join-secret";
  options.insecure = false;
  std::unique_ptr<Agent> agent = StartAgent(options);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  const std::string marker = dir.path() + "/ran";
  const std::string body = MaintenanceBody("m", "touch " + marker).dump();
  httplib::Client c("127.0.0.1", agent->port());
  auto res = c.Post("/v1/maintenance", body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  res = c.Post("/v1/maintenance", {{"Authorization", "Bearer not-the-key"}},
               body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 401);
  EXPECT_EQ(c.Get("/v1/maintenance?node=h200-0")->status, 401);
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_NE(access(marker.c_str(), F_OK), 0) << "it ran without the key";
  const httplib::Headers key = {{"Authorization", "Bearer server-key"}};
  res = c.Post("/v1/maintenance", key, body, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 202) << res->body;
  EXPECT_TRUE(WaitFor([&] { return access(marker.c_str(), F_OK) == 0; }));
  EXPECT_EQ(c.Get("/v1/maintenance?node=h200-0", key)->status, 200);
}

// The rolling-maintenance loop as the server sees it: the command "upgrades
// the driver" of an emulated node (`--emulate-driver @FILE`), and the
// first heartbeat that says it exited carries the new stack.
TEST(MaintenanceRouteTest, TheFirstReportOfTheEndCarriesTheNewStack) {
  FakeServer server;
  TempDir dir;
  const std::string file = dir.path() + "/driver-version";
  ASSERT_TRUE(WriteFileAtomically(file, "550.54.15\n").ok());
  AgentOptions options = BaseOptions(server, dir.path());
  options.emulation->driver_file = file;
  std::unique_ptr<Agent> agent = StartAgent(options);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return server.heartbeat_count("h200-0") >= 1; }));
  EXPECT_EQ(server.Heartbeats("h200-0").back()["stack"]["driver"], "550.54.15");
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/maintenance",
      MaintenanceBody("drv", absl::StrCat("sleep 0.2; echo 560.35.03 > ", file,
                                          "; echo upgraded")));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 202) << res->body;
  json first_exit;
  ASSERT_TRUE(WaitFor([&] {
    for (const json& beat : server.Heartbeats("h200-0")) {
      if (beat.contains("maintenance") &&
          beat["maintenance"]["state"] == "exited") {
        first_exit = beat;
        return true;
      }
    }
    return false;
  }));
  EXPECT_EQ(first_exit["maintenance"]["id"], "drv");
  EXPECT_EQ(first_exit["maintenance"]["exit_code"], 0);
  EXPECT_EQ(first_exit["maintenance"]["output"], "upgraded\n");
  EXPECT_EQ(first_exit["stack"]["driver"], "560.35.03");
  EXPECT_EQ(first_exit["stack"]["cuda"], "12.4");
  // Every report while it ran had the old one.
  for (const json& beat : server.Heartbeats("h200-0")) {
    if (beat.contains("maintenance") &&
        beat["maintenance"]["state"] == "running") {
      EXPECT_EQ(beat["stack"]["driver"], "550.54.15");
    }
  }
}

}  // namespace
}  // namespace loom
