// The gateway's loop (gateway_loop.h) against a fake control plane and a
// real HAProxy on loopback: services appear, their replicas are added,
// drained and removed without a reload, a new service reloads, and the
// reports carry what HAProxy and its access log say. Also the pure parts:
// the config's parse and the response-time window.

#include "loom/gateway/gateway_loop.h"

#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/gateway/gateway_test_util.h"
#include "loom/gateway/traffic_window.h"

namespace loom::gateway {
namespace {

using ::testing::HasSubstr;
using testutil::Eventually;
using testutil::FreePort;
using testutil::Get;
using testutil::NameServer;

TEST(GatewayTargetTest, ParsesAndNamesTheBadField) {
  absl::StatusOr<std::vector<ServiceTarget>> t =
      ParseGatewayTarget({{"services",
                           {{{"name", "embed"},
                             {"port", 30000},
                             {"servers",
                              {{{"name", "j1"},
                                {"address", "127.0.0.2:20000"},
                                {"state", "serving"}},
                               {{"name", "j2"},
                                {"address", "127.0.0.3:20001"},
                                {"state", "draining"}}}}}}}});
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 1u);
  EXPECT_EQ((*t)[0].port, 30000);
  ASSERT_EQ((*t)[0].servers.size(), 2u);
  EXPECT_TRUE((*t)[0].servers[0].serving);
  EXPECT_FALSE((*t)[0].servers[1].serving);

  const std::vector<std::pair<nlohmann::json, std::string>> bad = {
      {nlohmann::json::array(), "services: must be a list"},
      {{{"services", {{{"name", "Bad Name"}, {"port", 1}}}}},
       "services[0].name"},
      {{{"services", {{{"name", "a"}, {"port", 70000}}}}}, "services[0].port"},
      {{{"services",
         {{{"name", "a"}, {"port", 1}, {"servers", {{{"x", 1}}}}}}}},
       "services[0].servers[0]"},
  };
  for (const auto& [body, want] : bad) {
    absl::StatusOr<std::vector<ServiceTarget>> r = ParseGatewayTarget(body);
    ASSERT_FALSE(r.ok()) << body.dump();
    EXPECT_THAT(std::string(r.status().message()), HasSubstr(want));
  }
}

TEST(TrafficWindowTest, P95OverTheWindowAndACumulativeHistogram) {
  TrafficWindow w(absl::Seconds(10), 1000);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  EXPECT_FALSE(w.P95Ms("be_a", t0).has_value());
  for (int i = 1; i <= 100; ++i) {
    AccessLogEntry e;
    e.backend = "be_a";
    e.active_ms = i;  // 1..100 ms
    w.Add(e, t0);
  }
  EXPECT_EQ(w.P95Ms("be_a", t0), 95.0);
  const LatencyHistogram h = w.Histogram("be_a");
  EXPECT_EQ(h.count, 100);
  EXPECT_EQ(h.sum_ms, 5050);
  EXPECT_EQ(h.counts[0], 1);    // <= 1 ms
  EXPECT_EQ(h.counts[2], 10);   // <= 10 ms
  EXPECT_EQ(h.counts[5], 100);  // <= 100 ms
  // Ten seconds later the samples are out of the window, not the histogram.
  EXPECT_FALSE(w.P95Ms("be_a", t0 + absl::Seconds(10)).has_value());
  EXPECT_EQ(w.Histogram("be_a").count, 100);
  EXPECT_EQ(w.Histogram("be_other").count, 0);
  // The window keeps at most its bound of samples.
  TrafficWindow small(absl::Seconds(10), 10);
  for (int i = 0; i < 100; ++i) {
    AccessLogEntry e;
    e.backend = "be_a";
    e.active_ms = i < 90 ? 1000 : 1;
    small.Add(e, t0);
  }
  EXPECT_EQ(small.P95Ms("be_a", t0), 1.0);
}

class FakeControlPlane : public ControlPlane {
 public:
  absl::StatusOr<nlohmann::json> FetchConfig() override {
    if (!reachable) return absl::UnavailableError("server down");
    return config;
  }
  absl::Status SendReport(const nlohmann::json& report) override {
    reports.push_back(report);
    return absl::OkStatus();
  }
  // The last report's entry for `service` (null when none).
  nlohmann::json Last(const std::string& service) const {
    if (reports.empty()) return nullptr;
    for (const nlohmann::json& s : reports.back()["services"]) {
      if (s["name"] == service) return s;
    }
    return nullptr;
  }
  // Server name -> state in the last report of `service`.
  std::map<std::string, std::string> States(const std::string& service) {
    std::map<std::string, std::string> out;
    const nlohmann::json s = Last(service);
    if (s.is_null()) return out;
    for (const nlohmann::json& v : s["servers"]) out[v["name"]] = v["state"];
    return out;
  }

  nlohmann::json config = {{"services", nlohmann::json::array()}};
  bool reachable = true;
  std::vector<nlohmann::json> reports;
};

class GatewayLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists("/usr/sbin/haproxy")) {
      GTEST_SKIP() << "haproxy is not installed (scripts/setup.sh)";
    }
    char tmpl[] = "/tmp/loom-gwloop-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    GatewayOptions o;
    o.name = "gw-test";
    absl::StatusOr<std::shared_ptr<const RunDir>> run_dir =
        RunDir::Open(dir_, /*create=*/false);
    ASSERT_TRUE(run_dir.ok()) << run_dir.status();
    o.run_dir = *run_dir;
    o.nbthread = 1;
    o.server_options.check_interval = absl::Milliseconds(200);
    loop_ = std::make_unique<GatewayLoop>(
        o, &control_,
        [this](auto& l, auto& m) { log_.push_back(l + ": " + m); });
    ASSERT_TRUE(loop_->Start().ok());
  }
  void TearDown() override {
    if (loop_) loop_->Stop();
    loop_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }
  // Lists as vectors: a one-element braced list is not an array to every
  // compiler (nlohmann::json's initializer lists).
  static nlohmann::json Service(const std::string& name, int port,
                                const std::vector<nlohmann::json>& servers) {
    return {
        {"name", name}, {"port", port}, {"servers", nlohmann::json(servers)}};
  }
  void Set(const std::vector<nlohmann::json>& services) {
    control_.config["services"] = nlohmann::json(services);
  }
  static nlohmann::json Server(const std::string& name, const NameServer& s,
                               const std::string& state = "serving") {
    return {{"name", name}, {"address", s.address()}, {"state", state}};
  }
  // Steps until `f` holds, or 10 s.
  template <typename F>
  bool StepUntil(F f) {
    return Eventually([&] {
      (void)loop_->Step(absl::Now());
      return f();
    });
  }

  std::string dir_;
  FakeControlPlane control_;
  std::unique_ptr<GatewayLoop> loop_;
  std::vector<std::string> log_;
};

TEST_F(GatewayLoopTest, ServesAddsDrainsRemovesAndReports) {
  // No services: nothing runs.
  ASSERT_TRUE(loop_->Step(absl::Now()).ok());
  EXPECT_FALSE(loop_->haproxy().running());

  NameServer a("a"), b("b");
  const int port = FreePort();
  Set({Service("embed", port, {Server("j1", a), Server("j2", b)})});
  absl::Status first = loop_->Step(absl::Now());
  ASSERT_TRUE(first.ok()) << first;
  ASSERT_TRUE(loop_->haproxy().running());
  const int master = loop_->haproxy().master_pid();
  EXPECT_EQ(control_.States("embed"),
            (std::map<std::string, std::string>{{"j1", "serving"},
                                                {"j2", "serving"}}));
  std::set<std::string> answered;
  for (int i = 0; i < 20; ++i) {
    absl::StatusOr<testutil::HttpAnswer> r = Get(port, "/");
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 200);
    answered.insert(r->body);
  }
  EXPECT_EQ(answered, (std::set<std::string>{"a", "b"}));

  // j2 drains: no new requests to it; then gone once the server drops it.
  Set({Service("embed", port, {Server("j1", a), Server("j2", b, "draining")})});
  ASSERT_TRUE(loop_->Step(absl::Now()).ok());
  EXPECT_EQ(control_.States("embed")["j2"], "draining");
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Get(port, "/")->body, "a");
  Set({Service("embed", port, {Server("j1", a)})});
  EXPECT_TRUE(
      StepUntil([&] { return !control_.States("embed").contains("j2"); }));

  // Requests and their times are reported (the access log).
  EXPECT_TRUE(StepUntil([&] {
    const nlohmann::json s = control_.Last("embed");
    return s.contains("p95_ms") && s["latency"]["count"] >= 30 &&
           s["requests_total"] >= 30;
  })) << control_.Last("embed").dump();
  EXPECT_EQ(control_.Last("embed")["errors_total"], 0);

  // A second service: a reload; the first keeps its server through it.
  NameServer c("c");
  const int port2 = FreePort();
  Set({Service("embed", port, {Server("j1", a)}),
       Service("chat", port2, {Server("j3", c)})});
  ASSERT_TRUE(loop_->Step(absl::Now()).ok());
  EXPECT_EQ(loop_->haproxy().master_pid(), master);
  EXPECT_EQ(Get(port, "/")->body, "a");
  EXPECT_EQ(Get(port2, "/")->body, "c");
  EXPECT_EQ(control_.States("embed"),
            (std::map<std::string, std::string>{{"j1", "serving"}}));

  // The server is unreachable: HAProxy keeps serving what it has.
  control_.reachable = false;
  EXPECT_FALSE(loop_->Step(absl::Now()).ok());
  EXPECT_EQ(Get(port2, "/")->body, "c");
  bool said = false;
  for (const std::string& l : log_) said |= l.find("server down") != l.npos;
  EXPECT_TRUE(said);
}

TEST_F(GatewayLoopTest, APortTakenByAnotherProgramIsAnErrorAndOthersServe) {
  NameServer a("a"), b("b");
  const int port = FreePort();
  Set({Service("embed", port, {Server("j1", a)})});
  ASSERT_TRUE(loop_->Step(absl::Now()).ok());
  // "chat" asks for a port that a program (here, replica b) holds: the
  // reload fails, "embed" keeps serving.
  const int taken = std::stoi(b.address().substr(b.address().rfind(':') + 1));
  Set({Service("embed", port, {Server("j1", a)}),
       Service("chat", taken, {Server("j2", b)})});
  absl::Status step = loop_->Step(absl::Now());
  EXPECT_TRUE(absl::IsFailedPrecondition(step)) << step;
  EXPECT_EQ(Get(port, "/")->body, "a");
  bool said = false;
  for (const std::string& l : log_) said |= l.find("cannot reload") != l.npos;
  EXPECT_TRUE(said);
  // The server hears why "chat" is not served.
  EXPECT_THAT(control_.Last("chat").value("error", ""),
              HasSubstr("haproxy refused the configuration with it"))
      << control_.Last("chat").dump();
  EXPECT_FALSE(control_.Last("chat").contains("in_flight"));
}

}  // namespace
}  // namespace loom::gateway
