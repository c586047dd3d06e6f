// Services on the controller (controller_services.cc, docs/services.md):
// replicas as jobs with a port and probes; the gateway's view; a rolling
// update that keeps every replica serving; a broken revision that stops
// the rollout; a failed replica replaced after its backoff; deletion;
// autoscaling from the gateway's measurements; a restart of the server.

#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/service_spec.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::EmulatedNode;
using testing::MakeCluster;
using testing::T;

ServiceSpec Svc(const std::string& yaml) {
  absl::StatusOr<ServiceSpec> s = ParseServiceSpec(yaml, "svc.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  if (!s.ok()) return {};
  s->user = "alice";
  return *s;
}

// A project with `ports` beyond the cluster's range.
ProjectSpec ProjectWithPorts(std::string name,
                             std::vector<ServicePortRange> ports) {
  ProjectSpec p;
  p.name = std::move(name);
  p.service_ports = std::move(ports);
  return p;
}

constexpr char kEmbed[] =
    "kind: service\nname: embed\nreplicas: 3\nresources: {gpus: 1}\n"
    "command: [python3, serve.py]\nreadiness: {http: /healthz}\n";

// Agents and a gateway, simulated: tasks launched run (and are ready
// unless their command says "broken"); stopped ones exit; the gateway
// serves what the config says, with no session left on drained servers.
class ServicesTest : public ::testing::Test {
 protected:
  ServicesTest() : cluster_(MakeCluster({{2, 0}}, 4, 8)) { Start(T(0)); }
  void Start(absl::Time now) {
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, now);
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
    for (int n = 0; n < 2; ++n) {
      nlohmann::json tasks = nlohmann::json::array();
      for (const auto& [id, t] : tasks_) {
        if (t.node == Node(n) && !t.exited) {
          tasks.push_back({{"task_id", id}, {"state", "running"}});
        }
      }
      ASSERT_TRUE(
          c_->Register(EmulatedNode(
                           Node(n),
                           "127.0.0." + std::to_string(n + 2) + ":7100", tasks),
                       now)
              .ok());
    }
  }
  static std::string Node(int n) { return "h200-" + std::to_string(n); }

  struct Task {
    std::string node;
    bool ready = true;
    bool exited = false;
    int code = 0;
    bool reported_end = false;
    std::optional<int> port;
    nlohmann::json body;
  };

  // One round at `t`: the controller's pass, then what agents and the
  // gateway do about it.
  void Round(double t, bool gateway = true) {
    c_->Tick(T(t));
    for (AgentAction& a : c_->TakeActions()) {
      if (a.kind == AgentAction::Kind::kLaunch) {
        c_->ActionDone(a, absl::OkStatus(), T(t));
        Task task;
        task.node = a.node;
        task.body = a.body;
        task.ready = a.body["argv"].dump().find("broken") == std::string::npos;
        tasks_[a.task_id] = task;
        launches_.push_back(a.body);
      } else if (a.kind == AgentAction::Kind::kStop) {
        if (auto it = tasks_.find(a.task_id); it != tasks_.end()) {
          it->second.exited = true;
          it->second.code = 143;
          stops_.push_back(a.body);
        }
      }
    }
    for (int n = 0; n < 2; ++n) {
      nlohmann::json list = nlohmann::json::array();
      for (auto& [id, task] : tasks_) {
        if (task.node != Node(n) || task.reported_end) continue;
        nlohmann::json s = {{"task_id", id}};
        if (task.exited) {
          s["state"] = "exited";
          s["exit_code"] = task.code;
          task.reported_end = true;
        } else {
          s["state"] = "running";
          if (!task.port) task.port = 20000 + next_port_++;
          s["port"] = *task.port;
          s["ready"] = task.ready;
        }
        list.push_back(s);
      }
      EXPECT_TRUE(
          c_->Heartbeat({{"name", Node(n)}, {"tasks", list}}, T(t)).ok());
    }
    if (gateway) Report(t, in_flight_);
  }
  // The gateway reports what its config says, no sessions on any server.
  void Report(double t, double in_flight) {
    nlohmann::json services = nlohmann::json::array();
    const nlohmann::json config = c_->GatewayConfig(T(t));
    for (const nlohmann::json& s : config["services"]) {
      nlohmann::json servers = nlohmann::json::array();
      for (const nlohmann::json& v : s["servers"]) {
        servers.push_back(
            {{"name", v["name"]}, {"state", v["state"]}, {"sessions", 0}});
      }
      services.push_back({{"name", s["name"]},
                          {"in_flight", in_flight},
                          {"rps", 10},
                          {"p95_ms", 40},
                          {"requests_total", 100},
                          {"servers", servers},
                          {"latency",
                           {{"buckets_ms", {{10, 50}, {50, 90}}},
                            {"count", 100},
                            {"sum_ms", 2500}}}});
    }
    ASSERT_TRUE(
        c_->GatewayReport({{"gateway", "gw"}, {"services", services}}, T(t))
            .ok());
  }
  nlohmann::json Service(double t, const std::string& name = "embed") {
    absl::StatusOr<nlohmann::json> s = c_->GetService(name, T(t));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : nlohmann::json();
  }
  // Replicas by revision among those of `s` not draining nor stopping.
  static std::map<std::string, int> Live(const nlohmann::json& s) {
    std::map<std::string, int> out;
    for (const nlohmann::json& r : s["replicas"]) {
      if (r["phase"] == "ready" || r["phase"] == "starting" ||
          r["phase"] == "pending") {
        ++out[r["revision"].get<std::string>()];
      }
    }
    return out;
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
  std::map<std::string, Task> tasks_;
  std::vector<nlohmann::json> launches_, stops_;
  double in_flight_ = 0;
  int next_port_ = 0;
};

TEST_F(ServicesTest, ReplicasComeUpWithPortsAndProbesBehindTheGateway) {
  absl::StatusOr<nlohmann::json> s = c_->ApplyService(Svc(kEmbed), T(1));
  ASSERT_TRUE(s.ok()) << s.status();
  // The lowest port of the cluster's range (30000-32767 by default).
  EXPECT_EQ((*s)["port"], 30000);
  EXPECT_EQ((*s)["desired"], 3);
  for (double t = 1; t < 3; t += 0.5) Round(t);
  ASSERT_EQ(launches_.size(), 3u);
  for (const nlohmann::json& b : launches_) {
    EXPECT_EQ(b["port"], true);
    EXPECT_EQ(b["readiness"]["http"], "/healthz");
    EXPECT_EQ(b["gpus"].size(), 1u);
  }
  nlohmann::json svc = Service(3);
  EXPECT_EQ(svc["ready"], 3) << svc.dump(1);
  // Spread (node, the default): both nodes hold replicas.
  std::set<std::string> nodes;
  for (const nlohmann::json& r : svc["replicas"]) nodes.insert(r["node"]);
  EXPECT_EQ(nodes.size(), 2u) << svc.dump(1);
  EXPECT_EQ(svc["status"], "3 of 3 replica(s) serving");
  // The gateway serves the three, at their nodes' addresses.
  nlohmann::json cfg = c_->GatewayConfig(T(3));
  ASSERT_EQ(cfg["services"].size(), 1u);
  EXPECT_EQ(cfg["services"][0]["port"], 30000);
  ASSERT_EQ(cfg["services"][0]["servers"].size(), 3u);
  for (const nlohmann::json& v : cfg["services"][0]["servers"]) {
    EXPECT_EQ(v["state"], "serving");
    EXPECT_EQ(v["address"].get<std::string>().rfind("127.0.0.", 0), 0u);
  }
  // /metrics: replicas, and the gateway's measurements.
  std::string text;
  MetricsWriter m(&text);
  c_->WriteMetrics(m, T(3));
  EXPECT_TRUE(m.status().ok()) << m.status();
  for (const char* line :
       {"loom_service_desired_replicas{service=\"embed\"} 3",
        "loom_service_ready_replicas{service=\"embed\"} 3",
        "loom_service_requests_per_second{service=\"embed\"} 10",
        "loom_service_response_p95_seconds{service=\"embed\"} 0.04",
        "loom_service_requests_total{service=\"embed\"} 100",
        "loom_service_response_seconds_bucket{service=\"embed\",le=\"0.05\"} "
        "90",
        "loom_service_response_seconds_count{service=\"embed\"} 100"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  // Not ready any more: out of the gateway's servers.
  tasks_.begin()->second.ready = false;
  Round(3.5);
  EXPECT_EQ(c_->GatewayConfig(T(3.5))["services"][0]["servers"].size(), 2u);
  // A gateway that cannot serve it says why, in the service's status.
  ASSERT_TRUE(
      c_->GatewayReport({{"gateway", "gw"},
                         {"services",
                          {{{"name", "embed"},
                            {"error", "haproxy refused the configuration"}}}}},
                        T(3.6))
          .ok());
  c_->Tick(T(3.7));
  EXPECT_EQ(
      Service(3.7)["status"].get<std::string>().rfind(
          "not served by gateway gw: haproxy refused the configuration", 0),
      0u)
      << Service(3.7)["status"];
  // Applying the same spec again changes nothing.
  const int generation = Service(3.5)["generation"];
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(4)).ok());
  EXPECT_EQ(Service(4)["generation"], generation);
}

TEST_F(ServicesTest, ARollingUpdateKeepsThreeReplicasServing) {
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  ASSERT_EQ(Service(3)["ready"], 3);
  std::string v2 = kEmbed;
  v2.replace(v2.find("serve.py"), 8, "serve2.py");
  absl::StatusOr<nlohmann::json> s = c_->ApplyService(Svc(v2), T(3));
  ASSERT_TRUE(s.ok()) << s.status();
  const std::string rev = (*s)["revision"];
  int min_serving = 3;
  for (double t = 3; t < 20; t += 0.5) {
    Round(t);
    // Never fewer than 3 replicas in the gateway's backend as serving.
    int serving = 0;
    const nlohmann::json config = c_->GatewayConfig(T(t));
    for (const nlohmann::json& v : config["services"][0]["servers"]) {
      serving += v["state"] == "serving";
    }
    min_serving = std::min(min_serving, serving);
  }
  EXPECT_EQ(min_serving, 3);
  nlohmann::json svc = Service(20);
  EXPECT_EQ(Live(svc), (std::map<std::string, int>{{rev, 3}})) << svc.dump(1);
  EXPECT_EQ(svc["status"], "3 of 3 replica(s) serving");
  EXPECT_EQ(stops_.size(), 3u);  // the old ones, each after its drain
  for (const nlohmann::json& b : stops_) EXPECT_EQ(b["signal"], 15);
  EXPECT_EQ(launches_.size(), 6u);
}

TEST_F(ServicesTest, ABrokenRevisionStopsTheRolloutAndTheOldOnesServe) {
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  std::string broken = kEmbed;
  broken.replace(broken.find("serve.py"), 8, "broken.py");
  ASSERT_TRUE(c_->ApplyService(Svc(broken), T(3)).ok());
  for (double t = 3; t < 30; t += 0.5) Round(t);
  nlohmann::json svc = Service(30);
  // One surge replica, never ready; the three old ones all serve.
  EXPECT_EQ(c_->GatewayConfig(T(30))["services"][0]["servers"].size(), 3u);
  EXPECT_TRUE(stops_.empty());
  EXPECT_EQ(launches_.size(), 4u);
  EXPECT_NE(svc["status"].get<std::string>().find(
                "0 of 3 new replica(s) serving, 3 old still serving; waiting: "
                "replica job "),
            std::string::npos)
      << svc["status"];
  EXPECT_NE(svc["status"].get<std::string>().find("not ready for 26"),
            std::string::npos)
      << svc["status"];
}

TEST_F(ServicesTest, AFailedReplicaIsReplacedAfterItsBackoff) {
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  // One replica exits with 1 on its own.
  auto& [id, task] = *tasks_.begin();
  task.exited = true;
  task.code = 1;
  Round(3);
  Round(3.1);
  nlohmann::json svc = Service(3.1);
  EXPECT_EQ(svc["ready"], 2);
  EXPECT_NE(svc.dump().find("ended: task 0 exited with code 1"),
            std::string::npos)
      << svc.dump(1);
  EXPECT_NE(
      svc["status"].get<std::string>().find("1 replica failure(s) in a row"),
      std::string::npos)
      << svc["status"];
  EXPECT_EQ(launches_.size(), 3u);
  // After the backoff (1 s), a new one; serving, the count starts again.
  for (double t = 3.5; t < 6; t += 0.5) Round(t);
  EXPECT_EQ(launches_.size(), 4u);
  EXPECT_EQ(Service(6)["ready"], 3);
  EXPECT_EQ(Service(6)["status"], "3 of 3 replica(s) serving");
}

TEST_F(ServicesTest, ScaleDeleteAndARestartOfTheServer) {
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  ASSERT_TRUE(c_->ScaleService("embed", 1, T(3)).ok());
  for (double t = 3; t < 5; t += 0.5) Round(t);
  EXPECT_EQ(Service(5)["replicas"].size(), 1u) << Service(5).dump(1);
  EXPECT_EQ(stops_.size(), 2u);
  EXPECT_FALSE(c_->ScaleService("embed", -1, T(5)).ok());
  EXPECT_FALSE(c_->ScaleService("embed", kMaxServiceReplicas + 1, T(5)).ok());
  EXPECT_TRUE(absl::IsNotFound(c_->ScaleService("nope", 1, T(5)).status()));
  // The server restarts: the service and its replica are back.
  Start(T(6));
  Round(6);
  nlohmann::json svc = Service(6.5);
  EXPECT_EQ(svc["desired"], 1);
  EXPECT_EQ(svc["ready"], 1) << svc.dump(1);
  EXPECT_EQ(launches_.size(), 3u);  // nothing started again
  // Delete: drained, stopped, gone.
  ASSERT_TRUE(c_->DeleteService("embed", T(7)).ok());
  for (double t = 7; t < 9; t += 0.5) Round(t);
  EXPECT_TRUE(absl::IsNotFound(c_->GetService("embed", T(9)).status()));
  EXPECT_EQ(stops_.size(), 3u);
  EXPECT_TRUE(c_->GatewayConfig(T(9))["services"].empty());
}

TEST_F(ServicesTest, AutoscalesFromInFlightRequestsBetweenMinAndMax) {
  ASSERT_TRUE(c_->ApplyService(
                    Svc("kind: service\nname: chat\nreplicas: {min: 1, max: "
                        "4}\nresources: {gpus: 1}\ncommand: [x]\n"
                        "autoscale: {metric: in_flight, target: 2, up_delay: "
                        "1s, down_delay: 2s}\n"),
                    T(1))
                  .ok());
  for (double t = 1; t < 2; t += 0.5) Round(t);
  EXPECT_EQ(Service(2, "chat")["ready"], 1);
  // 10 requests in flight on one replica, target 2: to 4 (the max) once
  // that has lasted a second.
  in_flight_ = 10;
  Round(2);
  EXPECT_EQ(Service(2, "chat")["desired"], 1);
  for (double t = 2.5; t < 5; t += 0.5) Round(t);
  nlohmann::json svc = Service(5, "chat");
  EXPECT_EQ(svc["desired"], 4) << svc.dump(1);
  EXPECT_EQ(svc["ready"], 4);
  EXPECT_NE(svc.dump().find("autoscaled: in_flight 10.00 per replica over 1s "
                            "(target 2): 1 -> 4 replica(s)"),
            std::string::npos)
      << svc.dump(1);
  // The load stops: back to 1 after two seconds below.
  in_flight_ = 0;
  // (A drain ends on the first report after the gateway drained it.)
  for (double t = 5; t < 10; t += 0.5) Round(t);
  svc = Service(10, "chat");
  EXPECT_EQ(svc["desired"], 1) << svc.dump(1);
  EXPECT_EQ(svc["replicas"].size(), 1u) << svc.dump(1);
}

TEST_F(ServicesTest, AServiceLargerThanTheFreeGpusSaysWhyItWaits) {
  std::string big = kEmbed;
  big.replace(big.find("gpus: 1"), 7, "gpus: 8");
  ASSERT_TRUE(c_->ApplyService(Svc(big), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  nlohmann::json svc = Service(3);
  EXPECT_EQ(svc["ready"], 2);
  EXPECT_NE(svc["status"].get<std::string>().find("2 of 3 replica(s) serving"),
            std::string::npos)
      << svc["status"];
  EXPECT_NE(svc["status"].get<std::string>().find(" pending: "),
            std::string::npos)
      << svc["status"];
  int pending = 0;
  for (const nlohmann::json& r : svc["replicas"]) {
    if (r["phase"] == "pending") {
      ++pending;
      EXPECT_FALSE(r.value("reason", "").empty()) << r.dump();
    }
  }
  EXPECT_EQ(pending, 1);
}

// Quotas are guaranteed shares: a service larger than its project's quota
// borrows idle GPUs, and the replicas that find none wait with a reason that
// names the quota.
TEST_F(ServicesTest, AServiceLargerThanItsQuotaBorrowsAndSaysWhyTheRestWaits) {
  cluster_.projects = {ProjectSpec{"search", 8, 1.0, {}, {}}};
  Start(T(0));
  std::string big = kEmbed;
  big.replace(big.find("gpus: 1"), 7, "gpus: 8");
  big += "project: search\n";
  ASSERT_TRUE(c_->ApplyService(Svc(big), T(1)).ok());
  for (double t = 1; t < 3; t += 0.5) Round(t);
  nlohmann::json svc = Service(3);
  EXPECT_EQ(svc["ready"], 2) << svc.dump();
  int pending = 0;
  for (const nlohmann::json& r : svc["replicas"]) {
    if (r["phase"] != "pending") continue;
    ++pending;
    const std::string reason = r.value("reason", "");
    EXPECT_NE(reason.find("project search holds 16 GPUs of its quota of 8"),
              std::string::npos)
        << reason;
  }
  EXPECT_EQ(pending, 1);
}

TEST_F(ServicesTest, BadAppliesAndReportsAreRefused) {
  ServiceSpec big = Svc(kEmbed);
  big.gpus = 9;
  EXPECT_FALSE(c_->ApplyService(big, T(1)).ok());
  ServiceSpec none = Svc(kEmbed);
  none.gpus = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(c_->ApplyService(none, T(1)).status()));
  ASSERT_TRUE(c_->ApplyService(Svc(kEmbed), T(1)).ok());
  ServiceSpec clash = Svc(kEmbed);
  clash.name = "other";
  clash.port = 30000;
  EXPECT_TRUE(
      absl::IsFailedPrecondition(c_->ApplyService(clash, T(1)).status()));
  for (
      const char* body :
      {R"([])", R"({"services": 3})",
       R"({"services": [{"name": "embed", "in_flight": -1}]})",
       R"({"services": [{"name": ""}]})",
       R"({"services": [{"name": "embed", "servers": [{"name": "j1", "sessions": "x"}]}]})",
       R"({"services": [{"name": "embed", "servers": [{"name": "j1", "state": 7}]}]})",
       R"({"services": [{"name": "embed", "latency": {"count": 5, "buckets_ms": [[10, 6]]}}]})",
       R"({"services": [{"name": "embed", "latency": {"count": 5, "buckets_ms": [[10, 3], [5, 4]]}}]})",
       R"({"services": [{"name": "embed", "latency": {"count": 5, "buckets_ms": [[10, 3], [50, 2]]}}]})",
       R"({"services": [{"name": "embed", "latency": {"buckets_ms": "x"}}]})"}) {
    EXPECT_TRUE(absl::IsInvalidArgument(
        c_->GatewayReport(nlohmann::json::parse(body), T(2))))
        << body;
  }
}

TEST_F(ServicesTest, APortOutsideTheClustersServicePortsIsRefused) {
  for (int port : {22, 81, 29999, 32768}) {
    ServiceSpec s = Svc(kEmbed);
    s.port = port;
    const absl::Status st = c_->ApplyService(s, T(1)).status();
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << port << ": " << st;
    EXPECT_THAT(std::string(st.message()),
                ::testing::HasSubstr(absl::StrCat(
                    "port: ", port,
                    " is not a service port of this cluster "
                    "(services.port_range: 30000-32767; project default's "
                    "service_ports: none)")));
  }
  EXPECT_EQ(c_->ListServices(T(1))["services"].size(), 0u) << "none created";
  ServiceSpec top = Svc(kEmbed);
  top.port = 32767;
  EXPECT_TRUE(c_->ApplyService(top, T(1)).ok());
}

TEST(ServicePortsTest, APortAllowedForOneProjectIsRefusedForAnother) {
  Cluster cluster = MakeCluster({{2, 0}}, 4, 8);
  cluster.services.port_range = {40000, 40001};
  cluster.projects.push_back(
      ProjectWithPorts("search", {{80, 80}, {8000, 8099}}));
  cluster.projects.push_back(ProjectWithPorts("research", {}));
  MemoryStateStore store;
  auto c = Controller::Create(cluster, &store, ControllerOptions{}, T(0));
  ASSERT_TRUE(c.ok()) << c.status();
  auto apply = [&](const std::string& name, const std::string& project,
                   std::optional<int> port) {
    ServiceSpec s = Svc(kEmbed);
    s.name = name;
    s.project = project;
    s.port = port;
    return (*c)->ApplyService(s, T(1));
  };
  absl::StatusOr<nlohmann::json> web = apply("web", "search", 80);
  ASSERT_TRUE(web.ok()) << web.status();
  EXPECT_EQ((*web)["port"], 80);
  ASSERT_TRUE(apply("api", "search", 8050).ok());
  const absl::Status other = apply("other", "research", 8051).status();
  EXPECT_TRUE(absl::IsInvalidArgument(other)) << other;
  EXPECT_THAT(std::string(other.message()),
              ::testing::HasSubstr("port: 8051 is not a service port of this "
                                   "cluster (services.port_range: "
                                   "40000-40001; project research's "
                                   "service_ports: none)"));
  // Moving a service to another project checks its port again.
  const absl::Status moved = apply("web", "research", std::nullopt).status();
  EXPECT_TRUE(absl::IsInvalidArgument(moved)) << moved;
  // Without a port: the lowest free one of the cluster's range, then none.
  absl::StatusOr<nlohmann::json> a = apply("a", "research", std::nullopt);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)["port"], 40000);
  ASSERT_TRUE(apply("b", "research", std::nullopt).ok());
  const absl::Status full = apply("c", "research", std::nullopt).status();
  EXPECT_TRUE(absl::IsResourceExhausted(full)) << full;
  EXPECT_THAT(std::string(full.message()),
              ::testing::HasSubstr("every port of services.port_range "
                                   "(40000-40001) is taken"));
  // A service keeps its port when it is applied again unchanged.
  EXPECT_TRUE(apply("web", "search", std::nullopt).ok());
}

}  // namespace
}  // namespace loom
