#include "loom/core/service_spec.h"

#include <csignal>
#include <cstdint>
#include <ostream>
#include <random>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/common/units.h"
#include "loom/core/cluster.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job.h"

namespace loom {

// Lets gtest print specs readably when a comparison fails.
void PrintTo(const ServiceSpec& spec, std::ostream* os) {
  *os << ServiceSpecToJson(spec);
}

namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::StartsWith;

// The service spec of issue 21's brief, every field given.
constexpr char kServiceExample[] = R"yaml(kind: service
name: embed
project: search
user: alice
priority: normal
preemptible: false
replicas: {min: 1, max: 8}
resources: {gpus: 1, gpu_model: h200, cpus: 4, memory: 16Gi}
command: ["python3", "serve.py"]
env: {MODEL: e5}
working_dir: /srv
port: 8080
readiness: {http: /healthz, period: 1s, timeout: 1s, failures: 3, initial_delay: 0s}
liveness:  {http: /healthz, period: 5s, timeout: 2s, failures: 3, initial_delay: 10s}
update: {max_surge: 1, max_unavailable: 0}
autoscale: {metric: in_flight, target: 4, up_delay: 30s, down_delay: 5m}
spread: node
stop: {signal: SIGTERM, grace: 30s}
restart: {backoff: 1s, max_backoff: 60s}
labels: {team: search}
node_selector: {gpu.driver: "550"}
)yaml";

ServiceSpec ServiceExample() {
  ServiceSpec spec;
  spec.name = "embed";
  spec.project = "search";
  spec.user = "alice";
  spec.replicas = {1, 8, true};
  spec.gpus = 1;
  spec.gpu_model = "h200";
  spec.cpus_milli = 4000;
  spec.memory_bytes = 16 * kGiB;
  spec.command = {"python3", "serve.py"};
  spec.env = {{"MODEL", "e5"}};
  spec.working_dir = "/srv";
  spec.port = 8080;
  spec.readiness = ProbeSpec{"/healthz", absl::Seconds(1), absl::Seconds(1), 3,
                             absl::ZeroDuration()};
  spec.liveness = ProbeSpec{"/healthz", absl::Seconds(5), absl::Seconds(2), 3,
                            absl::Seconds(10)};
  spec.autoscale = AutoscaleSpec{AutoscaleMetric::kInFlight, 4,
                                 absl::Seconds(30), absl::Minutes(5)};
  spec.labels = {{"team", "search"}};
  spec.node_selector = {{"gpu.driver", "550"}};
  return spec;
}

// A spec that sets every field to something other than its default.
ServiceSpec EveryServiceField() {
  ServiceSpec spec;
  spec.name = "rerank-2";
  spec.project = "research";
  spec.user = "bob";
  spec.priority = "high";
  spec.preemptible = true;
  spec.replicas = {2, 16, true};
  spec.gpus = 0;
  spec.gpu_model = "a100";
  spec.cpus_milli = 1500;
  spec.memory_bytes = 1536 * kMiB + 1;
  spec.command = {"/bin/sh", "-c", "exec ./serve --port \"$PORT\" 'q' ✓"};
  spec.env = {{"X", "1.50"}, {"EMPTY", ""}};
  ContainerSpec container;
  container.image = "registry.example.com:5000/team/serve:1.4";
  container.image_digest = absl::StrCat("sha256:", std::string(64, 'a'));
  container.workdir = "/app";
  container.entrypoint = std::vector<std::string>{};
  container.writable = true;
  spec.container = container;
  spec.port = 65535;
  spec.readiness = ProbeSpec{"/ready?deep=1", absl::Milliseconds(250),
                             absl::Milliseconds(100), 1, absl::Seconds(2)};
  spec.liveness = ProbeSpec{"/alive", absl::Hours(1), absl::Minutes(1), 100,
                            absl::Minutes(90) / 2};
  spec.update = {{25, true}, {10, true}};
  spec.autoscale = AutoscaleSpec{AutoscaleMetric::kP95Ms, 12.5,
                                 absl::ZeroDuration(), absl::Hours(24)};
  spec.spread = ServiceSpread::kLeaf;
  spec.stop = {SIGINT, absl::Milliseconds(1500)};
  spec.restart = {absl::Milliseconds(100), absl::Hours(2)};
  spec.labels = {{"team", "nlp"}, {"example.com/tier", ""}};
  spec.node_selector = {{"gpu.driver", "550.54.15"}, {"nvme", ""}};
  return spec;
}

// Returns "<source>:<line>:<column>: " for the first character of `needle`
// (plus `skip` characters) in `text`, 1-based, as parse errors print it.
std::string SvcAt(std::string_view text, std::string_view needle,
                  size_t skip = 0, std::string_view source = "svc.yaml") {
  const size_t pos = text.find(needle);
  EXPECT_NE(pos, std::string_view::npos) << needle;
  const size_t target = pos + skip;
  int line = 1;
  int column = 1;
  for (size_t i = 0; i < target && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::StrCat(std::string(source), ":", line, ":", column, ": ");
}

// Parses `text` expecting an InvalidArgument error and returns its message.
std::string SvcParseError(std::string_view text,
                          std::string_view source = "svc.yaml") {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(text, source);
  EXPECT_FALSE(spec.ok()) << "parsed unexpectedly:\n" << text;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
      << spec.status();
  return std::string(spec.status().message());
}

// A minimal valid service spec followed by `more`.
std::string SvcMinimal(std::string_view more = "") {
  return absl::StrCat("kind: service\nname: s\ncommand: [serve]\n",
                      std::string(more));
}

// What `SvcMinimal()` parses to.
ServiceSpec MinimalService() {
  ServiceSpec spec;
  spec.name = "s";
  spec.command = {"serve"};
  return spec;
}

Cluster SvcCluster() {
  absl::StatusOr<Cluster> cluster = ClusterPreset("small");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

TEST(ParseServiceSpec, Example) {
  absl::StatusOr<ServiceSpec> spec =
      ParseServiceSpec(kServiceExample, "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, ServiceExample());
}

TEST(ParseServiceSpec, Defaults) {
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(SvcMinimal(), "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->name, "s");
  EXPECT_EQ(spec->project, "default");
  EXPECT_EQ(spec->user, "");
  EXPECT_EQ(spec->priority, "normal");
  EXPECT_FALSE(spec->preemptible);
  EXPECT_EQ(spec->replicas, (ReplicaRange{1, 1, false}));
  EXPECT_EQ(spec->gpus, 1);
  EXPECT_EQ(spec->gpu_model, "any");
  EXPECT_EQ(spec->cpus_milli, 0);
  EXPECT_EQ(spec->memory_bytes, 0);
  EXPECT_EQ(spec->command, std::vector<std::string>{"serve"});
  EXPECT_FALSE(spec->container.has_value());
  EXPECT_FALSE(spec->port.has_value());
  EXPECT_FALSE(spec->readiness.has_value());
  EXPECT_FALSE(spec->liveness.has_value());
  EXPECT_EQ(spec->update.max_surge, (ReplicaAmount{1, false}));
  EXPECT_EQ(spec->update.max_unavailable, (ReplicaAmount{0, false}));
  EXPECT_FALSE(spec->autoscale.has_value());
  EXPECT_EQ(spec->spread, ServiceSpread::kNode);
  EXPECT_EQ(spec->stop.signal, SIGTERM);
  EXPECT_EQ(spec->stop.grace, absl::Seconds(30));
  EXPECT_EQ(spec->restart.backoff, absl::Seconds(1));
  EXPECT_EQ(spec->restart.max_backoff, absl::Seconds(60));
  EXPECT_TRUE(spec->labels.empty());
  EXPECT_TRUE(spec->node_selector.empty());
  EXPECT_EQ(*spec, MinimalService());
}

TEST(ParseServiceSpec, DependentDefaults) {
  // A probe's timeout defaults to 1s, or its period when that is shorter;
  // the period to 1s, failures to 3, no initial delay.
  absl::StatusOr<ServiceSpec> spec =
      ParseServiceSpec(SvcMinimal("readiness: {http: /r, period: 200ms}\n"
                                  "liveness: {http: /l}\n"),
                       "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->readiness,
            (ProbeSpec{"/r", absl::Milliseconds(200), absl::Milliseconds(200),
                       3, absl::ZeroDuration()}));
  EXPECT_EQ(spec->liveness, (ProbeSpec{"/l", absl::Seconds(1), absl::Seconds(1),
                                       3, absl::ZeroDuration()}));
  // The backoff cap defaults to 60s, or the backoff when that is longer.
  spec = ParseServiceSpec(SvcMinimal("restart: {backoff: 2m}\n"), "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->restart.max_backoff, absl::Minutes(2));
  // A fixed count, a percentage, zero replicas, no GPUs, a shell command.
  spec = ParseServiceSpec(
      SvcMinimal("replicas: 0\nupdate: {max_surge: 0, max_unavailable: 25%}\n"
                 "resources: {gpus: 0}\n"),
      "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->replicas, (ReplicaRange{0, 0, false}));
  EXPECT_EQ(spec->update.max_surge, (ReplicaAmount{0, false}));
  EXPECT_EQ(spec->update.max_unavailable, (ReplicaAmount{25, true}));
  EXPECT_EQ(spec->gpus, 0);
  spec = ParseServiceSpec(
      "kind: service\nname: s\ncommand: ./serve --port $PORT\n", "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->command, (std::vector<std::string>{"/bin/sh", "-c",
                                                     "./serve --port $PORT"}));
}

TEST(ParseServiceSpec, JsonBodyEqualsYaml) {
  const std::string body = R"json({
  "kind": "service", "name": "embed", "project": "search", "user": "alice",
  "replicas": {"min": 1, "max": 8},
  "resources": {"gpus": 1, "gpu_model": "h200", "cpus": 4, "memory": "16Gi"},
  "command": ["python3", "serve.py"], "env": {"MODEL": "e5"},
  "working_dir": "/srv", "port": 8080,
  "readiness": {"http": "/healthz", "period": "1s", "timeout": 1,
                "failures": 3, "initial_delay": "0s"},
  "liveness": {"http": "/healthz", "period": "5s", "timeout": "2s",
               "initial_delay": "10s"},
  "autoscale": {"target": 4},
  "labels": {"team": "search"}, "node_selector": {"gpu.driver": "550"}
})json";
  absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(body, "body");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, ServiceExample());
}

TEST(ServiceSpecToJson, RoundTrip) {
  for (const ServiceSpec& spec :
       {ServiceExample(), EveryServiceField(), MinimalService()}) {
    const std::string json = ServiceSpecToJson(spec);
    SCOPED_TRACE(json);
    absl::StatusOr<ServiceSpec> back = ParseStoredServiceSpec(json, "stored");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, spec);
    EXPECT_EQ(ServiceSpecToJson(*back), json);
  }
  // A stored record may be longer than the limit on input.
  ServiceSpec big = ServiceExample();
  // Control characters are written as 6-byte escapes.
  big.env["BIG"] = std::string(200000, '\x01');
  const std::string json = ServiceSpecToJson(big);
  EXPECT_THAT(SvcParseError(json), HasSubstr("the service spec is"));
  absl::StatusOr<ServiceSpec> back = ParseStoredServiceSpec(json, "stored");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, big);
}

TEST(ServiceSpecToJson, Format) {
  EXPECT_EQ(ServiceSpecToJson(MinimalService()),
            R"({"kind":"service","name":"s","project":"default",)"
            R"("priority":"normal","preemptible":false,"replicas":1,)"
            R"("resources":{"gpus":1,"gpu_model":"any","cpus":0,"memory":"0"},)"
            R"("command":["serve"],"env":{},)"
            R"("update":{"max_surge":1,"max_unavailable":0},"spread":"node",)"
            R"("stop":{"signal":"SIGTERM","grace":"30s"},)"
            R"("restart":{"backoff":"1s","max_backoff":"1m"},)"
            R"("labels":{},"node_selector":{}})");
  const std::string every = ServiceSpecToJson(EveryServiceField());
  EXPECT_THAT(every, HasSubstr(R"("replicas":{"min":2,"max":16})"));
  EXPECT_THAT(every, HasSubstr(R"("cpus":1.5,"memory":"1610612737")"));
  EXPECT_THAT(every, HasSubstr(R"("port":65535)"));
  EXPECT_THAT(every, HasSubstr(R"("max_surge":"25%","max_unavailable":"10%")"));
  EXPECT_THAT(every, HasSubstr(R"("autoscale":{"metric":"p95_ms",)"
                               R"("target":12.5,"up_delay":"0s",)"
                               R"("down_delay":"1d"})"));
  EXPECT_THAT(every, HasSubstr(R"("liveness":{"http":"/alive","period":"1h",)"
                               R"("timeout":"1m","failures":100,)"
                               R"("initial_delay":"45m"})"));
  EXPECT_THAT(every, HasSubstr(R"("spread":"leaf")"));
  EXPECT_THAT(every, HasSubstr(R"("image_digest":"sha256:aaaa)"));
}

// Each bad input gives an error at the right place naming the right field.
TEST(ParseServiceSpec, FieldErrors) {
  struct Case {
    std::string text;
    std::string needle;  // where the error points
    size_t skip;
    std::string expected;  // the message after "<source>:<line>:<col>: "
  };
  const std::vector<Case> cases = {
      {"name: s\ncommand: [x]\n", "name", 0,
       "kind: is required (a service spec says `kind: service`)"},
      {"kind: train\nname: s\ncommand: [x]\n", "train", 0,
       "kind: 'train' is a job kind; a service spec says `kind: service` "
       "(submit a job with `loom submit`)"},
      {"kind: servce\nname: s\ncommand: [x]\n", "servce", 0,
       "kind: must be 'service', got 'servce'"},
      {"kind: [service]\nname: s\n", "[service]", 0,
       "kind: must be a string, got a list"},
      {"kind: service\ncommand: [x]\n", "kind", 0, "name: is required"},
      {"kind: service\nname: s\n", "kind", 0, "command: is required"},
      {"kind: service\nname: Embed\ncommand: [x]\n", "Embed", 0,
       "name: 'Embed' is not a valid service name (1 to 63 lower-case "
       "letters, digits and '-', starting with a letter)"},
      {SvcMinimal("nmae: x\n"), "nmae", 0,
       "nmae: unknown field 'nmae' (did you mean 'name'?)"},
      {SvcMinimal("replica: 3\n"), "replica", 0,
       "replica: unknown field 'replica' (did you mean 'replicas'?)"},
      {SvcMinimal("gpus: 1\n"), "gpus", 0,
       "gpus: unknown field 'gpus' (it belongs under `resources`: write "
       "resources: {gpus: ...})"},
      {SvcMinimal("tasks: 2\n"), "tasks", 0,
       "tasks: unknown field 'tasks' (a service runs `replicas`, each one "
       "task)"},
      {SvcMinimal("time_limit: 1h\n"), "time_limit", 0,
       "time_limit: unknown field 'time_limit' (a service runs until it is "
       "deleted)"},
      {SvcMinimal("name: t\n"), "name: t", 0,
       "name: given twice (first on line 2)"},
      {SvcMinimal("replicas: 1001\n"), "1001", 0,
       "replicas: must be between 0 and 1000, got 1001"},
      {SvcMinimal("replicas: -1\n"), "-1", 0,
       "replicas: must be between 0 and 1000, got -1"},
      {SvcMinimal("replicas: three\n"), "three", 0,
       "replicas: must be a whole number, got 'three'"},
      {SvcMinimal("replicas: [1, 8]\n"), "[1", 0,
       "replicas: must be a whole number or a range {min, max}, got a list"},
      {SvcMinimal("replicas: {min: 1}\nautoscale: {target: 1}\n"), "{min", 0,
       "replicas.max: is required"},
      {SvcMinimal("replicas: {min: 0, max: 4}\nautoscale: {target: 1}\n"), "0,",
       0, "replicas.min: must be between 1 and 1000, got 0"},
      {SvcMinimal("replicas: {min: 1, max: 5000}\nautoscale: {target: 1}\n"),
       "5000", 0, "replicas.max: must be between 1 and 1000, got 5000"},
      {SvcMinimal("replicas: {min: 5, max: 2}\nautoscale: {target: 1}\n"), "5,",
       0, "replicas.min: must not be more than `max` (2), got 5"},
      {SvcMinimal("replicas: {min: 1, max: 4, start: 2}\n"), "start", 0,
       "replicas.start: unknown field 'start'"},
      {SvcMinimal("replicas: {min: 1, max: 4}\n"), "replicas", 0,
       "replicas: a range {min, max} needs `autoscale` (the metric and "
       "target that choose the count); write replicas: N for a fixed count"},
      {SvcMinimal("replicas: 3\nautoscale: {target: 4}\n"), "autoscale", 0,
       "autoscale: needs a range of replicas: write replicas: {min: N, max: "
       "M} (a plain `replicas: N` is a fixed count)"},
      {SvcMinimal("autoscale: {target: 4}\n"), "autoscale", 0,
       "autoscale: needs a range of replicas"},
      {SvcMinimal("replicas: {min: 1, max: 4}\nautoscale: {metric: rps}\n"),
       "{metric", 0, "autoscale.target: is required"},
      {SvcMinimal("replicas: {min: 1, max: 4}\n"
                  "autoscale: {metric: qps, target: 1}\n"),
       "qps", 0,
       "autoscale.metric: must be in_flight, rps or p95_ms, got 'qps'"},
      {SvcMinimal("replicas: {min: 1, max: 4}\nautoscale: {target: 0}\n"), "0}",
       0, "autoscale.target: must be more than 0 and at most 1000000, got 0"},
      {SvcMinimal("replicas: {min: 1, max: 4}\nautoscale: {target: lots}\n"),
       "lots", 0, "autoscale.target: must be a number, got 'lots'"},
      {SvcMinimal("replicas: {min: 1, max: 4}\n"
                  "autoscale: {target: 1, down_delay: 2d}\n"),
       "2d", 0, "autoscale.down_delay: must be at most 1d, got '2d'"},
      {SvcMinimal("replicas: {min: 1, max: 4}\n"
                  "autoscale: {target: 1, up_dealy: 1s}\n"),
       "up_dealy", 0,
       "autoscale.up_dealy: unknown field 'up_dealy' (did you mean "
       "'up_delay'?)"},
      {SvcMinimal("resources: {gpus: 17}\n"), "17", 0,
       "resources.gpus: must be between 0 and 16, got 17"},
      {SvcMinimal("resources: {gpus_per_task: 2}\n"), "gpus_per_task", 0,
       "resources.gpus_per_task: unknown field 'gpus_per_task' (a service's "
       "resources are per replica: write `gpus`)"},
      {SvcMinimal("resources: {memory_per_task: 1Gi}\n"), "memory_per_task", 0,
       "resources.memory_per_task: unknown field"},
      {SvcMinimal("resources: {gpu_model: \"h 200\"}\n"), "\"h 200", 0,
       "resources.gpu_model: 'h 200' is not a GPU model name"},
      {SvcMinimal("resources: {cpus: -1}\n"), "-1", 0,
       "resources.cpus: must not be negative, got -1"},
      {SvcMinimal("resources: {memory: 2Pi}\n"), "2Pi", 0,
       "resources.memory: must be at most 1Pi, got 2Pi"},
      {SvcMinimal("resources: {disk: 1Ti}\n"), "disk", 0,
       "resources.disk: unknown field 'disk'"},
      {SvcMinimal("port: 0\n"), "0", 0,
       "port: must be between 1 and 65535, got 0"},
      {SvcMinimal("port: 70000\n"), "70000", 0,
       "port: must be between 1 and 65535, got 70000"},
      {SvcMinimal("port: http\n"), "http", 0,
       "port: must be a whole number, got 'http'"},
      {SvcMinimal("env: {PORT: \"80\"}\n"), "PORT", 0,
       "env.PORT: is set by loom for every task and cannot be overridden"},
      {SvcMinimal("env: {LOOM_JOB_ID: \"1\"}\n"), "LOOM_JOB_ID", 0,
       "env.LOOM_JOB_ID: is set by loom"},
      {SvcMinimal("env: {1X: a}\n"), "1X", 0,
       "env.1X: '1X' is not a valid variable name"},
      {"kind: service\nname: s\ncommand: []\n", "[]", 0,
       "command: must not be empty"},
      {SvcMinimal("working_dir: srv\n"), ": srv", 2,
       "working_dir: must be an absolute path, got 'srv'"},
      {SvcMinimal("working_dir: /srv\ncontainer: {image: r.io/a/b:1}\n"),
       "working_dir", 0,
       "working_dir: does not apply to a service in an image (it is a host "
       "path); write container.workdir instead"},
      {SvcMinimal("container: {image: r.io/a/b:1, mounts: [data]}\n"), "data",
       0, "container.mounts[0]: "},
      {SvcMinimal("readiness: {period: 1s}\n"), "{period", 0,
       "readiness.http: is required"},
      {SvcMinimal("readiness: {http: healthz}\n"), "healthz", 0,
       "readiness.http: must be a path starting with '/', got 'healthz'"},
      {SvcMinimal("readiness: {http: \"/health z\"}\n"), "\"/health", 0,
       "readiness.http: must be printable ASCII without spaces"},
      {SvcMinimal("readiness: {http: /h, period: 10ms}\n"), "10ms", 0,
       "readiness.period: must be at least 100ms"},
      {SvcMinimal("liveness: {http: /h, period: 2h}\n"), "2h", 0,
       "liveness.period: must be at most 1h, got '2h'"},
      {SvcMinimal("liveness: {http: /h, period: 1s, timeout: 2s}\n"), "2s", 0,
       "liveness.timeout: must not be longer than `period` (1s), got '2s'"},
      {SvcMinimal("liveness: {http: /h, failures: 0}\n"), "0}", 0,
       "liveness.failures: must be between 1 and 100, got 0"},
      {SvcMinimal("liveness: {http: /h, initial_delay: soon}\n"), "soon", 0,
       "liveness.initial_delay: 'soon' is not a duration"},
      {SvcMinimal("liveness: {http: /h, tcp: 80}\n"), "tcp", 0,
       "liveness.tcp: unknown field 'tcp'"},
      {SvcMinimal("liveness: /h\n"), "/h", 0,
       "liveness: must be a map, got a scalar"},
      {SvcMinimal("update: {max_surge: 0, max_unavailable: 0}\n"), "{max", 0,
       "update: max_surge and max_unavailable cannot both be 0 (no replica "
       "could ever be replaced)"},
      {SvcMinimal("update: {max_surge: 0}\n"), "{max", 0,
       "update: max_surge and max_unavailable cannot both be 0"},
      {SvcMinimal("update: {max_surge: 0%, max_unavailable: 0%}\n"), "{max", 0,
       "update: max_surge and max_unavailable cannot both be 0"},
      {SvcMinimal("update: {max_surge: 150%}\n"), "150%", 0,
       "update.max_surge: must be between 0% and 100%, got 150%"},
      {SvcMinimal("update: {max_surge: x%}\n"), "x%", 0,
       "update.max_surge: must be a whole number or a percentage such as "
       "25%, got 'x%'"},
      {SvcMinimal("update: {max_unavailable: all}\n"), "all", 0,
       "update.max_unavailable: must be a whole number or a percentage such "
       "as 25%, got 'all'"},
      {SvcMinimal("update: {max_surge: 1.5}\n"), "1.5", 0,
       "update.max_surge: must be a whole number or a percentage such as "
       "25%, got '1.5'"},
      {SvcMinimal("update: {max_surge: [1]}\n"), "[1]", 0,
       "update.max_surge: must be a whole number or a percentage such as "
       "25%, got a list"},
      {SvcMinimal("update: {max_unavailable: -5%}\n"), "-5%", 0,
       "update.max_unavailable: must be between 0% and 100%, got -5%"},
      {SvcMinimal("update: {max_surge: -1}\n"), "-1", 0,
       "update.max_surge: must be between 0 and 1000, got -1"},
      {SvcMinimal("update: {surge: 1}\n"), "surge", 0,
       "update.surge: unknown field 'surge'"},
      {SvcMinimal("spread: rack\n"), "rack", 0,
       "spread: must be node or leaf, got 'rack'"},
      {SvcMinimal("stop: {signal: SIGKILL}\n"), "SIGKILL", 0,
       "stop.signal: SIGKILL cannot be caught, so the service would get no "
       "warning"},
      {SvcMinimal("stop: {signal: SIGFOO}\n"), "SIGFOO", 0,
       "stop.signal: 'SIGFOO' is not a signal"},
      {SvcMinimal("stop: {grace: 2d}\n"), "2d", 0,
       "stop.grace: must be at most 1d, got '2d'"},
      {SvcMinimal("restart: {backoff: 0s}\n"), "0s", 0,
       "restart.backoff: must be at least 100ms"},
      {SvcMinimal("restart: {backoff: 10s, max_backoff: 5s}\n"), "5s", 0,
       "restart.max_backoff: must not be shorter than `backoff` (10s), got "
       "'5s'"},
      {SvcMinimal("restart: {max: 3}\n"), "max", 0,
       "restart.max: unknown field 'max'"},
      {SvcMinimal("cancel: {grace: 1s}\n"), "cancel", 0,
       "cancel: unknown field 'cancel' (a service's replicas stop as `stop` "
       "says)"},
      {SvcMinimal("labels: {\"-x\": y}\n"), "\"-x\"", 0,
       "labels.-x: '-x' is not a valid label name"},
      {SvcMinimal("node_selector: [a]\n"), "[a]", 0,
       "node_selector: must be a map of strings, got a list"},
      {SvcMinimal("preemptible: yes\n"), "yes", 0,
       "preemptible: must be true or false, got 'yes'"},
      {SvcMinimal("project: \"my team\"\n"), "\"my team\"", 0,
       "project: 'my team' is not a valid name"},
      {SvcMinimal("user: -rf\n"), "-rf", 0,
       "user: '-rf' is not a valid user name"},
      {SvcMinimal("priority: [high]\n"), "[high]", 0,
       "priority: must be a string, got a list"},
      {SvcMinimal("readiness:\n"), "readiness", 0, "readiness: has no value"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string message = SvcParseError(c.text);
    EXPECT_THAT(message,
                StartsWith(SvcAt(c.text, c.needle, c.skip) + c.expected));
  }
}

TEST(ParseServiceSpec, DocumentErrors) {
  EXPECT_EQ(SvcParseError(""),
            "svc.yaml:1:1: the service spec is empty; it needs at least "
            "`kind: service`, `name` and `command`");
  EXPECT_EQ(SvcParseError("- kind: service\n"),
            "svc.yaml:1:1: a service spec must be a map of fields (kind, "
            "name, command, ...), got a list");
  const std::string two = SvcMinimal() + "---\n" + SvcMinimal();
  EXPECT_THAT(SvcParseError(two),
              StartsWith("svc.yaml:5:1: a second YAML document starts here"));
  const std::string tab = "kind: service\nresources:\n\tgpus: 2\n";
  EXPECT_EQ(SvcParseError(tab),
            SvcAt(tab, "\tgpus") +
                "tabs are not allowed for indentation; indent with spaces");
  EXPECT_EQ(SvcParseError("kind: service\nname: [\"\xc3\x28\"]\n"),
            "svc.yaml:2:9: the spec is not valid UTF-8 text");
  EXPECT_THAT(SvcParseError(SvcMinimal("labels: {a: \"" +
                                       std::string(2 << 20, 'x') + "\"}\n")),
              StartsWith("svc.yaml:1:1: the service spec is 2097"));
  const std::string body =
      "{\"kind\": \"service\", \"name\": \"s\",\n"
      " \"command\": [\"x\"], \"replicas\": \"3x\"}";
  EXPECT_EQ(SvcParseError(body, "PUT /v1/services/s"),
            SvcAt(body, "\"3x\"", 0, "PUT /v1/services/s") +
                "replicas: must be a whole number, got '3x'");
  EXPECT_THAT(SvcParseError("kind: service\nname: [a, b\n"),
              HasSubstr("invalid YAML"));
}

TEST(ToReplicaRequest, Converts) {
  const Cluster cluster = SvcCluster();
  absl::StatusOr<JobRequest> job =
      ToReplicaRequest(ServiceExample(), cluster, 42, absl::FromUnixSeconds(9));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, 42);
  EXPECT_EQ(job->name, "embed");
  EXPECT_EQ(job->project, "search");
  EXPECT_EQ(job->user, "alice");
  EXPECT_EQ(job->kind, JobKind::kInference);
  EXPECT_EQ(job->priority, 100);
  EXPECT_FALSE(job->preemptible);
  EXPECT_EQ(job->shape.tasks, 1);
  EXPECT_EQ(job->shape.gpus_per_task, 1);
  EXPECT_EQ(job->shape.gpu_model, cluster.FindGpuModel("h200"));
  EXPECT_EQ(job->shape.cpus_milli_per_task, 4000);
  EXPECT_EQ(job->shape.memory_bytes_per_task, 16 * kGiB);
  EXPECT_EQ(job->time_limit, absl::InfiniteDuration());
  EXPECT_EQ(job->submit_time, absl::FromUnixSeconds(9));
  EXPECT_EQ(job->node_selector, ServiceExample().node_selector);
  EXPECT_EQ(job->image, "");

  // No GPUs, any model, an image, the high class, no user.
  ServiceSpec spec = EveryServiceField();
  spec.user.clear();
  spec.gpu_model = "any";
  job = ToReplicaRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->user, "default");
  EXPECT_EQ(job->priority, 1000);
  EXPECT_TRUE(job->preemptible);
  EXPECT_EQ(job->shape.gpus_per_task, 0);
  EXPECT_EQ(job->shape.gpu_model, kAnyGpuModel);
  EXPECT_EQ(job->shape.cpus_milli_per_task, 1500);
  EXPECT_EQ(job->image, spec.container->image_digest);
}

TEST(ToReplicaRequest, Errors) {
  const Cluster cluster = SvcCluster();
  ServiceSpec spec = ServiceExample();
  spec.priority = "urgent";
  absl::StatusOr<JobRequest> job =
      ToReplicaRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "priority: the cluster has no priority class 'urgent' (it has low, "
            "normal, high)");
  spec = ServiceExample();
  spec.gpu_model = "v100";
  job = ToReplicaRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().message(),
            "resources.gpu_model: the cluster has no 'v100' GPUs (it has "
            "h200, a100)");
  spec = ServiceExample();
  spec.node_selector = {{"-bad", ""}};
  job = ToReplicaRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_FALSE(job.ok());
  EXPECT_THAT(std::string(job.status().message()),
              StartsWith("node_selector: "));
}

ContainerSpec ImageOnly(std::string image) {
  ContainerSpec container;
  container.image = std::move(image);
  return container;
}

TEST(ReplicaTemplateDigest, ChangesExactlyWithWhatAReplicaRuns) {
  const ServiceSpec base = ServiceExample();
  const std::string digest = ReplicaTemplateDigest(base);
  EXPECT_THAT(digest, MatchesRegex("[0-9a-f]{64}"));
  EXPECT_EQ(ReplicaTemplateDigest(ServiceExample()), digest);
  // The same spec parsed again, and read back from storage.
  absl::StatusOr<ServiceSpec> parsed =
      ParseStoredServiceSpec(ServiceSpecToJson(base), "stored");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(ReplicaTemplateDigest(*parsed), digest);

  struct Change {
    const char* what;
    void (*apply)(ServiceSpec*);
  };
  const Change rolling[] = {
      {"command", [](ServiceSpec* s) { s->command.push_back("--fast"); }},
      {"env", [](ServiceSpec* s) { s->env["MODEL"] = "e5-large"; }},
      {"working_dir", [](ServiceSpec* s) { s->working_dir = "/srv/v2"; }},
      {"container",
       [](ServiceSpec* s) {
         s->working_dir.clear();
         s->container = ImageOnly("r.io/team/serve:2");
       }},
      {"gpus", [](ServiceSpec* s) { s->gpus = 2; }},
      {"gpu_model", [](ServiceSpec* s) { s->gpu_model = "a100"; }},
      {"cpus", [](ServiceSpec* s) { s->cpus_milli = 8000; }},
      {"memory", [](ServiceSpec* s) { s->memory_bytes = 32 * kGiB; }},
      {"readiness path", [](ServiceSpec* s) { s->readiness->http = "/ready"; }},
      {"readiness removed", [](ServiceSpec* s) { s->readiness.reset(); }},
      {"liveness failures", [](ServiceSpec* s) { s->liveness->failures = 5; }},
      {"stop signal", [](ServiceSpec* s) { s->stop.signal = SIGINT; }},
      {"stop grace", [](ServiceSpec* s) { s->stop.grace = absl::Seconds(5); }},
      {"node_selector", [](ServiceSpec* s) { s->node_selector["nvme"] = ""; }},
      {"priority", [](ServiceSpec* s) { s->priority = "high"; }},
      {"preemptible", [](ServiceSpec* s) { s->preemptible = true; }},
  };
  for (const Change& c : rolling) {
    ServiceSpec changed = base;
    c.apply(&changed);
    EXPECT_NE(ReplicaTemplateDigest(changed), digest) << c.what;
  }
  // An image tag that now names other bits (the server pins a new digest).
  ServiceSpec imaged = base;
  imaged.working_dir.clear();
  imaged.container = ImageOnly("r.io/team/serve:2");
  ServiceSpec repinned = imaged;
  repinned.container->image_digest =
      absl::StrCat("sha256:", std::string(64, 'b'));
  EXPECT_NE(ReplicaTemplateDigest(repinned), ReplicaTemplateDigest(imaged));

  const Change in_place[] = {
      {"replicas",
       [](ServiceSpec* s) {
         s->replicas = {2, 10, true};
       }},
      {"fixed replicas",
       [](ServiceSpec* s) {
         s->replicas = {3, 3, false};
         s->autoscale.reset();
       }},
      {"autoscale", [](ServiceSpec* s) { s->autoscale->target = 8; }},
      {"update",
       [](ServiceSpec* s) {
         s->update.max_surge = {50, true};
       }},
      {"labels", [](ServiceSpec* s) { s->labels["tier"] = "gold"; }},
      {"port", [](ServiceSpec* s) { s->port = 9090; }},
      {"no port", [](ServiceSpec* s) { s->port.reset(); }},
      {"spread", [](ServiceSpec* s) { s->spread = ServiceSpread::kLeaf; }},
      {"restart",
       [](ServiceSpec* s) { s->restart.max_backoff = absl::Minutes(5); }},
      {"project", [](ServiceSpec* s) { s->project = "research"; }},
      {"user", [](ServiceSpec* s) { s->user = "bob"; }},
  };
  for (const Change& c : in_place) {
    ServiceSpec changed = base;
    c.apply(&changed);
    EXPECT_EQ(ReplicaTemplateDigest(changed), digest) << c.what;
  }
}

TEST(UpdateSpec, LimitsFor) {
  const UpdateSpec defaults;
  EXPECT_EQ(defaults.LimitsFor(3).surge, 1);
  EXPECT_EQ(defaults.LimitsFor(3).unavailable, 0);
  const UpdateSpec percent{{25, true}, {25, true}};
  // Surge rounds up, unavailable down, as Kubernetes does.
  EXPECT_EQ(percent.LimitsFor(10).surge, 3);
  EXPECT_EQ(percent.LimitsFor(10).unavailable, 2);
  EXPECT_EQ(percent.LimitsFor(1).surge, 1);
  EXPECT_EQ(percent.LimitsFor(1).unavailable, 0);
  // Both zero for this count: one replica may be down, so it can proceed.
  const UpdateSpec tiny{{0, false}, {10, true}};
  EXPECT_EQ(tiny.LimitsFor(3).surge, 0);
  EXPECT_EQ(tiny.LimitsFor(3).unavailable, 1);
  EXPECT_EQ(tiny.LimitsFor(20).unavailable, 2);
  EXPECT_EQ((ReplicaAmount{7, false}).Of(100, false), 7);
}

TEST(ReplicaRestartSpec, BackoffDoublesUpToTheCap) {
  const ReplicaRestartSpec restart;  // 1s, at most 60s
  EXPECT_EQ(restart.BackoffAfter(1), absl::Seconds(1));
  EXPECT_EQ(restart.BackoffAfter(2), absl::Seconds(2));
  EXPECT_EQ(restart.BackoffAfter(6), absl::Seconds(32));
  EXPECT_EQ(restart.BackoffAfter(7), absl::Seconds(60));
  EXPECT_EQ(restart.BackoffAfter(1000000), absl::Seconds(60));
  EXPECT_EQ(restart.BackoffAfter(0), absl::Seconds(1));
}

// Random edits of valid specs give a spec or a located error, never a
// crash, and every spec that parses survives the round trip.
TEST(ParseServiceSpec, MutatedInputNeverCrashes) {
  const Cluster cluster = SvcCluster();
  const std::vector<std::string> seeds = {
      kServiceExample, ServiceSpecToJson(EveryServiceField()),
      "kind: service\nname: s\nreplicas:\n  min: 2\n  max: 9\n"
      "resources:\n  gpus: 0\n  cpus: 2.5\n  memory: 1Gi\n"
      "command:\n  - serve\n  - --port=8\nport: 8443\nreadiness:\n"
      "  http: /r\n  period: 2s\n  failures: 2\nupdate:\n  max_surge: 10%\n"
      "  max_unavailable: 1\nautoscale:\n  metric: rps\n  target: 150\n"
      "spread: leaf\nstop:\n  signal: INT\n  grace: 5s\n"
      "restart:\n  backoff: 500ms\n"};
  const std::regex located(R"(^fuzz:\d+:\d+: )");
  std::mt19937 rng(20260121);
  constexpr char kInteresting[] = ":{}[]-,\"'\n #&*|%0123456789minax/";
  int parsed = 0;
  int failed = 0;
  for (const std::string& seed : seeds) {
    for (int i = 0; i < 700; ++i) {
      std::string text = seed;
      for (int op = 0, ops = 1 + static_cast<int>(rng() % 2); op < ops; ++op) {
        const size_t pos = rng() % text.size();
        const char c = rng() % 8 == 0
                           ? static_cast<char>(rng() % 256)
                           : kInteresting[rng() % (sizeof(kInteresting) - 1)];
        switch (rng() % 3) {
          case 0:
            text[pos] = c;
            break;
          case 1:
            text.insert(text.begin() + pos, c);
            break;
          default:
            text.erase(pos, 1 + rng() % 8);
            if (text.empty()) text = "x";
        }
      }
      absl::StatusOr<ServiceSpec> spec = ParseServiceSpec(text, "fuzz");
      if (!spec.ok()) {
        ++failed;
        EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
            << spec.status();
        EXPECT_TRUE(
            std::regex_search(std::string(spec.status().message()), located))
            << spec.status() << "\n"
            << text;
        continue;
      }
      ++parsed;
      (void)ToReplicaRequest(*spec, cluster, 1, absl::UnixEpoch());
      absl::StatusOr<ServiceSpec> again =
          ParseStoredServiceSpec(ServiceSpecToJson(*spec), "fuzz");
      ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
      EXPECT_EQ(*again, *spec) << text;
    }
  }
  EXPECT_GT(parsed, 50);
  EXPECT_GT(failed, 100);
}

}  // namespace
}  // namespace loom
