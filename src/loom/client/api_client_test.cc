#include "loom/client/api_client.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/common/refusing_port_test_util.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// An in-process HTTP server on 127.0.0.1 and a free port, serving whatever
// routes a test installs on `server()`.
class FakeServer {
 public:
  FakeServer() = default;
  ~FakeServer() { Stop(); }

  httplib::Server& server() { return server_; }

  // Starts listening; call after installing the routes.
  void Start() {
    port_ = server_.bind_to_any_port("127.0.0.1");
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  void Stop() {
    if (thread_.joinable()) {
      server_.stop();
      thread_.join();
    }
  }

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }

 private:
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
};

void JsonReply(httplib::Response& res, int status, const nlohmann::json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

void ErrorReply(httplib::Response& res, int status, const std::string& code,
                const std::string& message, const std::string& field = "") {
  nlohmann::json e = {{"code", code}, {"message", message}};
  if (!field.empty()) e["field"] = field;
  JsonReply(res, status, {{"error", e}});
}

class ApiClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    httplib::Server& s = fake_.server();
    s.Post("/v1/jobs", [](const httplib::Request& req, httplib::Response& res) {
      const nlohmann::json spec =
          nlohmann::json::parse(req.body, nullptr, false);
      if (spec.is_discarded() || !spec.is_object()) {
        ErrorReply(res, 400, "invalid_argument", "body is not JSON");
        return;
      }
      if (spec.value("name", "") == "bad-model") {
        ErrorReply(res, 400, "invalid_argument",
                   "the cluster has no 'v100' GPUs (it has h200, a100)",
                   "resources.gpu_model");
        return;
      }
      JsonReply(res, 201,
                {{"id", 42},
                 {"name", spec.value("name", "")},
                 {"user", req.get_header_value("X-Loom-User")},
                 {"content_type", req.get_header_value("Content-Type")},
                 {"state", "pending"}});
    });
    s.Get("/v1/jobs", [](const httplib::Request& req, httplib::Response& res) {
      nlohmann::json query = nlohmann::json::object();
      for (const auto& [k, v] : req.params) query[k] = v;
      JsonReply(res, 200,
                {{"jobs", nlohmann::json::array()}, {"query", query}});
    });
    s.Get(R"(/v1/jobs/(\d+))",
          [](const httplib::Request& req, httplib::Response& res) {
            if (req.matches[1] == "42") {
              JsonReply(res, 200, {{"id", 42}, {"state", "running"}});
            } else {
              ErrorReply(res, 404, "not_found",
                         absl::StrCat("no job ", std::string(req.matches[1])));
            }
          });
    s.Post(R"(/v1/jobs/(\d+)/release)",
           [](const httplib::Request&, httplib::Response& res) {
             ErrorReply(res, 409, "failed_precondition",
                        "job 42 is not held (it is running)");
           });
    s.Post(R"(/v1/nodes/([^/]+)/cordon)",
           [](const httplib::Request& req, httplib::Response& res) {
             JsonReply(res, 200,
                       {{"name", std::string(req.matches[1])},
                        {"state", "cordoned"},
                        {"body_size", req.body.size()}});
           });
    s.Get("/v1/nodes", [](const httplib::Request&, httplib::Response& res) {
      res.status = 500;
      res.set_content("<html>proxy error</html>", "text/html");
    });
    s.Get("/v1/projects", [](const httplib::Request&, httplib::Response& res) {
      res.status = 200;
      res.set_content("not json", "text/plain");
    });
    s.Get(R"(/v1/jobs/(\d+)/logs)", [](const httplib::Request& req,
                                       httplib::Response& res) {
      if (req.matches[1] == "13") {
        ErrorReply(res, 502, "bad_gateway", "the agent did not answer");
        return;
      }
      if (req.matches[1] != "42") {
        ErrorReply(res, 404, "not_found", "no job 9");
        return;
      }
      auto chunks =
          std::make_shared<std::vector<std::string>>(std::vector<std::string>{
              absl::StrCat("task=", req.get_param_value("task"),
                           " stream=", req.get_param_value("stream"),
                           " follow=", req.get_param_value("follow"), "\n"),
              "step 1\n", "step 2\n"});
      res.set_chunked_content_provider(
          "text/plain",
          [chunks, i = size_t{0}](size_t, httplib::DataSink& sink) mutable {
            if (i == chunks->size()) {
              sink.done();
              return true;
            }
            const std::string& c = (*chunks)[i++];
            return sink.write(c.data(), c.size());
          });
    });
    fake_.Start();
  }

  ApiClient Client() { return ApiClient({fake_.url()}, {.user = "alice"}); }

  FakeServer fake_;
};

TEST_F(ApiClientTest, SubmitSendsJsonAndUser) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> job =
      client.SubmitJob({{"name", "train"}, {"command", {"true"}}});
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["id"], 42);
  EXPECT_EQ((*job)["user"], "alice");
  EXPECT_EQ((*job)["name"], "train");
  EXPECT_THAT((*job)["content_type"].get<std::string>(),
              HasSubstr("application/json"));
}

TEST_F(ApiClientTest, BadRequestCarriesMessageAndField) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> job =
      client.SubmitJob({{"name", "bad-model"}});
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job.status().message(),
            "resources.gpu_model: the cluster has no 'v100' GPUs (it has "
            "h200, a100)");
  EXPECT_EQ(ServerErrorCode(job.status()), "invalid_argument");
  EXPECT_EQ(HttpStatusOf(job.status()), 400);
}

TEST_F(ApiClientTest, NotFound) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> job = client.GetJob(7);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(job.status().message(), "no job 7");
  EXPECT_EQ(HttpStatusOf(job.status()), 404);
  ASSERT_TRUE(client.GetJob(42).ok());
}

TEST_F(ApiClientTest, UnknownRouteWithoutBodyNamesTheStatus) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> node = client.GetNode("h200-0");
  ASSERT_FALSE(node.ok());
  EXPECT_EQ(node.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(node.status().message()),
              HasSubstr("HTTP 404 Not Found from " + fake_.url()));
}

TEST_F(ApiClientTest, ConflictIsFailedPrecondition) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> job = client.ReleaseJob(42);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ServerErrorCode(job.status()), "failed_precondition");
}

TEST_F(ApiClientTest, NonJsonErrorBodyIsQuoted) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> nodes = client.ListNodes();
  ASSERT_FALSE(nodes.ok());
  EXPECT_EQ(nodes.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(nodes.status().message()),
              HasSubstr("HTTP 500 Internal Server Error"));
  EXPECT_THAT(std::string(nodes.status().message()), HasSubstr("proxy error"));
}

TEST_F(ApiClientTest, NonJsonSuccessIsAnError) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> projects = client.ListProjects();
  ASSERT_FALSE(projects.ok());
  EXPECT_THAT(std::string(projects.status().message()), HasSubstr("not JSON"));
}

TEST_F(ApiClientTest, ListJobsEncodesFilters) {
  ApiClient client = Client();
  JobFilter filter;
  filter.states = {"pending", "running"};
  filter.project = "search";
  filter.limit = 5;
  absl::StatusOr<nlohmann::json> jobs = client.ListJobs(filter);
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  const nlohmann::json& q = (*jobs)["query"];
  EXPECT_EQ(q["state"], "pending,running");
  EXPECT_EQ(q["project"], "search");
  EXPECT_EQ(q["limit"], "5");
  EXPECT_FALSE(q.contains("user"));
}

TEST_F(ApiClientTest, NodeActionPostsEmptyBody) {
  ApiClient client = Client();
  absl::StatusOr<nlohmann::json> node = client.CordonNode("h200-3");
  ASSERT_TRUE(node.ok()) << node.status();
  EXPECT_EQ((*node)["name"], "h200-3");
  EXPECT_EQ((*node)["body_size"], 0);
}

TEST_F(ApiClientTest, StreamsLogsInChunks) {
  ApiClient client = Client();
  std::vector<std::string> chunks;
  absl::Status st =
      client.StreamLogs(42, {.task = 2, .stream = "stderr", .follow = true},
                        [&](std::string_view c) {
                          chunks.emplace_back(c);
                          return true;
                        });
  ASSERT_TRUE(st.ok()) << st;
  std::string all;
  for (const std::string& c : chunks) all += c;
  EXPECT_EQ(all, "task=2 stream=stderr follow=1\nstep 1\nstep 2\n");
  EXPECT_GE(chunks.size(), 1u);
}

TEST_F(ApiClientTest, StreamStopsWhenTheCallbackSaysSo) {
  ApiClient client = Client();
  int calls = 0;
  absl::Status st = client.StreamLogs(42, {}, [&](std::string_view) {
    ++calls;
    return false;
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 1);
}

TEST_F(ApiClientTest, LogErrorsAreStatuses) {
  ApiClient client = Client();
  bool called = false;
  absl::Status st = client.StreamLogs(9, {}, [&](std::string_view) {
    called = true;
    return true;
  });
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(st.message(), "no job 9");
  EXPECT_FALSE(called);
}

TEST_F(ApiClientTest, AgentErrorsPassedThroughAreStatusesAlsoWhenFollowing) {
  ApiClient client = Client();
  for (bool follow : {false, true}) {
    std::string got;
    absl::Status st =
        client.StreamLogs(13, {.follow = follow}, [&](std::string_view c) {
          got.append(c);
          return true;
        });
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.message(), "the agent did not answer");
    EXPECT_EQ(HttpStatusOf(st), 502);
    EXPECT_EQ(ServerErrorCode(st), "bad_gateway");
    EXPECT_EQ(got, "");  // the error body is never log text
  }
}

TEST_F(ApiClientTest, TriesTheNextServerWhenOneIsDown) {
  const testing::RefusingPort refusing;
  const std::string down = refusing.url();
  ApiClient client({down, fake_.url()});
  absl::StatusOr<nlohmann::json> job = client.GetJob(42);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ((*job)["state"], "running");
  // A server error is an answer: no failover for it.
  EXPECT_EQ(client.GetJob(7).status().code(), absl::StatusCode::kNotFound);
}

TEST(ApiClientNoServer, ConnectionRefusedNamesTheUrl) {
  const testing::RefusingPort refusing;
  const std::string url = refusing.url();
  ApiClient client({url});
  absl::StatusOr<nlohmann::json> jobs = client.ListJobs();
  ASSERT_FALSE(jobs.ok());
  EXPECT_EQ(jobs.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(jobs.status().message(),
            absl::StrCat("cannot reach the loom server at ", url,
                         ": Connection refused"));
  EXPECT_EQ(HttpStatusOf(jobs.status()), 0);
}

TEST(ApiClientNoServer, AllServersDownListsEach) {
  const testing::RefusingPort refusing_a;
  const testing::RefusingPort refusing_b;
  const std::string a = refusing_a.url();
  const std::string b = refusing_b.url();
  // With several servers the client keeps trying for `failover_wait`.
  ApiClient client({a, b}, {.failover_wait = absl::Milliseconds(500)});
  const absl::Time start = absl::Now();
  absl::Status st =
      client.StreamLogs(1, {}, [](std::string_view) { return true; });
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(500));
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(st.message()),
              StartsWith("cannot reach any loom server ("));
  EXPECT_THAT(std::string(st.message()), HasSubstr(a + ": Connection refused"));
  EXPECT_THAT(std::string(st.message()), HasSubstr(b + ": Connection refused"));
}

TEST(ApiClientFailover, UnavailableServerIsSkipped) {
  FakeServer starting;
  starting.server().Get("/v1/projects",
                        [](const httplib::Request&, httplib::Response& res) {
                          ErrorReply(res, 503, "unavailable", "starting");
                        });
  starting.Start();
  FakeServer ready;
  ready.server().Get("/v1/projects",
                     [](const httplib::Request&, httplib::Response& res) {
                       JsonReply(res, 200, {{"projects", {{{"name", "a"}}}}});
                     });
  ready.Start();
  ApiClient client({starting.url(), ready.url()});
  absl::StatusOr<nlohmann::json> projects = client.ListProjects();
  ASSERT_TRUE(projects.ok()) << projects.status();
  EXPECT_EQ((*projects)["projects"][0]["name"], "a");

  ApiClient only({starting.url()});
  EXPECT_EQ(only.ListProjects().status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(only.ListProjects().status().message(), "starting");
}

// A standby of a replicated controller answers 307 and names the leader;
// the client goes there, whether the leader is in its list or not.
TEST(ApiClientFailover, StandbySendsTheClientToTheLeader) {
  FakeServer leader;
  std::vector<std::string> keys;
  leader.server().Post(
      "/v1/jobs", [&](const httplib::Request& req, httplib::Response& res) {
        keys.push_back(req.get_header_value("Idempotency-Key"));
        JsonReply(res, 201, {{"id", 1}});
      });
  leader.Start();
  FakeServer standby;
  int redirected = 0;
  standby.server().Post(
      "/v1/jobs", [&](const httplib::Request&, httplib::Response& res) {
        ++redirected;
        res.set_header("X-Loom-Leader", leader.url());
        ErrorReply(res, 307, "not_leader", "this server is a standby");
      });
  standby.Start();
  ApiClient only_standby({standby.url()});
  absl::StatusOr<nlohmann::json> job = only_standby.SubmitJob({{"tasks", 1}});
  ASSERT_TRUE(job.ok()) << job.status();
  ApiClient both({standby.url(), leader.url()});
  ASSERT_TRUE(both.SubmitJob({{"tasks", 1}}).ok());
  ASSERT_TRUE(both.SubmitJob({{"tasks", 1}}).ok());  // straight to the leader
  EXPECT_EQ(redirected, 2);
  // Every submission carries an idempotency key of its own.
  ASSERT_EQ(keys.size(), 3u);
  EXPECT_EQ(keys[0].size(), 32u);
  EXPECT_NE(keys[0], keys[1]);
  EXPECT_NE(keys[1], keys[2]);
}

// While no leader is elected, the client waits and tries again.
TEST(ApiClientFailover, WaitsOutAnElection) {
  FakeServer server;
  int calls = 0;
  server.server().Get(
      "/v1/projects", [&](const httplib::Request&, httplib::Response& res) {
        if (++calls < 3) {
          return ErrorReply(res, 503, "no_leader", "no leader elected yet");
        }
        JsonReply(res, 200, {{"projects", nlohmann::json::array()}});
      });
  server.Start();
  ApiClient client({server.url()});
  absl::StatusOr<nlohmann::json> p = client.ListProjects();
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(calls, 3);
  // Not for ever.
  ApiClient impatient({server.url()}, {.failover_wait = absl::ZeroDuration()});
  calls = 0;
  EXPECT_EQ(impatient.ListProjects().status().code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(calls, 1);
}

TEST(ApiClientMaintenance, RoutesAndErrors) {
  FakeServer fake;
  httplib::Server& s = fake.server();
  std::vector<std::string> seen;  // "METHOD PATH BODY", in order
  std::mutex mu;
  auto record = [&](const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(absl::StrCat(req.method, " ", req.path, " ", req.body));
  };
  s.Post("/v1/maintenance", [&](const httplib::Request& req,
                                httplib::Response& res) {
    record(req);
    const nlohmann::json body = nlohmann::json::parse(req.body, nullptr, false);
    if (body.value("pool", "") == "busy") {
      ErrorReply(res, 409, "conflict",
                 "maintenance 2 is running; abort it first");
      return;
    }
    JsonReply(res, 201, {{"id", 3}, {"state", "running"}});
  });
  s.Get("/v1/maintenance",
        [&](const httplib::Request& req, httplib::Response& res) {
          record(req);
          JsonReply(res, 200, {{"maintenances", {{{"id", 3}}, {{"id", 2}}}}});
        });
  s.Get(R"(/v1/maintenance/(\d+))", [&](const httplib::Request& req,
                                        httplib::Response& res) {
    record(req);
    if (req.matches[1] != "3") {
      ErrorReply(res, 404, "not_found", "no maintenance 9");
      return;
    }
    JsonReply(res, 200, {{"id", 3}, {"node_status", nlohmann::json::array()}});
  });
  s.Post(R"(/v1/maintenance/(\d+)/(\w+))",
         [&](const httplib::Request& req, httplib::Response& res) {
           record(req);
           if (req.matches[2] == "resume") {
             ErrorReply(res, 409, "failed_precondition",
                        "maintenance 3 is done; nothing to resume");
             return;
           }
           JsonReply(res, 200, {{"id", 3}, {"state", "paused"}});
         });
  fake.Start();
  ApiClient client({fake.url()});

  absl::StatusOr<nlohmann::json> m = client.StartMaintenance(
      {{"pool", "h200"}, {"command", "true"}, {"batch", 2}});
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)["id"], 3);
  absl::StatusOr<nlohmann::json> busy = client.StartMaintenance(
      {{"pool", "busy"}, {"command", "true"}, {"batch", 2}});
  EXPECT_EQ(busy.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(busy.status().message(),
            "maintenance 2 is running; abort it first");
  EXPECT_EQ(HttpStatusOf(busy.status()), 409);

  absl::StatusOr<nlohmann::json> list = client.ListMaintenances();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)["maintenances"].size(), 2u);
  ASSERT_TRUE(client.GetMaintenance(3).ok());
  absl::StatusOr<nlohmann::json> unknown = client.GetMaintenance(9);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(unknown.status().message(), "no maintenance 9");

  absl::StatusOr<nlohmann::json> paused = client.MaintenanceAction(3, "pause");
  ASSERT_TRUE(paused.ok()) << paused.status();
  EXPECT_EQ((*paused)["state"], "paused");
  absl::StatusOr<nlohmann::json> resumed =
      client.MaintenanceAction(3, "resume");
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(resumed.status().message()),
              HasSubstr("nothing to resume"));
  // An action the API does not have is refused before anything is sent.
  const size_t sent = seen.size();
  EXPECT_EQ(client.MaintenanceAction(3, "restart").status().code(),
            absl::StatusCode::kInvalidArgument);
  fake.Stop();
  ASSERT_EQ(seen.size(), sent);
  EXPECT_EQ(
      seen[0],
      R"(POST /v1/maintenance {"batch":2,"command":"true","pool":"h200"})");
  EXPECT_EQ(seen[2], "GET /v1/maintenance ");
  EXPECT_EQ(seen[3], "GET /v1/maintenance/3 ");
  EXPECT_EQ(seen[5], "POST /v1/maintenance/3/pause ");
  EXPECT_EQ(seen[6], "POST /v1/maintenance/3/resume ");
}

TEST(ApiClientServices, RoutesBodiesAndErrors) {
  FakeServer fake;
  httplib::Server& s = fake.server();
  std::vector<std::string> seen;  // "METHOD TARGET CONTENT-TYPE BODY"
  std::mutex mu;
  auto record = [&](const httplib::Request& req) {
    std::lock_guard<std::mutex> lock(mu);
    seen.push_back(absl::StrCat(req.method, " ", req.target, " ",
                                req.get_header_value("Content-Type"), " ",
                                req.body));
  };
  s.Post("/v1/services",
         [&](const httplib::Request& req, httplib::Response& res) {
           record(req);
           if (req.body.find("replicas: 5000") != std::string::npos) {
             ErrorReply(res, 400, "invalid_argument",
                        "request body:3:11: replicas: must be between 0 and "
                        "1000, got 5000");
             return;
           }
           JsonReply(res, 200, {{"name", "embed"}, {"generation", 1}});
         });
  s.Get("/v1/services",
        [&](const httplib::Request& req, httplib::Response& res) {
          record(req);
          JsonReply(res, 200, {{"services", {{{"name", "embed"}}}}});
        });
  s.Get(R"(/v1/services/([^/]+))", [&](const httplib::Request& req,
                                       httplib::Response& res) {
    record(req);
    if (req.matches[1] != "embed") {
      ErrorReply(res, 404, "not_found",
                 absl::StrCat("no service ", std::string(req.matches[1])));
      return;
    }
    JsonReply(res, 200, {{"name", "embed"}, {"desired", 2}});
  });
  s.Post(R"(/v1/services/([^/]+)/(scale|delete))",
         [&](const httplib::Request& req, httplib::Response& res) {
           record(req);
           JsonReply(res, 200, {{"name", std::string(req.matches[1])}});
         });
  s.Get("/v1/gateway/config",
        [&](const httplib::Request& req, httplib::Response& res) {
          record(req);
          JsonReply(res, 200, {{"services", nlohmann::json::array()}});
        });
  s.Post("/v1/gateway/report",
         [&](const httplib::Request& req, httplib::Response& res) {
           record(req);
           JsonReply(res, 200, {{"ok", true}});
         });
  fake.Start();
  ApiClient client({fake.url()});

  const std::string spec = "kind: service\nname: embed\ncommand: serve\n";
  absl::StatusOr<nlohmann::json> applied = client.ApplyService(spec);
  ASSERT_TRUE(applied.ok()) << applied.status();
  EXPECT_EQ((*applied)["generation"], 1);
  absl::StatusOr<nlohmann::json> bad =
      client.ApplyService("kind: service\nname: embed\nreplicas: 5000\n");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("got 5000"));
  absl::StatusOr<nlohmann::json> list = client.ListServices();
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)["services"][0]["name"], "embed");
  absl::StatusOr<nlohmann::json> one = client.GetService("embed");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ((*one)["desired"], 2);
  absl::StatusOr<nlohmann::json> none = client.GetService("no such");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(none.status().message(), "no service no such");
  ASSERT_TRUE(client.ScaleService("embed", 3).ok());
  ASSERT_TRUE(client.DeleteService("embed").ok());
  ASSERT_TRUE(client.GatewayConfig().ok());
  absl::StatusOr<nlohmann::json> reported =
      client.GatewayReport({{"services", {{"embed", {{"in_flight", 2}}}}}});
  ASSERT_TRUE(reported.ok()) << reported.status();
  fake.Stop();
  ASSERT_EQ(seen.size(), 9u);
  // The spec's text is sent as it is, as YAML.
  EXPECT_EQ(seen[0], "POST /v1/services application/yaml " + spec);
  EXPECT_EQ(seen[2], "GET /v1/services  ");
  EXPECT_EQ(seen[3], "GET /v1/services/embed  ");
  // A name is one escaped path segment.
  EXPECT_EQ(seen[4], "GET /v1/services/no%20such  ");
  EXPECT_EQ(seen[5],
            R"(POST /v1/services/embed/scale application/json {"replicas":3})");
  EXPECT_THAT(seen[6], StartsWith("POST /v1/services/embed/delete "));
  EXPECT_EQ(seen[7], "GET /v1/gateway/config  ");
  EXPECT_EQ(
      seen[8],
      R"(POST /v1/gateway/report application/json {"services":{"embed":{"in_flight":2}}})");
}

TEST(NormalizeServerUrl, AcceptsAndRejects) {
  EXPECT_EQ(*NormalizeServerUrl("127.0.0.1:7000"), "http://127.0.0.1:7000");
  EXPECT_EQ(*NormalizeServerUrl(" http://h:1/ "), "http://h:1");
  EXPECT_EQ(*NormalizeServerUrl("HTTPS://h"), "https://h");
  EXPECT_EQ(*NormalizeServerUrl("http://[::1]:7000"), "http://[::1]:7000");
  EXPECT_FALSE(NormalizeServerUrl("").ok());
  EXPECT_FALSE(NormalizeServerUrl("ftp://h:1").ok());
  EXPECT_FALSE(NormalizeServerUrl("http://h:1/api").ok());
  EXPECT_FALSE(NormalizeServerUrl("http://h:99999").ok());
  EXPECT_FALSE(NormalizeServerUrl("http://h:x").ok());
  EXPECT_THAT(std::string(NormalizeServerUrl("http://:80").status().message()),
              HasSubstr("no host"));
}

}  // namespace
}  // namespace loom
