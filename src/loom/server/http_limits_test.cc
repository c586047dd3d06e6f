// What the API answers at the bounds of issue 14: per-user job cap (429),
// an idempotency key reused for another request (422), job IDs beyond
// 2^63-1 (never wrapped).

#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/http_server.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

class HttpLimitsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = testing::MakeCluster({{2, 0}}, 2, 8);
    ControllerOptions copts;
    copts.max_jobs_per_user = 2;
    auto c = Controller::Create(cluster_, &store_, copts, absl::Now());
    ASSERT_TRUE(c.ok());
    controller_ = *std::move(c);
    HttpServerOptions o;
    o.port = 0;
    server_ = std::make_unique<HttpServer>(controller_.get(), o);
    auto port = server_->Start();
    ASSERT_TRUE(port.ok()) << port.status();
    client_ = std::make_unique<httplib::Client>("127.0.0.1", *port);
  }
  void TearDown() override { server_->Stop(); }

  // The status and parsed body of a request.
  std::pair<int, nlohmann::json> Send(const std::string& method,
                                      const std::string& path,
                                      const std::string& body = "",
                                      const std::string& key = "") {
    httplib::Headers headers;
    if (!key.empty()) headers.emplace("Idempotency-Key", key);
    httplib::Result r = method == "GET" ? client_->Get(path, headers)
                                        : client_->Post(path, headers, body,
                                                        "application/json");
    EXPECT_TRUE(r) << method << " " << path;
    if (!r) return {0, {}};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> controller_;
  std::unique_ptr<HttpServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

constexpr char kSpec[] = R"({"name": "a", "command": ["true"]})";

TEST_F(HttpLimitsTest, JobsPerUserOverTheCapGet429) {
  EXPECT_EQ(Send("POST", "/v1/jobs", kSpec).first, 201);
  EXPECT_EQ(Send("POST", "/v1/jobs", kSpec).first, 201);
  auto [status, body] = Send("POST", "/v1/jobs", kSpec);
  EXPECT_EQ(status, 429);
  EXPECT_EQ(body["error"]["code"], "limit_exceeded");
  EXPECT_NE(
      body["error"]["message"].get<std::string>().find("--max-jobs-per-user"),
      std::string::npos)
      << body;
}

TEST_F(HttpLimitsTest, IdempotencyKeyWithAnotherBodyGets422) {
  auto first = Send("POST", "/v1/jobs", kSpec, "k-1");
  EXPECT_EQ(first.first, 201);
  // The same spec written differently is the same request.
  auto again = Send("POST", "/v1/jobs",
                    R"({"command": ["true"],   "name": "a"})", "k-1");
  EXPECT_EQ(again.first, 200);
  EXPECT_EQ(again.second["id"], first.second["id"]);
  // Another spec with the key is refused, not answered with the first job.
  auto other =
      Send("POST", "/v1/jobs",
           R"({"name": "b", "command": ["rm", "-rf", "/data"]})", "k-1");
  EXPECT_EQ(other.first, 422) << other.second;
  EXPECT_EQ(other.second["error"]["code"], "idempotency_key_reused");
}

// Issue 14.7: 2^64-1 was "no job -1".
TEST_F(HttpLimitsTest, JobIdsNeverWrap) {
  auto [status, body] = Send("GET", "/v1/jobs/18446744073709551615");
  // Out of range for any job: no route matches (the router takes only
  // canonical ids, issue 15.4), and the message quotes the path as sent.
  EXPECT_EQ(status, 404);
  EXPECT_EQ(body["error"]["message"],
            "no route GET /v1/jobs/18446744073709551615");
  EXPECT_EQ(Send("GET", "/v1/jobs/9223372036854775807").second["error"]
                ["message"],
            "no job 9223372036854775807");
  EXPECT_EQ(Send("GET", "/v1/jobs/007").first, 404);
  auto release =
      Send("POST", "/v1/jobs/release", R"({"ids": [18446744073709551615]})");
  EXPECT_EQ(release.first, 400);
  const std::string message = release.second["error"]["message"];
  EXPECT_NE(message.find("18446744073709551615"), std::string::npos) << message;
  EXPECT_EQ(message.find("-1"), std::string::npos) << message;
  EXPECT_EQ(Send("POST", "/v1/jobs/release", R"({"ids": [-3]})").first, 400);
}

}  // namespace
}  // namespace loom
