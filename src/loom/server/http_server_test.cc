#include "loom/server/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/sched/test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = testing::MakeCluster({{2, 0}}, 2, 8);
    auto c =
        Controller::Create(cluster_, &store_, ControllerOptions{}, absl::Now());
    ASSERT_TRUE(c.ok());
    controller_ = *std::move(c);
    HttpServerOptions o;
    o.port = 0;
    server_ = std::make_unique<HttpServer>(controller_.get(), o);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    port_ = *port;
    client_ = std::make_unique<httplib::Client>("127.0.0.1", port_);
  }
  void TearDown() override { server_->Stop(); }

  nlohmann::json Post(const std::string& path, const std::string& body,
                      int want) {
    auto r = client_->Post(path, body, "application/json");
    EXPECT_TRUE(r);
    if (!r) return {};
    EXPECT_EQ(r->status, want) << path << ": " << r->body;
    return nlohmann::json::parse(r->body, nullptr, false);
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  int port_ = 0;
};

TEST_F(HttpServerTest, SubmitAndGet) {
  nlohmann::json j = Post(
      "/v1/jobs",
      R"({"name": "hello", "command": ["echo", "hi"], "resources": {"gpus": 2}})",
      201);
  EXPECT_EQ(j["id"], 1);
  EXPECT_EQ(j["state"], "pending");
  EXPECT_EQ(j["user"], "default");
  auto r = client_->Get("/v1/jobs/1");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(nlohmann::json::parse(r->body)["name"], "hello");
  r = client_->Get("/v1/jobs?state=pending");
  ASSERT_TRUE(r);
  EXPECT_EQ(nlohmann::json::parse(r->body)["jobs"].size(), 1u);
}

TEST_F(HttpServerTest, BadInputGetsClearErrors) {
  nlohmann::json e = Post("/v1/jobs", "{not json", 400);
  EXPECT_EQ(e["error"]["code"], "invalid_argument");
  e = Post("/v1/jobs",
           R"({"name": "x", "command": ["true"], "resources": {"gpuz": 1}})",
           400);
  EXPECT_EQ(e["error"]["field"], "resources.gpuz");
  e = Post("/v1/jobs",
           R"({"name": "x", "command": ["true"], "resources": {"gpus": -4}})",
           400);
  EXPECT_EQ(e["error"]["field"], "resources.gpus");
  e = Post("/v1/jobs",
           R"({"name": "x", "command": ["true"], "resources": {"gpus": 64}})",
           400);
  EXPECT_EQ(e["error"]["code"], "infeasible");
  e = Post(
      "/v1/jobs",
      R"({"name": "x", "command": ["true"], "resources": {"gpu_model": "v100"}})",
      400);
  EXPECT_EQ(e["error"]["field"], "resources.gpu_model");
  e = Post("/v1/agents/register", "[1,2,3]", 400);
  EXPECT_EQ(e["error"]["code"], "invalid_argument");
  e = Post("/v1/jobs/7/cancel", "", 404);
  EXPECT_EQ(e["error"]["code"], "not_found");
  for (const char* body :
       {"", "[1]", R"({"ids": 3})", R"({"ids": ["x"]})", R"({"ids": [1.5]})"}) {
    e = Post("/v1/jobs/release", body, 400);
    EXPECT_EQ(e["error"]["field"], "ids") << body;
  }
  e = Post("/v1/jobs/release", R"({"ids": [7]})", 200);
  EXPECT_EQ(e["errors"][0]["error"]["code"], "not_found");
  auto logs = client_->Get("/v1/jobs/1/logs?offset=-1");
  ASSERT_TRUE(logs);
  EXPECT_EQ(logs->status, 400);
  for (const char* run : {"-1", "x", "99999999999"}) {
    logs = client_->Get(absl::StrCat("/v1/jobs/1/logs?run=", run));
    ASSERT_TRUE(logs);
    EXPECT_EQ(logs->status, 400) << run;
    EXPECT_THAT(logs->body, ::testing::HasSubstr("run: ")) << run;
  }
  auto r = client_->Get("/v1/nowhere");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["code"], "not_found");
  r = client_->Get("/v1/jobs?state=sleepy");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = client_->Post("/v1/jobs", std::string(2 << 20, 'x'), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  // Nothing was stored by any of these.
  EXPECT_FALSE(store_.Get(JobKey(1)).ok());
}

TEST_F(HttpServerTest, AServiceOnAPortOutsideTheServicePortsIs400) {
  const std::string spec =
      "kind: service\nname: ssh\nreplicas: 1\nport: 22\n"
      "resources: {gpus: 1}\ncommand: [python3, serve.py]\n";
  nlohmann::json e = Post("/v1/services", spec, 400);
  EXPECT_THAT(e["error"]["message"].get<std::string>(),
              ::testing::HasSubstr("port: 22 is not a service port of this "
                                   "cluster (services.port_range: "
                                   "30000-32767"));
  nlohmann::json ok =
      Post("/v1/services",
           absl::StrReplaceAll(spec, {{"port: 22", "port: 30022"}}), 200);
  EXPECT_EQ(ok["port"], 30022);
}

TEST_F(HttpServerTest, GarbageBytesDoNotWedgeTheServer) {
  for (const std::string& junk :
       {std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 16),

        std::string(
            "POST /v1/jobs HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"na"),
        std::string(5000, '\xff')}) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port_);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    (void)!write(fd, junk.data(), junk.size());
    shutdown(fd, SHUT_WR);
    char buf[256];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
  }
  auto r = client_->Get("/healthz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

TEST_F(HttpServerTest, AgentProtocolAndNodes) {
  nlohmann::json gpus = nlohmann::json::array();
  for (int i = 0; i < 8; ++i) gpus.push_back({{"index", i}, {"model", "h200"}});
  nlohmann::json reg = {{"name", "h200-0"},
                        {"address", "127.0.0.2:1"},
                        {"gpus", gpus},
                        {"tasks", nlohmann::json::array()}};
  nlohmann::json r = Post("/v1/agents/register", reg.dump(), 200);
  EXPECT_EQ(r["heartbeat_interval_ms"], 1000);
  Post("/v1/agents/heartbeat", R"({"name": "h200-0", "tasks": []})", 200);
  Post("/v1/agents/heartbeat", R"({"name": "h200-1", "tasks": []})", 409);
  auto nodes = client_->Get("/v1/nodes");
  ASSERT_TRUE(nodes);
  nlohmann::json list = nlohmann::json::parse(nodes->body)["nodes"];
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0]["state"], "up");
  EXPECT_EQ(list[1]["state"], "unknown");
  Post("/v1/nodes/h200-0/cordon", "", 200);
  auto node = client_->Get("/v1/nodes/h200-0");
  ASSERT_TRUE(node);
  EXPECT_EQ(nlohmann::json::parse(node->body)["state"], "cordoned");
  Post("/v1/nodes/ghost/drain", "", 404);
}

// A standby (no controller): job reads come from the store, writes and
// everything else go to the leader (307), or 503 while none is elected; it
// takes over with `Lead`.
TEST(HttpServerStandbyTest, ReadsFromTheStoreAndSendsTheRestToTheLeader) {
  Cluster cluster = testing::MakeCluster({{2, 0}}, 2, 8);
  MemoryStateStore store;
  {
    // The leader wrote two jobs (and an idempotent retry of the first).
    auto leader =
        Controller::Create(cluster, &store, ControllerOptions{}, absl::Now());
    ASSERT_TRUE(leader.ok());
    auto spec = ParseJobSpec(
        "name: a\ncommand: [sleep, '1']\nresources: {gpus: 2}\n", "a.yaml");
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE((*leader)->Submit(*spec, "alice", absl::Now(), "k1").ok());
    ASSERT_TRUE((*leader)->Submit(*spec, "alice", absl::Now(), "k1").ok());
    ASSERT_TRUE((*leader)->Submit(*spec, "bob", absl::Now()).ok());
  }
  std::string leader_url;
  StandbyReader reads(&cluster, &store);
  HttpServerOptions o;
  o.port = 0;
  o.leader_url = [&] { return leader_url; };
  o.standby_reads = &reads;
  HttpServer server(nullptr, o);
  auto port = server.Start();
  ASSERT_TRUE(port.ok()) << port.status();
  httplib::Client c("127.0.0.1", *port);

  auto jobs = c.Get("/v1/jobs?user=alice");
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200) << jobs->body;
  EXPECT_EQ(jobs->get_header_value("X-Loom-Served-By"), "standby");
  auto list = nlohmann::json::parse(jobs->body)["jobs"];
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0]["id"], 1);
  EXPECT_EQ(list[0]["gpus"], 2);
  auto job = c.Get("/v1/jobs/2/events");
  ASSERT_TRUE(job);
  EXPECT_EQ(job->status, 200);
  EXPECT_EQ(nlohmann::json::parse(job->body)["events"][0]["message"],
            "submitted");
  EXPECT_EQ(c.Get("/v1/jobs/9")->status, 404);
  EXPECT_EQ(c.Get("/v1/jobs?state=nonsense")->status, 400);

  // No leader yet: writes are refused as retryable.
  auto none = c.Post("/v1/jobs", "{}", "application/json");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->status, 503);
  EXPECT_NE(none->body.find("no_leader"), std::string::npos);
  // A leader: writes, nodes and logs go there.
  leader_url = "http://127.0.0.9:7000";
  for (auto [method, path] : std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/jobs"},
           {"POST", "/v1/jobs/1/cancel"},
           {"GET", "/v1/nodes"},
           {"GET", "/v1/jobs/1/logs?task=0"},
           {"POST", "/v1/agents/heartbeat"}}) {
    auto r =
        method == "GET" ? c.Get(path) : c.Post(path, "{}", "application/json");
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 307) << path;
    EXPECT_EQ(r->get_header_value("Location"), leader_url + path);
    EXPECT_EQ(r->get_header_value("X-Loom-Leader"), leader_url);
  }
  auto health = c.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(nlohmann::json::parse(health->body)["role"], "standby");
  auto who = c.Get("/v1/leader");
  ASSERT_TRUE(who);
  EXPECT_EQ(nlohmann::json::parse(who->body)["leader"], leader_url);
  EXPECT_NE(c.Get("/metrics")->body.find("loom_leader 0"), std::string::npos);

  // Elected: the same server now serves everything itself.
  auto controller =
      Controller::Create(cluster, &store, ControllerOptions{}, absl::Now());
  ASSERT_TRUE(controller.ok());
  server.Lead(controller->get());
  EXPECT_TRUE(server.leading());
  auto nodes = c.Get("/v1/nodes");
  ASSERT_TRUE(nodes);
  EXPECT_EQ(nodes->status, 200);
  EXPECT_EQ(c.Get("/v1/jobs")->get_header_value("X-Loom-Served-By"), "");
  EXPECT_NE(c.Get("/metrics")->body.find("loom_leader 1"), std::string::npos);
  server.Stop();
}

// The API with authentication: tokens of every role.
class HttpServerAuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = testing::MakeCluster({{2, 0}}, 2, 8);
    auto c =
        Controller::Create(cluster_, &store_, ControllerOptions{}, absl::Now());
    ASSERT_TRUE(c.ok());
    controller_ = *std::move(c);
    ASSERT_TRUE(auth_.Load(absl::Now()).ok());
    auth_.SetJobRunCheck([this](int64_t job, int64_t run) {
      return controller_->CheckRun(job, run);
    });
    admin_ = Make({.role = Role::kAdmin, .user = "root", .projects = {"*"}});
    alice_ =
        Make({.role = Role::kUser, .user = "alice", .projects = {"default"}});
    bob_ = Make({.role = Role::kUser, .user = "bob", .projects = {"default"}});
    olga_ = Make({.role = Role::kOperator, .user = "olga"});
    join_ = Make({.role = Role::kJoin});
    HttpServerOptions o;
    o.port = 0;
    o.auth = &auth_;
    server_ = std::make_unique<HttpServer>(controller_.get(), o);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }
  void TearDown() override { server_->Stop(); }

  std::string Make(TokenRequest r) {
    auto made = auth_.Create(r, absl::Now());
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? made->second : "";
  }
  // (status, body) of a request with `token` ("" sends no header).
  std::pair<int, nlohmann::json> Call(const std::string& method,
                                      const std::string& path,
                                      const std::string& token,
                                      const std::string& body = "{}") {
    httplib::Headers h;
    if (!token.empty()) h.emplace("Authorization", "Bearer " + token);
    auto r = method == "GET" ? client_->Get(path, h)
                             : client_->Post(path, h, body, "application/json");
    if (!r) return {0, {}};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> controller_;
  TokenRegistry auth_{&store_, /*authoritative=*/true,
                      TokenRegistry::NewSecretKey()};
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
  std::string admin_, alice_, bob_, olga_, join_;
};

// Walks the route table (every route the server registers is in it, or the
// server aborts at start): without a token, with a malformed one, with an
// unknown one, every route but the public ones answers 401.
TEST_F(HttpServerAuthTest, EveryRouteRefusesMissingAndWrongTokens) {
  const std::string unknown = "loom.0123456789abcdef." + std::string(64, '0');
  int checked = 0;
  for (const RouteRule& r : RouteTable()) {
    const std::string path = absl::StrReplaceAll(
        r.route,
        {{"{id}", "1"}, {"{name}", "h200-0"}, {"{token}", "0123456789abcdef"}});
    EXPECT_EQ(RouteOf(path), r.route);
    for (const std::string& token :
         {std::string(), std::string("garbage"), unknown, alice_ + "x"}) {
      const auto [status, body] = Call(r.method, path, token);
      if (r.access == Access::kPublic) {
        EXPECT_NE(status, 401) << r.method << " " << path;
      } else {
        EXPECT_EQ(status, 401) << r.method << " " << path << " token '"
                               << token.substr(0, 8) << "'";
        EXPECT_EQ(body["error"]["code"], "unauthenticated");
      }
    }
    ++checked;
  }
  EXPECT_GE(checked, 28);
  // A token of the wrong kind is 403: agents' tokens cannot use the API,
  // users cannot use the agent protocol.
  EXPECT_EQ(Call("GET", "/v1/jobs", join_).first, 403);
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat", alice_).first, 403);
  EXPECT_EQ(Call("POST", "/v1/agents/register", alice_).first, 403);
  EXPECT_EQ(Call("GET", "/v1/tokens", olga_).first, 403);
  EXPECT_EQ(Call("GET", "/metrics", alice_).first, 403);
}

TEST_F(HttpServerAuthTest, UsersSeeAndTouchOnlyTheirOwnJobs) {
  const std::string spec =
      R"({"name": "secret", "command": ["python3", "train.py", "--key=s3cr3t"],
          "env": {"API_KEY": "s3cr3t"}, "resources": {"gpus": 1}})";
  auto [st1, j1] = Call("POST", "/v1/jobs", alice_, spec);
  ASSERT_EQ(st1, 201) << j1;
  EXPECT_EQ(j1["user"], "alice");
  auto [st2, j2] = Call("POST", "/v1/jobs", alice_, spec);
  ASSERT_EQ(st2, 201);
  // Bob sees the queue, but not Alice's command or environment.
  auto [st3, list] = Call("GET", "/v1/jobs", bob_);
  ASSERT_EQ(st3, 200);
  EXPECT_EQ(list["jobs"].size(), 2u);
  auto [st4, shown] = Call("GET", "/v1/jobs/1", bob_);
  ASSERT_EQ(st4, 200);
  EXPECT_EQ(shown.dump().find("s3cr3t"), std::string::npos) << shown;
  EXPECT_NE(Call("GET", "/v1/jobs/1", alice_).second.dump().find("s3cr3t"),
            std::string::npos);
  // Bob can neither cancel, release, nor read the logs of Alice's job.
  for (const auto& [method, path] :
       std::vector<std::pair<std::string, std::string>>{
           {"POST", "/v1/jobs/1/cancel"},
           {"POST", "/v1/jobs/1/release"},
           {"GET", "/v1/jobs/1/logs?task=0"},
           {"POST", "/v1/jobs/1/checkpoint"}}) {
    auto [status, body] = Call(method, path, bob_);
    EXPECT_EQ(status, 403) << path;
    EXPECT_EQ(body["error"]["message"], "job 1 belongs to alice, not to bob");
  }
  auto [st5, bulk] = Call("POST", "/v1/jobs/release", bob_, R"({"ids": [1]})");
  ASSERT_EQ(st5, 200);
  EXPECT_EQ(bulk["errors"][0]["error"]["code"], "permission_denied");
  // Bob may not submit as Alice, as root, or to a project he is not in.
  EXPECT_EQ(
      Call(
          "POST", "/v1/jobs", bob_,
          R"({"name": "x", "command": ["true"], "user": "alice", "resources": {"gpus": 1}})")
          .first,
      403);
  EXPECT_EQ(
      Call(
          "POST", "/v1/jobs", bob_,
          R"({"name": "x", "command": ["true"], "project": "research", "resources": {"gpus": 1}})")
          .first,
      403);
  // An operator drains nodes but reads no one's logs.
  EXPECT_EQ(Call("POST", "/v1/nodes/h200-0/drain", olga_).first, 200);
  EXPECT_EQ(Call("POST", "/v1/nodes/h200-0/drain", alice_).first, 403);
  EXPECT_EQ(Call("GET", "/v1/jobs/1/logs?task=0", olga_).first, 403);
  EXPECT_EQ(Call("GET", "/metrics", olga_).first, 200);
  // Alice cancels her own job; the admin can do everything.
  EXPECT_EQ(Call("POST", "/v1/jobs/1/cancel", alice_).first, 200);
  EXPECT_EQ(Call("POST", "/v1/jobs/2/cancel", admin_).first, 200);
  EXPECT_NE(Call("GET", "/v1/jobs/2/logs?task=0", admin_).first, 403);
  EXPECT_EQ(
      Call(
          "POST", "/v1/jobs", admin_,
          R"({"name": "x", "command": ["id"], "user": "root", "resources": {"gpus": 1}})")
          .first,
      201);
  // Idempotency keys are per user: Bob's retry with Alice's key makes his
  // own job instead of showing hers.
  httplib::Headers alice_key = {{"Authorization", "Bearer " + alice_},
                                {"Idempotency-Key", "k-1"}};
  httplib::Headers bob_key = {{"Authorization", "Bearer " + bob_},
                              {"Idempotency-Key", "k-1"}};
  const std::string small =
      R"({"name": "y", "command": ["true"], "resources": {"gpus": 1}})";
  auto a1 = client_->Post("/v1/jobs", alice_key, small, "application/json");
  auto a2 = client_->Post("/v1/jobs", alice_key, small, "application/json");
  auto b1 = client_->Post("/v1/jobs", bob_key, small, "application/json");
  ASSERT_TRUE(a1 && a2 && b1);
  EXPECT_EQ(a1->status, 201);
  EXPECT_EQ(a2->status, 200);
  EXPECT_EQ(b1->status, 201);
  EXPECT_EQ(nlohmann::json::parse(a1->body)["id"],
            nlohmann::json::parse(a2->body)["id"]);
  EXPECT_EQ(nlohmann::json::parse(b1->body)["user"], "bob");
  // A job's own token (of a live run) reports its checkpoints, and nothing
  // else.
  auth_.SetJobRunCheck([](int64_t, int64_t) { return absl::OkStatus(); });
  const std::string job2 = auth_.JobToken(2, 0);
  EXPECT_NE(Call("POST", "/v1/jobs/2/checkpoint", job2).first, 403);
  EXPECT_EQ(Call("POST", "/v1/jobs/1/checkpoint", job2).first, 403);
  EXPECT_EQ(Call("GET", "/v1/jobs", job2).first, 403);
}

// Issue 15, item 7: a job token dies with its run, and its numbers are
// canonical ("loomjob.02." is not job 2's).
TEST_F(HttpServerAuthTest, JobTokensOfEndedRunsAndOddNumbersAreRefused) {
  const std::string spec =
      R"({"name": "t", "command": ["true"], "resources": {"gpus": 1}})";
  ASSERT_EQ(Call("POST", "/v1/jobs", alice_, spec).first, 201);
  // Pending (no node is up): no run is live yet.
  auto [pending, why] =
      Call("POST", "/v1/jobs/1/checkpoint", auth_.JobToken(1, 0));
  EXPECT_EQ(pending, 401) << why;
  ASSERT_EQ(Call("POST", "/v1/jobs/1/cancel", alice_).first, 200);
  auto [ended, why_ended] =
      Call("POST", "/v1/jobs/1/checkpoint", auth_.JobToken(1, 0));
  EXPECT_EQ(ended, 401);
  EXPECT_THAT(std::string(why_ended["error"]["message"]),
              ::testing::HasSubstr("no longer valid"));
  // With every run live, the canonical token passes and look-alikes do not.
  auth_.SetJobRunCheck([](int64_t, int64_t) { return absl::OkStatus(); });
  const std::string good = auth_.JobToken(2, 0);
  const std::string mac = good.substr(good.rfind('.') + 1);
  EXPECT_EQ(Call("GET", "/v1/whoami", good).first, 200);
  for (const std::string& bad : {"loomjob.02.0." + mac, "loomjob.+2.0." + mac,
                                 "loomjob.2.00." + mac, "loomjob.2." + mac}) {
    EXPECT_EQ(Call("GET", "/v1/whoami", bad).first, 401) << bad;
  }
}

TEST_F(HttpServerAuthTest, AgentsJoinWithATokenAndRevokedCredentialsStop) {
  nlohmann::json reg = {{"name", "h200-0"},
                        {"address", "127.0.0.2:7100"},
                        {"gpus", nlohmann::json::array()},
                        {"emulated", true},
                        {"tasks", nlohmann::json::array()}};
  for (int g = 0; g < 8; ++g) {
    reg["gpus"].push_back({{"index", g}, {"model", "h200"}});
  }
  EXPECT_EQ(Call("POST", "/v1/agents/register", "", reg.dump()).first, 401);
  // A node that is not in the cluster spec gets no credential.
  nlohmann::json stranger = reg;
  stranger["name"] = "intruder";
  EXPECT_EQ(Call("POST", "/v1/agents/register", join_, stranger.dump()).first,
            404);
  auto [status, answer] =
      Call("POST", "/v1/agents/register", join_, reg.dump());
  ASSERT_EQ(status, 200) << answer;
  const std::string credential = answer["credential"];
  EXPECT_EQ(answer["agent_key"], auth_.AgentKey("h200-0"));
  const std::string beat =
      nlohmann::json{{"name", "h200-0"}, {"tasks", nlohmann::json::array()}}
          .dump();
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat", credential, beat).first, 200);
  // The credential is this node's only.
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat", credential,
                 R"({"name": "h200-1", "tasks": []})")
                .first,
            403);
  EXPECT_EQ(Call("POST", "/v1/nodes/h200-0/revoke", olga_).first, 403);
  EXPECT_EQ(Call("POST", "/v1/nodes/h200-0/revoke", admin_).first, 200);
  auto [after, why] = Call("POST", "/v1/agents/heartbeat", credential, beat);
  EXPECT_EQ(after, 401);
  EXPECT_THAT(std::string(why["error"]["message"]),
              ::testing::HasSubstr("revoked"));
}

// Issue 15, item 1: a join token does not take over a node that has joined
// (the impostor gets 409, and no key, no credential, no address change);
// after the admin's revocation the node joins again with a new key, and the
// old key and credential are dead.
TEST_F(HttpServerAuthTest, AJoinTokenCannotTakeOverALiveNode) {
  nlohmann::json reg = {{"name", "h200-0"},
                        {"address", "127.0.0.2:7100"},
                        {"gpus", nlohmann::json::array()},
                        {"emulated", true},
                        {"tasks", nlohmann::json::array()}};
  for (int g = 0; g < 8; ++g) {
    reg["gpus"].push_back({{"index", g}, {"model", "h200"}});
  }
  auto [status, real] = Call("POST", "/v1/agents/register", join_, reg.dump());
  ASSERT_EQ(status, 200) << real;
  const std::string old_key = real["agent_key"];
  const std::string old_credential = real["credential"];
  // The join token was single-use.
  EXPECT_EQ(Call("POST", "/v1/agents/register", join_, reg.dump()).first, 401);
  // An impostor with a fresh (even reusable) join token.
  const std::string other = Make({.role = Role::kJoin, .reusable = true});
  nlohmann::json evil = reg;
  evil["address"] = "127.0.0.66:7100";
  auto [refused, why] = Call("POST", "/v1/agents/register", other, evil.dump());
  EXPECT_EQ(refused, 409) << why;
  EXPECT_THAT(std::string(why["error"]["message"]),
              ::testing::HasSubstr("loom token revoke --node h200-0"));
  EXPECT_FALSE(why.contains("agent_key"));
  EXPECT_EQ(auth_.AgentKey("h200-0"), old_key);
  EXPECT_EQ((*controller_->NodeAddress("h200-0")), "127.0.0.2:7100");
  const std::string beat =
      nlohmann::json{{"name", "h200-0"}, {"tasks", nlohmann::json::array()}}
          .dump();
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat", old_credential, beat).first,
            200);
  // A token bound to other nodes may not join this one.
  const std::string bound = Make({.role = Role::kJoin, .nodes = {"h200-1"}});
  EXPECT_EQ(Call("POST", "/v1/agents/register", bound, reg.dump()).first, 403);
  // The admin revokes the node's credential; it joins again.
  ASSERT_EQ(Call("POST", "/v1/nodes/h200-0/revoke", admin_).first, 200);
  auto [again, fresh] = Call("POST", "/v1/agents/register", other, reg.dump());
  ASSERT_EQ(again, 200) << fresh;
  EXPECT_NE(fresh["agent_key"], old_key);
  EXPECT_EQ(fresh["agent_key"], auth_.AgentKey("h200-0"));
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat", old_credential, beat).first,
            401);
  EXPECT_EQ(Call("POST", "/v1/agents/heartbeat",
                 fresh["credential"].get<std::string>(), beat)
                .first,
            200);
  // A registration that fails after the join gives the token its use back.
  const std::string once = Make({.role = Role::kJoin});
  nlohmann::json wrong = reg;
  wrong["name"] = "h200-1";
  wrong["gpus"] = nlohmann::json::array();  // the spec says 8
  EXPECT_EQ(Call("POST", "/v1/agents/register", once, wrong.dump()).first, 400);
  wrong["gpus"] = reg["gpus"];
  EXPECT_EQ(Call("POST", "/v1/agents/register", once, wrong.dump()).first, 200);
}

// Issue 15, item 8: POST /v1/tokens refuses what is not a valid request,
// naming the field.
TEST_F(HttpServerAuthTest, TokenRequestsAreValidated) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {R"({"user": "a", "projects": ["a b"]})", "projects"},
      {"{\"user\": \"a\", \"projects\": [\"\\u0000\"]}", "projects"},
      {R"({"user": "a", "projects": [""]})", "projects"},
      {R"({"user": "a", "projects": "x"})", "projects"},
      {R"({"user": "a", "projectz": ["x"]})", "projectz"},
      {R"({"user": "."})", "user"},
      {R"({"user": ".."})", "user"},
      {R"({"user": "-rf"})", "user"},
      {R"({"user": "a/b"})", "user"},
      {R"({"user": ")" + std::string(10000, 'a') + R"("})", "user"},
      {R"({"user": ""})", "user"},
      {R"({"user": 7})", "user"},
      {R"({"user": "a", "ttl_seconds": 1e-9})", "ttl_seconds"},
      {R"({"user": "a", "ttl_seconds": 0.5})", "ttl_seconds"},
      {R"({"user": "a", "ttl_seconds": -1})", "ttl_seconds"},
      {R"({"user": "a", "ttl_seconds": "1h"})", "ttl_seconds"},
      {R"({"user": "a", "reusable": true})", "reusable"},
      {R"({"role": "join", "nodes": ["ghost"]})", "nodes"},
      {R"({"role": "join", "user": "a"})", "user"},
      {R"({"role": "node", "user": "h200-0"})", "role"},
      {R"({"role": "root", "user": "a"})", "role"},
      {"{\"user\": \"a\", \"description\": \"\\u001b[2J\"}", "description"},
  };
  for (const auto& [body, field] : bad) {
    auto [status, answer] = Call("POST", "/v1/tokens", admin_, body);
    EXPECT_EQ(status, 400) << body.substr(0, 80) << ": " << answer;
    EXPECT_EQ(answer["error"]["field"], field) << body.substr(0, 80) << answer;
  }
  EXPECT_EQ(auth_.List().size(), 5u);  // the fixture's, nothing more
  EXPECT_EQ(Call("POST", "/v1/tokens", admin_,
                 R"({"user": "alice.b", "projects": ["default", "*"],
                     "ttl_seconds": 1})")
                .first,
            201);
  auto [made, join] = Call("POST", "/v1/tokens", admin_,
                           R"({"role": "join", "nodes": ["h200-0"]})");
  ASSERT_EQ(made, 201) << join;
  EXPECT_EQ(join["nodes"][0], "h200-0");
  EXPECT_EQ(join["once"], true);
  // What an older CLI sends makes a single-use token all the same.
  auto [old_made, old_join] =
      Call("POST", "/v1/tokens", admin_, R"({"role": "join", "once": false})");
  ASSERT_EQ(old_made, 201) << old_join;
  EXPECT_EQ(old_join["once"], true);
  auto [reusable, many] = Call("POST", "/v1/tokens", admin_,
                               R"({"role": "join", "reusable": true})");
  ASSERT_EQ(reusable, 201) << many;
  EXPECT_EQ(many["once"], false);
}

// Issue 15, items 6 and 8: a project's priority classes (low and normal by
// default; the cluster spec grants more), and declared projects only.
TEST_F(HttpServerAuthTest, PriorityClassesAndProjectsAreChecked) {
  const std::string high =
      R"({"name": "x", "command": ["true"], "priority": "high", "resources": {"gpus": 1}})";
  auto [st, body] = Call("POST", "/v1/jobs", alice_, high);
  EXPECT_EQ(st, 403) << body;
  EXPECT_THAT(std::string(body["error"]["message"]),
              ::testing::HasSubstr("project default may not use priority "
                                   "class 'high'"));
  EXPECT_EQ(Call("POST", "/v1/jobs", admin_, high).first, 201);
  for (const char* priority : {"low", "normal"}) {
    EXPECT_EQ(
        Call("POST", "/v1/jobs", alice_,
             absl::StrCat(R"({"name": "x", "command": ["true"], "priority": ")",
                          priority, R"(", "resources": {"gpus": 1}})"))
            .first,
        201)
        << priority;
  }
}

TEST_F(HttpServerTest, MetricsCountRequestsAndAllocations) {
  Post("/v1/jobs", R"({"name": "x", "command": ["true"], "hold": true})", 201);
  Post("/v1/jobs", "garbage", 400);
  // httplib counts a request (its logger) after the reply has gone out, so
  // the count can lag the client by a moment: wait for it, bounded.
  const std::string counted =
      "loom_api_requests_total{route=\"/v1/jobs\",method=\"POST\",status="
      "\"400\"} 1\n";
  httplib::Result r = client_->Get("/metrics");
  for (int i = 0; i < 200 && r && r->body.find(counted) == std::string::npos;
       ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    r = client_->Get("/metrics");
  }
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"),
            "text/plain; version=0.0.4; charset=utf-8");
  const std::string& m = r->body;
  EXPECT_NE(m.find("loom_jobs{state=\"held\",project=\"default\"} 1\n"),
            std::string::npos)
      << m;
  EXPECT_NE(m.find("loom_pending_jobs{reason=\"held\"} 1\n"),
            std::string::npos);
  EXPECT_NE(m.find("loom_gpus{pool=\"h200\",gpu_model=\"h200\",state="
                   "\"total\"} 16\n"),
            std::string::npos);
  EXPECT_NE(m.find("loom_nodes{state=\"unknown\"} 2\n"), std::string::npos);
  EXPECT_NE(m.find("loom_api_requests_total{route=\"/v1/jobs\",method="
                   "\"POST\",status=\"201\"} 1\n"),
            std::string::npos);
  EXPECT_NE(m.find("loom_api_requests_total{route=\"/v1/jobs\",method="
                   "\"POST\",status=\"400\"} 1\n"),
            std::string::npos);
  EXPECT_NE(m.find("# TYPE loom_scheduling_pass_seconds histogram\n"),
            std::string::npos);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Only what the route table names is served: a path of no rule is 404
// before any check or handler, a known path with another method 405, and
// job ids are canonical (a zero-padded id was read as job 7 by the router
// but matched no access rule, so any token could read any job).
TEST_F(HttpServerAuthTest, NoRuleNoAnswerAndCanonicalIdsOnly) {
  ASSERT_EQ(
      Call("POST", "/v1/jobs", alice_,
           R"({"name": "a", "command": ["true"], "resources": {"gpus": 1}})")
          .first,
      201);
  const std::string job = auth_.JobToken(2, 0);  // not job 1's
  for (const std::string& token : {alice_, job, join_}) {
    for (const char* path :
         {"/v1/jobs/0000000000000000001", "/v1/jobs/01", "/v1/jobs/+1",
          "/v1/jobs/0000000000000000001/events", "/v1/jobs/1/", "/v1/jobs//1",
          "/v1/jobs/9223372036854775808"}) {
      auto [status, body] = Call("GET", path, token);
      EXPECT_EQ(status, 404) << path << ": " << body;
      EXPECT_EQ(body.dump().find("\"a\""), std::string::npos) << path;
    }
  }
  EXPECT_EQ(Call("GET", "/v1/jobs/1", alice_).first, 200);
  EXPECT_NE(Call("GET", "/v1/jobs/1", job).first, 200);
  // A wrong method: 405 with the methods that are allowed.
  httplib::Headers h = {{"Authorization", "Bearer " + alice_}};
  auto r = client_->Delete("/v1/jobs", h);
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
  EXPECT_EQ(r->get_header_value("Allow"), "POST, GET");
  r = client_->Put("/v1/jobs/1/cancel", h, "", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 405);
}

// A fake agent for the log proxy: launches succeed, log reads answer what
// `logs` says.
class LogProxyTest : public HttpServerTest {
 protected:
  void SetUp() override {
    HttpServerTest::SetUp();
    agent_.Post("/v1/tasks",
                [](const httplib::Request&, httplib::Response& res) {
                  res.set_content(R"({"ok": true})", "application/json");
                });
    agent_.Get(R"(/v1/tasks/([^/]+)/logs)", [this](const httplib::Request& req,
                                                   httplib::Response& res) {
      if (missing_) {
        res.status = 404;
        res.set_content(
            R"({"error": {"code": "not_found", "message": "no stdout for task 1.0.0"}})",
            "application/json");
        return;
      }
      int64_t offset = std::stoll(req.get_param_value("offset"));
      res.set_content(log_.substr(std::min<size_t>(offset, log_.size())),
                      "text/plain");
    });
    agent_.set_keep_alive_timeout(1);
    agent_port_ = agent_.bind_to_any_port("127.0.0.1");
    agent_thread_ = std::thread([this] { agent_.listen_after_bind(); });
    nlohmann::json gpus = nlohmann::json::array();
    for (int i = 0; i < 8; ++i)
      gpus.push_back({{"index", i}, {"model", "h200"}});
    Post("/v1/agents/register",
         nlohmann::json{{"name", "h200-0"},
                        {"address", absl::StrCat("127.0.0.1:", agent_port_)},
                        {"gpus", gpus},
                        {"tasks", nlohmann::json::array()}}
             .dump(),
         200);
    Post("/v1/jobs",
         R"({"name": "l", "command": ["true"], "resources": {"gpus": 1}})",
         201);
    for (int i = 0; i < 100; ++i) {
      auto j = client_->Get("/v1/jobs/1");
      if (j && nlohmann::json::parse(j->body)["state"] == "running") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  void TearDown() override {
    agent_.stop();
    if (agent_thread_.joinable()) agent_thread_.join();
    HttpServerTest::TearDown();
  }
  httplib::Server agent_;
  std::thread agent_thread_;
  int agent_port_ = 0;
  std::string log_ = "line 1\nline 2\n";
  std::atomic<bool> missing_{false};
};

TEST_F(LogProxyTest, LogsComeThroughAndAgentErrorsKeepTheirStatus) {
  auto r = client_->Get("/v1/jobs/1/logs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "line 1\nline 2\n");
  r = client_->Get("/v1/jobs/1/logs?offset=7");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "line 2\n");
  // The agent's 404 is a 404 with its message, not log text with a 200.
  missing_ = true;
  r = client_->Get("/v1/jobs/1/logs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404) << r->body;
  nlohmann::json err = nlohmann::json::parse(r->body, nullptr, false);
  EXPECT_EQ(err["error"]["code"], "not_found") << r->body;
  EXPECT_NE(err["error"]["message"].get<std::string>().find("no stdout"),
            std::string::npos);
  // An agent that is gone: 503, at once.
  agent_.stop();
  agent_thread_.join();
  const auto start = std::chrono::steady_clock::now();
  r = client_->Get("/v1/jobs/1/logs");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(LogProxyTest, AFollowStreamsWhatTheTaskWritesAndEndsWithIt) {
  std::string got;
  std::thread reader([&] {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(20);
    c.Get("/v1/jobs/1/logs?follow=1", [&](const char* d, size_t n) {
      got.append(d, n);
      return true;
    });
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  // The task ends: the controller hears of its exit; the stream sends the
  // rest and ends.
  Post(
      "/v1/agents/heartbeat",
      R"({"name": "h200-0", "tasks": [{"task_id": "1.0.0", "state": "exited", "exit_code": 0}]})",
      200);
  reader.join();
  EXPECT_EQ(got, "line 1\nline 2\n");
}

// A body is read as it is, whatever its Content-Type: curl's default
// (application/x-www-form-urlencoded) once met httplib's 8 KiB form limit
// and a 9 KB spec was refused as "over 1 MiB".
TEST_F(HttpServerTest, ABodyIsASpecWhateverItsContentType) {
  std::string spec =
      R"({"name": "big", "command": ["true"], "resources": {"gpus": 1}, "env": {"PAD": ")";
  spec += std::string(9000, 'x') + "\"}}";
  auto r = client_->Post("/v1/jobs", spec, "application/x-www-form-urlencoded");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 201) << r->body.substr(0, 300);
}

}  // namespace
}  // namespace loom
