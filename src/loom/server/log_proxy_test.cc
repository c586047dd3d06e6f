#include "loom/server/log_proxy.h"

#include <atomic>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "httplib.h"

namespace loom {
namespace {

// A fake agent whose task has written `log_` so far.
class LogProxyUnitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    agent_.Get(R"(/v1/tasks/([^/]+)/logs)", [this](const httplib::Request& req,
                                                   httplib::Response& res) {
      const size_t offset = std::stoul(req.get_param_value("offset"));
      const size_t limit = std::stoul(req.get_param_value("limit"));
      std::lock_guard<std::mutex> lock(mu_);
      res.set_content(log_.substr(std::min(offset, log_.size()), limit),
                      "text/plain");
    });
    port_ = agent_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { agent_.listen_after_bind(); });
    request_.address = "127.0.0.1:" + std::to_string(port_);
    request_.node = "h200-0";
    request_.task_id = "1.0.0";
    request_.follow = true;
  }
  void TearDown() override {
    agent_.stop();
    thread_.join();
  }
  void Write(const std::string& s) {
    std::lock_guard<std::mutex> lock(mu_);
    log_ += s;
  }

  httplib::Server agent_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::string log_ = "first\n";
  TaskLogRequest request_;
};

TEST_F(LogProxyUnitTest, AFollowEndsWhenTheCallersTokenIsRevoked) {
  std::atomic<bool> allowed{true};
  http::HttpResponse res;
  ServeTaskLogs(
      request_, [] { return true; }, [&] { return allowed.load(); },
      LogProxyOptions(), res);
  ASSERT_EQ(res.status, 200);
  ASSERT_TRUE(res.stream);
  http::StreamChunk c = res.stream();
  EXPECT_EQ(c.data, "first\n");
  EXPECT_FALSE(c.done);
  Write("second\n");
  c = res.stream();
  EXPECT_EQ(c.data, "second\n");
  EXPECT_FALSE(c.done);
  // Revoked: the next poll ends the stream, and sends nothing more.
  allowed = false;
  Write("third\n");
  c = res.stream();
  EXPECT_TRUE(c.done);
  EXPECT_EQ(c.data, "");
}

TEST_F(LogProxyUnitTest, LongLogsComeInBoundedPieces) {
  request_.follow = false;
  LogProxyOptions o;
  o.chunk = 4;
  http::HttpResponse res;
  ServeTaskLogs(
      request_, [] { return false; }, [] { return true; }, o, res);
  ASSERT_TRUE(res.stream);  // over one piece: streamed
  std::string got;
  for (int i = 0; i < 10; ++i) {
    http::StreamChunk c = res.stream();
    EXPECT_LE(c.data.size(), 4u);
    got += c.data;
    if (c.done) break;
  }
  EXPECT_EQ(got, "first\n");
}

}  // namespace
}  // namespace loom
