#include "loom/gateway/haproxy_config.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/gateway/access_log.h"

namespace loom::gateway {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

ServiceFrontend Svc(std::string name, int port) {
  ServiceFrontend s;
  s.name = std::move(name);
  s.bind_host = "127.0.0.1";
  s.port = port;
  return s;
}

HaproxyConfig TwoServices() {
  HaproxyConfig c;
  c.stats_socket = "/run/loom-gw/admin.sock";
  c.log_socket = "/run/loom-gw/log.sock";
  c.maxconn = 5000;
  c.services = {Svc("embed", 8001), Svc("chat-v2", 8002)};
  c.services[1].balance = Balance::kRoundRobin;
  c.services[1].server_timeout = absl::Seconds(300);
  return c;
}

std::string Render(const HaproxyConfig& c) {
  absl::StatusOr<std::string> text = RenderHaproxyConfig(c);
  EXPECT_TRUE(text.ok()) << text.status();
  return text.ok() ? *text : "";
}

TEST(HaproxyConfigTest, RendersGlobalDefaultsAndOnePairPerService) {
  const std::string text = Render(TwoServices());
  EXPECT_THAT(text, HasSubstr("stats socket /run/loom-gw/admin.sock mode 600 "
                              "level admin expose-fd listeners\n"));
  EXPECT_THAT(text, HasSubstr("    maxconn 5000\n"));
  EXPECT_THAT(text, HasSubstr("    log /run/loom-gw/log.sock len 2048 format "
                              "raw local0 info\n"));
  EXPECT_THAT(text, Not(HasSubstr("daemon")));
  EXPECT_THAT(text, HasSubstr("    mode http\n"));
  EXPECT_THAT(text, HasSubstr("    option redispatch 1\n"));
  EXPECT_THAT(text, HasSubstr("    retries 3\n"));
  EXPECT_THAT(text, HasSubstr(absl::StrCat(
                        "log-format \"", std::string(kAccessLogFormat), "\"")));
  EXPECT_THAT(text, HasSubstr("frontend fe_embed\n    bind 127.0.0.1:8001\n"));
  EXPECT_THAT(text, HasSubstr("default_backend be_embed\n"));
  EXPECT_THAT(text, HasSubstr("backend be_embed\n    balance leastconn\n"));
  EXPECT_THAT(text, HasSubstr("backend be_chat-v2\n    balance roundrobin\n"));
  EXPECT_THAT(text, HasSubstr("    timeout server 300000\n"));
  // No servers of its own: they come at run time.
  EXPECT_THAT(text, Not(HasSubstr("    server ")));
}

TEST(HaproxyConfigTest, NoLogSocketOrMaxconnMeansNoSuchLines) {
  HaproxyConfig c = TwoServices();
  c.log_socket.clear();
  c.maxconn = 0;
  const std::string text = Render(c);
  EXPECT_THAT(text, Not(HasSubstr("    log ")));
  EXPECT_THAT(text, Not(HasSubstr("maxconn")));
}

TEST(HaproxyConfigTest, OrderOfServicesDoesNotChangeTheText) {
  HaproxyConfig a = TwoServices();
  HaproxyConfig b = a;
  std::swap(b.services[0], b.services[1]);
  EXPECT_EQ(Render(a), Render(b));
  // Name order: chat-v2 before embed.
  const std::string text = Render(a);
  EXPECT_LT(text.find("frontend fe_chat-v2"), text.find("frontend fe_embed"));
}

TEST(HaproxyConfigTest, IPv6BindGetsBrackets) {
  HaproxyConfig c = TwoServices();
  c.services[0].bind_host = "::1";
  EXPECT_THAT(Render(c), HasSubstr("    bind [::1]:8001\n"));
}

TEST(HaproxyConfigTest, SeedServersAreRenderedButAreNotPartOfTheShape) {
  HaproxyConfig c = TwoServices();
  const absl::StatusOr<std::string> bare = ConfigShape(c);
  ASSERT_TRUE(bare.ok()) << bare.status();
  c.services[0].seed_servers = {{"r2", "10.0.0.2:9000"},
                                {"r1", "[fd00::1]:9000"}};
  const std::string text = Render(c);
  EXPECT_THAT(text, HasSubstr("    server r1 [fd00::1]:9000 check inter 2000 "
                              "rise 2 fall 2 observe layer4 error-limit 1 "
                              "on-error mark-down\n    server r2 "));
  const absl::StatusOr<std::string> shape = ConfigShape(c);
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(*shape, *bare);
  EXPECT_THAT(*shape, Not(HasSubstr("server r1")));
}

TEST(HaproxyConfigTest, ShapeChangesWithServicesAndPorts) {
  const HaproxyConfig base = TwoServices();
  const std::string shape = *ConfigShape(base);
  HaproxyConfig moved = base;
  moved.services[0].port = 8003;
  EXPECT_NE(*ConfigShape(moved), shape);
  HaproxyConfig added = base;
  added.services.push_back(Svc("rerank", 8004));
  EXPECT_NE(*ConfigShape(added), shape);
  HaproxyConfig removed = base;
  removed.services.pop_back();
  EXPECT_NE(*ConfigShape(removed), shape);
}

TEST(HaproxyConfigTest, ServerKeywords) {
  ServerOptions o;
  EXPECT_EQ(ServerKeywords(o),
            "check inter 2000 rise 2 fall 2 observe layer4 error-limit 1 "
            "on-error mark-down");
  o.mark_down_on_connect_error = false;
  o.maxconn = 8;
  EXPECT_EQ(ServerKeywords(o), "check inter 2000 rise 2 fall 2 maxconn 8");
  o.health_check = false;
  EXPECT_EQ(ServerKeywords(o), "maxconn 8");
  o.maxconn = 0;
  EXPECT_EQ(ServerKeywords(o), "");
}

TEST(HaproxyConfigTest, ServiceNames) {
  for (const char* ok : {"a", "embed", "chat-v2", "x0-1"}) {
    EXPECT_TRUE(ValidateServiceName(ok).ok()) << ok;
  }
  const std::string max(63, 'a');
  EXPECT_TRUE(ValidateServiceName(max).ok());
  for (const std::string& bad :
       {std::string(""), std::string("Embed"), std::string("1svc"),
        std::string("-svc"), std::string("svc_1"), std::string("svc 1"),
        std::string("svc;del"), std::string("svc/x"), max + "a"}) {
    const absl::Status s = ValidateServiceName(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(std::string(s.message()), HasSubstr("'" + bad + "'"));
  }
}

TEST(HaproxyConfigTest, ServerNames) {
  EXPECT_TRUE(ValidateServerName("r-12.a_b").ok());
  EXPECT_TRUE(ValidateServerName("0abc").ok());
  for (const char* bad : {"", "-r", "r/1", "r 1", "r;x", "r#"}) {
    EXPECT_FALSE(ValidateServerName(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateServerName(std::string(65, 'r')).ok());
}

TEST(HaproxyConfigTest, ServerAddresses) {
  absl::StatusOr<ServerAddress> v4 = ParseServerAddress("127.0.0.1:8080");
  ASSERT_TRUE(v4.ok()) << v4.status();
  EXPECT_EQ(v4->host, "127.0.0.1");
  EXPECT_EQ(v4->port, 8080);
  EXPECT_FALSE(v4->ipv6);
  EXPECT_EQ(FormatServerAddress(*v4), "127.0.0.1:8080");
  absl::StatusOr<ServerAddress> v6 = ParseServerAddress("[::1]:80");
  ASSERT_TRUE(v6.ok()) << v6.status();
  EXPECT_EQ(v6->host, "::1");
  EXPECT_TRUE(v6->ipv6);
  EXPECT_EQ(FormatServerAddress(*v6), "[::1]:80");
  for (const char* bad :
       {"localhost:80", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536",
        "127.0.0.1:8x", "::1:80", "[::1]80", "[::1]:", "1.2.3:80", ":80"}) {
    EXPECT_EQ(ParseServerAddress(bad).status().code(),
              absl::StatusCode::kInvalidArgument)
        << bad;
  }
  EXPECT_THAT(std::string(ParseServerAddress("replica:80").status().message()),
              HasSubstr("does not resolve names"));
}

TEST(HaproxyConfigTest, ProxyNames) {
  EXPECT_EQ(FrontendName("embed"), "fe_embed");
  EXPECT_EQ(BackendName("embed"), "be_embed");
  EXPECT_EQ(ServiceOfBackend("be_chat-v2"), "chat-v2");
  EXPECT_EQ(ServiceOfBackend("fe_embed"), "");
  EXPECT_EQ(ServiceOfBackend("be_"), "");
  EXPECT_EQ(ServiceOfBackend("<HTTPCLIENT>"), "");
}

TEST(HaproxyConfigTest, Balance) {
  EXPECT_EQ(*ParseBalance("random"), Balance::kRandom);
  EXPECT_EQ(BalanceName(Balance::kLeastConn), "leastconn");
  // A static algorithm cannot take dynamic servers.
  EXPECT_EQ(ParseBalance("static-rr").status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Each bad config fails with InvalidArgument and names what is wrong.
TEST(HaproxyConfigTest, ValidationNamesTheProblem) {
  struct Case {
    const char* what;
    void (*mutate)(HaproxyConfig*);
  };
  const Case cases[] = {
      {"stats_socket", [](HaproxyConfig* c) { c->stats_socket = ""; }},
      {"not an absolute path",
       [](HaproxyConfig* c) { c->stats_socket = "run/admin.sock"; }},
      {"space", [](HaproxyConfig* c) { c->log_socket = "/run/a b.sock"; }},
      {"107 bytes",
       [](HaproxyConfig* c) { c->stats_socket = "/" + std::string(120, 'x'); }},
      {"listed twice",
       [](HaproxyConfig* c) { c->services.push_back(c->services[0]); }},
      {"is taken by another service",
       [](HaproxyConfig* c) { c->services[1].port = 8001; }},
      {"port 0", [](HaproxyConfig* c) { c->services[0].port = 0; }},
      {"bind_host", [](HaproxyConfig* c) { c->services[0].bind_host = "any"; }},
      {"service name", [](HaproxyConfig* c) { c->services[0].name = "A"; }},
      {"server_timeout",
       [](HaproxyConfig* c) {
         c->services[0].server_timeout = absl::ZeroDuration();
       }},
      {"maxconn", [](HaproxyConfig* c) { c->maxconn = -1; }},
      {"server 'r1' is listed twice",
       [](HaproxyConfig* c) {
         c->services[0].seed_servers = {{"r1", "10.0.0.1:1"},
                                        {"r1", "10.0.0.2:1"}};
       }},
      {"server address",
       [](HaproxyConfig* c) {
         c->services[0].seed_servers = {{"r1", "replica-1:80"}};
       }},
  };
  for (const Case& k : cases) {
    HaproxyConfig c = TwoServices();
    k.mutate(&c);
    const absl::Status s = ValidateConfig(c);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << k.what;
    EXPECT_THAT(std::string(s.message()), HasSubstr(k.what));
    EXPECT_FALSE(RenderHaproxyConfig(c).ok()) << k.what;
  }
  EXPECT_TRUE(ValidateConfig(TwoServices()).ok());
}

TEST(AccessLogTest, ParsesTheConfiguredFormat) {
  absl::StatusOr<AccessLogEntry> e = ParseAccessLogLine(
      "loom-access be=be_embed srv=r1 st=200 ta=12 tt=340 tq=0 tc=1 tr=10 "
      "ts=---- by=512\n");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->backend, "be_embed");
  EXPECT_EQ(e->server, "r1");
  EXPECT_EQ(e->status, 200);
  EXPECT_EQ(e->active_ms, 12);
  EXPECT_EQ(e->total_ms, 340);
  EXPECT_EQ(e->queue_ms, 0);
  EXPECT_EQ(e->connect_ms, 1);
  EXPECT_EQ(e->response_ms, 10);
  EXPECT_EQ(e->termination, "----");
  EXPECT_EQ(e->bytes, 512);
}

TEST(AccessLogTest, NoServerTimersAndUnknownKeys) {
  absl::StatusOr<AccessLogEntry> e = ParseAccessLogLine(
      "loom-access be=be_x srv=<NOSRV> st=503 ta=+0 tt=0 tq=-1 tc=-1 tr=-1 "
      "ts=SC-- by=217 new=thing");
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->server, "<NOSRV>");
  EXPECT_EQ(e->status, 503);
  EXPECT_EQ(e->connect_ms, -1);
  EXPECT_EQ(e->active_ms, 0);
}

TEST(AccessLogTest, RejectsOtherLines) {
  EXPECT_FALSE(ParseAccessLogLine("Proxy fe_x started.").ok());
  EXPECT_FALSE(ParseAccessLogLine("loom-access be=x st=200").ok());  // no ta
  EXPECT_FALSE(ParseAccessLogLine("loom-access be=x st=ok ta=1").ok());
  EXPECT_FALSE(ParseAccessLogLine("loom-access be=x st=200 ta=1 junk").ok());
}

}  // namespace
}  // namespace loom::gateway
