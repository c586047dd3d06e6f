#include "loom/core/job_spec.h"

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
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
void PrintTo(const JobSpec& spec, std::ostream* os) {
  *os << JobSpecToJson(spec);
}

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr int64_t kTiB = 1024 * kGiB;

// The job spec of DESIGN.md section 2, verbatim.
constexpr char kDesignExample[] = R"yaml(# job.yaml -- loom submit -f job.yaml
name: retriever-ft
project: search            # quota and fair share are per project
kind: finetune             # train | finetune | inference | batch
priority: normal           # a priority class the cluster defines
preemptible: false         # true: runs on idle capacity, may be preempted
tasks: 4                   # gang size: all start together or none does
resources:
  gpus_per_task: 8
  gpu_model: h200          # h200 | a100 | any
  cpus_per_task: 96
  memory_per_task: 1Ti
command: ["python", "train.py", "--config", "ft.yaml"]
env: {HF_HOME: /data/hf}
time_limit: 12h            # lets backfill plan around the job
checkpoint: {dir: /ckpt/retriever-ft, signal: SIGUSR1, grace: 120s}
restart: {max: 3, backoff: 10s}
)yaml";

// The same job as a REST API body.
constexpr char kDesignExampleJson[] = R"json({
  "name": "retriever-ft",
  "project": "search",
  "kind": "finetune",
  "priority": "normal",
  "preemptible": false,
  "tasks": 4,
  "resources": {
    "gpus_per_task": 8,
    "gpu_model": "h200",
    "cpus_per_task": 96,
    "memory_per_task": "1Ti"
  },
  "command": ["python", "train.py", "--config", "ft.yaml"],
  "env": {"HF_HOME": "/data/hf"},
  "time_limit": "12h",
  "checkpoint": {"dir": "/ckpt/retriever-ft", "signal": "SIGUSR1", "grace": "120s"},
  "restart": {"max": 3, "backoff": "10s"}
})json";

JobSpec DesignExampleSpec() {
  JobSpec spec;
  spec.name = "retriever-ft";
  spec.project = "search";
  spec.kind = JobKind::kFinetune;
  spec.priority = "normal";
  spec.preemptible = false;
  spec.tasks = 4;
  spec.gpus_per_task = 8;
  spec.gpu_model = "h200";
  spec.cpus_milli_per_task = 96000;
  spec.memory_bytes_per_task = kTiB;
  spec.command = {"python", "train.py", "--config", "ft.yaml"};
  spec.env = {{"HF_HOME", "/data/hf"}};
  spec.time_limit = absl::Hours(12);
  spec.checkpoint.dir = "/ckpt/retriever-ft";
  spec.checkpoint.signal = SIGUSR1;
  spec.checkpoint.grace = absl::Seconds(120);
  spec.restart.max = 3;
  spec.restart.backoff = absl::Seconds(10);
  return spec;
}

// A spec that sets every field to something other than its default.
JobSpec EverythingSpec() {
  JobSpec spec;
  spec.name = "all-the-things-2";
  spec.project = "research";
  spec.user = "alice";
  spec.kind = JobKind::kTrain;
  spec.priority = "high";
  spec.preemptible = true;
  spec.gpus = 12;
  spec.nodes = 3;
  spec.gpu_model = "a100";
  spec.cpus_milli_per_task = 31500;
  spec.memory_bytes_per_task = 1536 * kMiB + 1;
  spec.processes_per_task = 4;
  spec.command = {"bash", "-c", "echo \"$X\" 'q' \\ \n done", "",
                  "ünïcode ✓ 😀"};
  spec.env = {{"X", "1.50"}, {"EMPTY", ""}, {"_Y2", "a=b c"}};
  spec.working_dir = "/home/alice/work dir";
  spec.time_limit = absl::Hours(1) + absl::Minutes(30) + absl::Milliseconds(7);
  spec.checkpoint = {"/ckpt/x", SIGHUP, absl::Milliseconds(1500)};
  spec.restart = {7, absl::ZeroDuration()};
  spec.cancel_signal = SIGINT;
  spec.cancel_grace = absl::Hours(24);
  spec.hold = true;
  spec.labels = {{"team", "nlp"}, {"example.com/tier", ""}};
  spec.node_selector = {{"gpu.driver", "550.54.15"}, {"nvme", ""}};
  return spec;
}

// Returns "<source>:<line>:<column>: " for the first character of `needle`
// (plus `skip` characters) in `text`, 1-based, as parse errors print it.
std::string At(std::string_view text, std::string_view needle, size_t skip = 0,
               std::string_view source = "spec.yaml") {
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
std::string ParseError(std::string_view text,
                       std::string_view source = "spec.yaml") {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(text, source);
  EXPECT_FALSE(spec.ok()) << "parsed unexpectedly:\n" << text;
  if (spec.ok()) return "";
  EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
      << spec.status();
  return std::string(spec.status().message());
}

// A minimal valid spec followed by `more`.
std::string Minimal(std::string_view more = "") {
  return absl::StrCat("name: j\ncommand: [\"true\"]\n", std::string(more));
}

std::string ReadExample(std::string_view file) {
  const std::filesystem::path relative =
      std::filesystem::path("examples/jobs") / std::string(file);
  std::filesystem::path path = relative;
  if (!std::filesystem::exists(path)) {
    path =
        std::filesystem::path(__FILE__).parent_path() / "../../.." / relative;
  }
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

Cluster Small() {
  absl::StatusOr<Cluster> cluster = ClusterPreset("small");
  EXPECT_TRUE(cluster.ok()) << cluster.status();
  return *cluster;
}

TEST(ParseJobSpec, DesignExample) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(kDesignExample, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(*spec, DesignExampleSpec());
  // Defaults of the fields the example leaves out.
  EXPECT_EQ(spec->user, "");
  EXPECT_EQ(spec->gpus, 0);
  EXPECT_EQ(spec->nodes, 0);
  EXPECT_EQ(spec->working_dir, "");
  EXPECT_EQ(spec->cancel_signal, SIGTERM);
  EXPECT_EQ(spec->cancel_grace, absl::Seconds(30));
  EXPECT_FALSE(spec->hold);
  EXPECT_TRUE(spec->labels.empty());
}

TEST(ParseJobSpec, JsonBodyEqualsYaml) {
  absl::StatusOr<JobSpec> json = ParseJobSpec(kDesignExampleJson, "body");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, DesignExampleSpec());
  // Compact JSON, as clients send it.
  absl::StatusOr<JobSpec> compact = ParseJobSpec(
      R"({"name":"retriever-ft","project":"search","kind":"finetune",)"
      R"("tasks":4,"resources":{"gpus_per_task":8,"gpu_model":"h200",)"
      R"("cpus_per_task":96,"memory_per_task":"1Ti"},)"
      R"("command":["python","train.py","--config","ft.yaml"],)"
      R"("env":{"HF_HOME":"/data/hf"},"time_limit":"12h",)"
      R"("checkpoint":{"dir":"/ckpt/retriever-ft","signal":"SIGUSR1",)"
      R"("grace":"120s"},"restart":{"max":3,"backoff":"10s"}})",
      "body");
  ASSERT_TRUE(compact.ok()) << compact.status();
  EXPECT_EQ(*compact, DesignExampleSpec());
}

TEST(ParseJobSpec, JsonEscapes) {
  // JSON escapes, including a character outside the BMP written as a UTF-16
  // surrogate pair (as Python's json.dumps does).
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      R"({"name": "esc", "command": ["echo", "a\"b\\c\/d\te\u00e9\ud83d\ude00\\ud83d"]})",
      "body");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(
      spec->command,
      ElementsAre("echo", "a\"b\\c/d\te\xc3\xa9\xf0\x9f\x98\x80\\ud83d"));
  // A lone surrogate is an error with a position.
  EXPECT_THAT(ParseError(R"({"name": "esc", "command": ["\ud83d"]})", "body"),
              StartsWith("body:1:"));
}

TEST(ParseJobSpec, YamlEscapesGiveUtf8) {
  // yaml-cpp decodes "\_" and "\N" to the single bytes 0xA0 and 0x85; the
  // spec holds U+00A0 and U+0085, and survives its JSON round trip.
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: j\ncommand: [\"a\\_b\\Nc\\L\"]\nlabels: {team: \"x\\_y\"}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command, ElementsAre("a\xC2\xA0"
                                         "b\xC2\x85"
                                         "c\xE2\x80\xA8"));
  EXPECT_EQ(spec->labels.at("team"), "x\xC2\xA0y");
  absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToJson(*spec), "json");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *spec);
  // Errors that quote such a scalar are UTF-8 too.
  EXPECT_EQ(ParseError("name: j\ncommand: [x]\ntasks: \"\\_\"\n"),
            "spec.yaml:3:8: tasks: must be a whole number, got '\xC2\xA0'");
  // An unknown escape is named by its whole character, at its backslash.
  const std::string bad = "name: j\ncommand: [\"a\\\xC3\xA9\"]\n";
  EXPECT_EQ(ParseError(bad),
            At(bad, "\\\xC3") +
                "invalid YAML: unknown escape '\\' followed by '\xC3\xA9' in a "
                "double-quoted string (write '\\\\' for a backslash, or use "
                "single quotes)");
}

TEST(ParseJobSpec, StringCommandRunsThroughShell) {
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("name: j\ncommand: echo hi && sleep 1\n", "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command,
              ElementsAre("/bin/sh", "-c", "echo hi && sleep 1"));
}

TEST(ParseJobSpec, ScalarsAreConvertedToText) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: j\ncommand: [sleep, 10]\n"
      "env: {A: 1, B: 1.50, C: true, D: \"\", E: '007'}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_THAT(spec->command, ElementsAre("sleep", "10"));
  EXPECT_EQ(spec->env.at("A"), "1");
  EXPECT_EQ(spec->env.at("B"), "1.50");
  EXPECT_EQ(spec->env.at("C"), "true");
  EXPECT_EQ(spec->env.at("D"), "");
  EXPECT_EQ(spec->env.at("E"), "007");
}

TEST(ParseJobSpec, QuantitiesAndUnits) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      Minimal("resources: {cpus_per_task: 0.5, memory_per_task: 1.5Gi, "
              "gpu_model: H200}\ntime_limit: 1h30m\n"
              "cancel: {signal: 2, grace: 0}\ncheckpoint: {signal: usr2}\n"),
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->cpus_milli_per_task, 500);
  EXPECT_EQ(spec->memory_bytes_per_task, 3 * kGiB / 2);
  EXPECT_EQ(spec->gpu_model, "h200");
  EXPECT_EQ(spec->time_limit, absl::Minutes(90));
  EXPECT_EQ(spec->cancel_signal, SIGINT);
  EXPECT_EQ(spec->cancel_grace, absl::ZeroDuration());
  EXPECT_EQ(spec->checkpoint.signal, SIGUSR2);
  EXPECT_EQ(spec->processes_per_task, 1);
  spec = ParseJobSpec(Minimal("resources: {processes_per_task: 4}\n"), "p");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->processes_per_task, 4);
  // The one LOOM_ name a job may set: for agents that run fake tasks.
  spec = ParseJobSpec(Minimal("env: {LOOM_FAKE_SECONDS: 2}\n"), "p");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->env.at("LOOM_FAKE_SECONDS"), "2");
}

TEST(ParseJobSpec, ExampleFilesParseAndConvert) {
  const Cluster cluster = Small();
  const GpuModelId h200 = cluster.FindGpuModel("h200");
  const GpuModelId a100 = cluster.FindGpuModel("a100");
  struct Case {
    std::string file;
    JobKind kind;
    int tasks;
    int gpus_per_task;
    GpuModelId model;
  };
  const Case cases[] = {
      {"train.yaml", JobKind::kTrain, 4, 8, h200},
      {"finetune.yaml", JobKind::kFinetune, 4, 8, h200},
      {"inference.yaml", JobKind::kInference, 1, 1, a100},
      {"batch.yaml", JobKind::kBatch, 1, 2, kAnyGpuModel},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string text = ReadExample(c.file);
    absl::StatusOr<JobSpec> spec = ParseJobSpec(text, c.file);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(spec->kind, c.kind);
    absl::StatusOr<JobRequest> job =
        ToJobRequest(*spec, cluster, 42, absl::FromUnixSeconds(1000));
    ASSERT_TRUE(job.ok()) << job.status();
    EXPECT_EQ(job->id, 42);
    EXPECT_EQ(job->name, spec->name);
    EXPECT_EQ(job->kind, c.kind);
    EXPECT_EQ(job->shape.tasks, c.tasks);
    EXPECT_EQ(job->shape.gpus_per_task, c.gpus_per_task);
    EXPECT_EQ(job->shape.gpu_model, c.model);
    EXPECT_EQ(job->submit_time, absl::FromUnixSeconds(1000));
    // Examples survive the storage round trip too.
    absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToJson(*spec), "json");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(*again, *spec);
  }

  absl::StatusOr<JobSpec> train = ParseJobSpec(ReadExample("train.yaml"), "t");
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->checkpoint.dir, "/ckpt/llm-pretrain-7b");
  EXPECT_EQ(train->checkpoint.grace, absl::Minutes(5));
  EXPECT_EQ(train->restart.max, 5);
  EXPECT_EQ(train->env.at("OMP_NUM_THREADS"), "8");

  absl::StatusOr<JobSpec> inference =
      ParseJobSpec(ReadExample("inference.yaml"), "i");
  ASSERT_TRUE(inference.ok()) << inference.status();
  EXPECT_FALSE(inference->preemptible);
  EXPECT_EQ(inference->gpus_per_task, 1);
  EXPECT_EQ(inference->cancel_signal, SIGINT);

  absl::StatusOr<JobSpec> batch = ParseJobSpec(ReadExample("batch.yaml"), "b");
  ASSERT_TRUE(batch.ok()) << batch.status();
  EXPECT_EQ(batch->gpus, 2);
  ASSERT_EQ(batch->command.size(), 3u);
  EXPECT_EQ(batch->command[0], "/bin/sh");
  EXPECT_EQ(batch->command[1], "-c");
  EXPECT_THAT(batch->command[2], StartsWith("set -e\nfor ckpt in"));
  EXPECT_TRUE(batch->hold);
  EXPECT_TRUE(batch->preemptible);
  EXPECT_EQ(batch->requeue.max, 20);
  EXPECT_EQ(batch->requeue.backoff, absl::Seconds(30));
  EXPECT_EQ(train->requeue.max, -1);  // the default: no limit

  absl::StatusOr<JobSpec> unlimited =
      ParseJobSpec("name: x\ncommand: [a]\nrequeue: {max: unlimited}\n", "u");
  ASSERT_TRUE(unlimited.ok()) << unlimited.status();
  EXPECT_EQ(unlimited->requeue.max, -1);
}

TEST(JobSpecToJson, RoundTrip) {
  for (const JobSpec& spec :
       {JobSpec{}, DesignExampleSpec(), EverythingSpec()}) {
    const std::string json = JobSpecToJson(spec);
    SCOPED_TRACE(json);
    JobSpec expected = spec;
    if (expected.name.empty()) {
      // A default spec lacks the required fields; fill them in.
      expected.name = "x";
      expected.command = {"true"};
    }
    const std::string text = JobSpecToJson(expected);
    absl::StatusOr<JobSpec> parsed = ParseJobSpec(text, "stored");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, expected);
    // Canonical: writing the parsed spec gives the same text.
    EXPECT_EQ(JobSpecToJson(*parsed), text);
  }
}

TEST(JobSpecToJson, Format) {
  const std::string json = JobSpecToJson(DesignExampleSpec());
  EXPECT_EQ(json,
            R"({"name":"retriever-ft","project":"search","kind":"finetune",)"
            R"("priority":"normal","preemptible":false,"tasks":4,)"
            R"("resources":{"gpus_per_task":8,"gpu_model":"h200",)"
            R"("cpus_per_task":96,"memory_per_task":"1Ti",)"
            R"("processes_per_task":1},)"
            R"("command":["python","train.py","--config","ft.yaml"],)"
            R"("env":{"HF_HOME":"/data/hf"},"time_limit":"12h",)"
            R"("checkpoint":{"dir":"/ckpt/retriever-ft","signal":"SIGUSR1",)"
            R"("grace":"2m"},"restart":{"max":3,"backoff":"10s"},)"
            R"("requeue":{"max":"unlimited","backoff":"0s"},)"
            R"("cancel":{"signal":"SIGTERM","grace":"30s"},"hold":false,)"
            R"("labels":{}})");
  const std::string everything = JobSpecToJson(EverythingSpec());
  EXPECT_THAT(everything, HasSubstr(R"("gpus":12,"nodes":3)"));
  EXPECT_THAT(everything, HasSubstr(R"("cpus_per_task":31.5)"));
  EXPECT_THAT(everything, HasSubstr(R"("time_limit":"5400007ms")"));
  EXPECT_THAT(everything, Not(HasSubstr("\"tasks\"")));
  // Invalid UTF-8 never makes it throw.
  JobSpec bad = DesignExampleSpec();
  bad.env["X"] = "\xff\xfe";
  EXPECT_THAT(JobSpecToJson(bad), HasSubstr("\"X\""));
}

TEST(ParseSignal, NamesAndNumbers) {
  for (const char* text : {"SIGTERM", "TERM", "sigterm", "Term", "15"}) {
    absl::StatusOr<int> s = ParseSignal(text);
    ASSERT_TRUE(s.ok()) << text << ": " << s.status();
    EXPECT_EQ(*s, SIGTERM) << text;
  }
  EXPECT_EQ(*ParseSignal("SIGUSR1"), SIGUSR1);
  EXPECT_EQ(*ParseSignal("USR2"), SIGUSR2);
  EXPECT_EQ(*ParseSignal("SIGKILL"), SIGKILL);
  EXPECT_EQ(*ParseSignal("40"), 40);
  for (const char* text :
       {"", "SIG", "SIGFOO", "0", "-1", "65", "15x", "1.5"}) {
    EXPECT_FALSE(ParseSignal(text).ok()) << text;
  }
  EXPECT_EQ(SignalName(SIGUSR1), "SIGUSR1");
  EXPECT_EQ(SignalName(SIGTERM), "SIGTERM");
  EXPECT_EQ(SignalName(40), "40");
  for (int s = 1; s <= 64; ++s) {
    absl::StatusOr<int> back = ParseSignal(SignalName(s));
    ASSERT_TRUE(back.ok()) << s;
    EXPECT_EQ(*back, s);
  }
}

// Each bad input gives an error at the right place naming the right field.
TEST(ParseJobSpec, FieldErrors) {
  struct Case {
    std::string text;
    std::string needle;  // where the error points
    size_t skip;
    std::string expected;  // the message after "<source>:<line>:<col>: "
  };
  const std::vector<Case> cases = {
      // Issue 14.7: these were 1 byte and 2 h.
      {Minimal("resources: {memory_per_task: \"0.5\"}\n"), "\"0.5\"", 0,
       "resources.memory_per_task: '0.5' is not a whole number of bytes"},
      {Minimal("time_limit: 1h1h\n"), "1h1h", 0,
       "time_limit: '1h1h' gives the unit 'h' twice"},
      {Minimal("checkpoint: {grace: 30m1h}\n"), "30m1h", 0,
       "checkpoint.grace: '30m1h' has its units out of order"},
      {Minimal("nmae: x\n"), "nmae", 0,
       "nmae: unknown field 'nmae' (did you mean 'name'?)"},
      {Minimal("resources: {gpus_per_task: 8, gpu_modle: h200}\n"), "gpu_modle",
       0,
       "resources.gpu_modle: unknown field 'gpu_modle' (did you mean "
       "'gpu_model'?)"},
      {Minimal("gpus: 2\n"), "gpus", 0,
       "gpus: unknown field 'gpus' (it belongs under `resources`"},
      {"command: [x]\n", "command", 0, "name: is required"},
      {"# my job\n\nname: j\n", "name", 0, "command: is required"},
      {"name: Retriever_FT\ncommand: [x]\n", "Retriever", 0,
       "name: 'Retriever_FT' is not a valid job name"},
      {"name: 9lives\ncommand: [x]\n", "9lives", 0,
       "name: '9lives' is not a valid job name"},
      {absl::StrCat("name: a", std::string(63, 'b'), "\ncommand: [x]\n"),
       "abbb", 0, "name: 'abbb"},
      {"name: [a]\ncommand: [x]\n", "[a]", 0,
       "name: must be a string, got a list"},
      {"name: j\ncommand: []\n", "[]", 0, "command: must not be empty"},
      {"name: j\ncommand: {a: b}\n", "{a", 0,
       "command: must be a list of strings or one string"},
      {"name: j\ncommand:\n", "command", 0, "command: has no value"},
      {"name: j\ncommand:\nenv: {}\n", "command", 0, "command: has no value"},
      {"name: j\ncommand: [x, ~]\n", "~", 0, "command[1]: has no value"},
      {Minimal("resources:\n  gpus:\n"), "gpus", 0,
       "resources.gpus: has no value"},
      {"name: j\ncommand: [\"\", x]\n", "\"\"", 0,
       "command[0]: must not be empty"},
      {"name: j\ncommand: [x, [y]]\n", "[y]", 0,
       "command[1]: must be a string, got a list"},
      {"name: j\ncommand: \"  \"\n", "\"  \"", 0, "command: must not be blank"},
      {Minimal("tasks: 2\nresources: {gpus: 16}\n"), "gpus", 0,
       "resources.gpus: cannot be combined with `tasks` (line 3)"},
      {Minimal("resources:\n  gpus_per_task: 2\n  gpus: 16\n"), "gpus:", 0,
       "resources.gpus: cannot be combined with `resources.gpus_per_task` "
       "(line 4)"},
      {Minimal("resources: {nodes: 2}\n"), "nodes", 0,
       "resources.nodes: only applies with `resources.gpus`"},
      {Minimal("resources: {gpus: 12, nodes: 5}\n"), "5}", 0,
       "resources.nodes: 12 GPUs cannot be spread evenly over 5 nodes"},
      {Minimal("tasks: 0\n"), "0", 0,
       "tasks: must be between 1 and 10000, got 0"},
      {Minimal("tasks: -3\n"), "-3", 0,
       "tasks: must be between 1 and 10000, got -3"},
      {Minimal("tasks: 10001\n"), "10001", 0,
       "tasks: must be between 1 and 10000, got 10001"},
      {Minimal("tasks: four\n"), "four", 0,
       "tasks: must be a whole number, got 'four'"},
      {Minimal("tasks: 2.5\n"), "2.5", 0,
       "tasks: must be a whole number, got '2.5'"},
      {Minimal("resources: {gpus: 100001}\n"), "100001", 0,
       "resources.gpus: must be between 1 and 100000, got 100001"},
      {Minimal("resources: {gpus_per_task: 17}\n"), "17", 0,
       "resources.gpus_per_task: must be between 1 and 16, got 17"},
      {Minimal("resources: {gpus_per_task: 0}\n"), "0}", 0,
       "resources.gpus_per_task: must be between 1 and 16, got 0"},
      {Minimal("resources: {processes_per_task: 0}\n"), "0}", 0,
       "resources.processes_per_task: must be between 1 and 256, got 0"},

      {Minimal("resources: {cpus_per_task: -1}\n"), "-1", 0,
       "resources.cpus_per_task: must not be negative, got -1"},
      {Minimal("resources: {cpus_per_task: 1e9}\n"), "1e9", 0,
       "resources.cpus_per_task: must be at most 100000 cores"},
      {Minimal("resources: {cpus_per_task: 0.0001}\n"), "0.0001", 0,
       "resources.cpus_per_task: must be 0 or at least 0.001 cores"},
      {Minimal("resources: {cpus_per_task: lots}\n"), "lots", 0,
       "resources.cpus_per_task: must be a number, got 'lots'"},
      {Minimal("resources: {memory_per_task: -1Gi}\n"), "-1Gi", 0,
       "resources.memory_per_task: '-1Gi' is not a byte quantity"},
      {Minimal("resources: {memory_per_task: 2Pi}\n"), "2Pi", 0,
       "resources.memory_per_task: must be at most 1Pi, got 2Pi"},
      {Minimal("resources: {memory_per_task: 1Tb}\n"), "1Tb", 0,
       "resources.memory_per_task: '1Tb' has an unknown unit 'Tb'"},
      {Minimal("resources: {gpu_model: \"h 200\"}\n"), "\"h 200", 0,
       "resources.gpu_model: 'h 200' is not a GPU model name"},
      {Minimal("resources: 8\n"), "8", 0,
       "resources: must be a map, got a scalar"},
      {Minimal("env: {1BAD: x}\n"), "1BAD", 0,
       "env.1BAD: '1BAD' is not a valid variable name"},
      {Minimal("env:\n  OK: 1\n  MY-VAR: x\n"), "MY-VAR", 0,
       "env.MY-VAR: 'MY-VAR' is not a valid variable name"},
      {Minimal("env: {CUDA_VISIBLE_DEVICES: \"0\"}\n"), "CUDA", 0,
       "env.CUDA_VISIBLE_DEVICES: is set by loom for every task"},
      {Minimal("env: {LOOM_JOB_ID: \"7\"}\n"), "LOOM_JOB_ID", 0,
       "env.LOOM_JOB_ID: is set by loom for every task"},
      {Minimal("env: {A: [1, 2]}\n"), "[1, 2]", 0,
       "env.A: must be a string, got a list"},
      {Minimal("env:\n  A: ~\n"), "~", 0, "env.A: has no value"},
      {Minimal("env:\n  A: x\n  A: y\n"), "A: y", 0,
       "env.A: given twice (first on line 4)"},
      {Minimal("env: [A=1]\n"), "[A=1]", 0,
       "env: must be a map of NAME: value, got a list"},
      {Minimal("labels: {\"-x\": y}\n"), "\"-x\"", 0,
       "labels.-x: '-x' is not a valid label name"},
      {Minimal("labels: {x: {y: z}}\n"), "{y", 0,
       "labels.x: must be a string, got a map"},
      {Minimal("node_selector: {\"-x\": y}\n"), "\"-x\"", 0,
       "node_selector.-x: '-x' is not a valid label name"},
      {Minimal("node_selector: [gpu.driver=1]\n"), "[gpu", 0,
       "node_selector: must be a map of strings, got a list"},
      {Minimal("time_limit: forever\n"), "forever", 0,
       "time_limit: 'forever' is not a duration"},
      {Minimal("time_limit: 0s\n"), "0s", 0,
       "time_limit: must be at least 1ms"},
      {Minimal("time_limit: 400d\n"), "400d", 0,
       "time_limit: must be at most 365d, got '400d'"},
      {Minimal("time_limit: -1h\n"), "-1h", 0,
       "time_limit: '-1h' is not a duration"},
      {Minimal("checkpoint: {signal: SIGFOO}\n"), "SIGFOO", 0,
       "checkpoint.signal: 'SIGFOO' is not a signal"},
      {Minimal("checkpoint: {signal: SIGKILL}\n"), "SIGKILL", 0,
       "checkpoint.signal: SIGKILL cannot be caught"},
      {Minimal("cancel: {signal: STOP}\n"), "STOP", 0,
       "cancel.signal: SIGSTOP cannot be caught"},
      {Minimal("checkpoint: {grace: 2d}\n"), "2d", 0,
       "checkpoint.grace: must be at most 1d, got '2d'"},
      {Minimal("checkpoint: {dir: ckpt/x}\n"), "ckpt/x", 0,
       "checkpoint.dir: must be an absolute path, got 'ckpt/x'"},
      {Minimal("checkpoint: {every: 1h}\n"), "every", 0,
       "checkpoint.every: unknown field 'every' (expected one of: dir, "
       "signal, grace)"},
      {Minimal("restart: {max: 1001}\n"), "1001", 0,
       "restart.max: must be between 0 and 1000, got 1001"},
      {Minimal("requeue: {max: many}\n"), "many", 0, "requeue.max: "},
      {Minimal("requeue: {max: 1, wait: 1s}\n"), "wait", 0,
       "requeue.wait: unknown field 'wait' (expected one of: max, backoff)"},
      {Minimal("restart: {max: 1, backoff: soon}\n"), "soon", 0,
       "restart.backoff: 'soon' is not a duration"},
      {Minimal("cancel: {grace: 3}\ncancel: {grace: 4}\n"), "cancel: {grace: 4",
       0, "cancel: given twice (first on line 3)"},
      {Minimal("preemptible: yes\n"), "yes", 0,
       "preemptible: must be true or false, got 'yes'"},
      {Minimal("hold: 1\n"), "1", 0, "hold: must be true or false, got '1'"},
      {Minimal("spares: 17\n"), "17", 0,
       "spares: must be between 0 and 16, got 17"},
      {Minimal("spares: one\n"), "one", 0, "spares: "},
      {Minimal("kind: training\n"), "training", 0,
       "kind: unknown job kind 'training'"},
      {Minimal("working_dir: work\n"), ": work", 2,
       "working_dir: must be an absolute path, got 'work'"},
      {Minimal("project: \"my team\"\n"), "\"my team\"", 0,
       "project: 'my team' is not a valid name"},
      {Minimal("user: \"\"\n"), "\"\"", 0, "user: must not be empty"},
      {Minimal("user: ..\n"), "..", 0, "user: '..' is not a valid user name"},
      {Minimal("user: -rf\n"), "-rf", 0,
       "user: '-rf' is not a valid user name"},
      {Minimal("user: 1000\n"), "1000", 0,
       "user: '1000' is not a valid user name"},
      {Minimal("priority: [high]\n"), "[high]", 0,
       "priority: must be a string, got a list"},
      {Minimal("name: k\n"), "name: k", 0,
       "name: given twice (first on line 1)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string message = ParseError(c.text);
    EXPECT_THAT(message, StartsWith(At(c.text, c.needle, c.skip) + c.expected));
  }
}

TEST(ParseJobSpec, DocumentErrors) {
  // Empty documents, and documents that are all comments.
  EXPECT_EQ(ParseError(""),
            "spec.yaml:1:1: the job spec is empty; it needs at least `name` "
            "and `command`");
  EXPECT_THAT(ParseError("# nothing\n\n"), StartsWith("spec.yaml:1:1: "));
  EXPECT_THAT(ParseError("---\n...\n"), StartsWith("spec.yaml:1:1: "));
  // Not a map.
  EXPECT_EQ(ParseError("- name: j\n"),
            "spec.yaml:1:1: a job spec must be a map of fields (name, command, "
            "...), got a list");
  EXPECT_THAT(ParseError("just words\n"),
              StartsWith("spec.yaml:1:1: a job spec must be a map of fields"));
  EXPECT_THAT(ParseError("[1, 2]", "body"),
              StartsWith("body:1:1: a job spec must be a map"));
  // Two documents.
  const std::string two = Minimal() + "---\nname: k\ncommand: [y]\n";
  EXPECT_THAT(ParseError(two),
              StartsWith(At(two, "name: k") + "a second YAML document starts"));
  // A separator at the end, or an explicit end marker, is fine.
  EXPECT_TRUE(ParseJobSpec(Minimal("---\n"), "spec.yaml").ok());
  EXPECT_TRUE(ParseJobSpec("---\n" + Minimal("...\n"), "spec.yaml").ok());
  const std::string late = "---\n---\n" + Minimal();
  EXPECT_THAT(ParseError(late), StartsWith(At(late, "name") + "a second"));
  // Text after a JSON body (yaml-cpp alone would loop on it).
  const std::string trailing = R"({"name": "j", "command": ["x"]},)";
  EXPECT_EQ(ParseError(trailing, "body"),
            At(trailing, "},", 1, "body") +
                "unexpected ',' after the end of the document");
  EXPECT_THAT(ParseError("{\"name\": \"j\"\n},\n\"command\": 1}", "body"),
              StartsWith("body:2:2: unexpected ','"));
  // Tabs used for indentation.
  const std::string tab = "name: j\nresources:\n\tgpus: 2\ncommand: [x]\n";
  EXPECT_EQ(ParseError(tab),
            At(tab, "\tgpus") +
                "tabs are not allowed for indentation; indent with spaces");
  const std::string tab2 = "name: j\ncommand:\n  - a\n\t- b\n";
  EXPECT_THAT(ParseError(tab2), StartsWith(At(tab2, "\t- b") + "tabs"));
  // A tab inside a value or a block scalar is fine.
  EXPECT_TRUE(ParseJobSpec("name: j\ncommand: |\n  printf 'a\tb'\n  \techo\n",
                           "spec.yaml")
                  .ok());
  // Malformed YAML.
  const std::string open = "name: j\ncommand: [a, b\nenv: {}\n";
  EXPECT_THAT(ParseError(open), StartsWith("spec.yaml:"));
  EXPECT_THAT(ParseError(open), HasSubstr("invalid YAML"));
  const std::string quote = "{\"name\": \"j\", \"command\": [\"x]}";
  EXPECT_THAT(ParseError(quote), StartsWith("spec.yaml:1:"));
  const std::string colon = "name: j\ncommand: [x]\nenv: a: b\n";
  EXPECT_THAT(ParseError(colon),
              StartsWith(At(colon, "a: b", 1) + "invalid YAML"));
  // Deep nesting is refused, not a stack overflow.
  EXPECT_THAT(ParseError(Minimal("labels: " + std::string(100000, '['))),
              StartsWith("spec.yaml:"));
  EXPECT_THAT(ParseError(Minimal("labels: " + std::string(5000, '['))),
              HasSubstr("nested too deeply"));
  // Bytes that are not text.
  const std::string nul = std::string("name: j\ncommand: [a\0b]\n", 22);
  EXPECT_EQ(ParseError(nul),
            "spec.yaml:2:12: the control character 0x00 is not allowed in a "
            "spec (write it as an escape inside double quotes)");
  EXPECT_EQ(ParseError("name: j\ncommand: [\"\xc3\x28\"]\n"),
            "spec.yaml:2:12: the spec is not valid UTF-8 text");
  EXPECT_THAT(ParseError("name: j\ncommand: [\"a\\0b\"]\n"),
              HasSubstr("command[0]: must not contain NUL"));
  EXPECT_THAT(ParseError(Minimal("labels: {a: \"" + std::string(2 << 20, 'x') +
                                 "\"}\n")),
              StartsWith("spec.yaml:1:1: the job spec is"));
  // Command and env beyond what a task can be given.
  std::string big = absl::StrCat("name: j\ncommand: [x]\nenv:\n  V0: &v \"",
                                 std::string(60000, 'v'), "\"\n");
  for (int i = 1; i < 20; ++i) absl::StrAppend(&big, "  V", i, ": *v\n");
  EXPECT_THAT(ParseError(big), HasSubstr("env.V17: the command and env of a "
                                         "task take more than 1048576 bytes"));
}

TEST(ParseJobSpec, JsonErrorsHavePositions) {
  const std::string body =
      "{\n  \"name\": \"j\",\n  \"command\": [\"x\"],\n  \"tasks\": \"4x\"\n}";
  EXPECT_EQ(ParseError(body, "POST /v1/jobs"),
            At(body, "\"4x\"", 0, "POST /v1/jobs") +
                "tasks: must be a whole number, got '4x'");
  const std::string dup = R"({"name": "j", "command": ["x"], "name": "k"})";
  EXPECT_EQ(ParseError(dup, "body"), At(dup, "\"name\": \"k\"", 0, "body") +
                                         "name: given twice (first on line 1)");
  const std::string unknown = R"({"name": "j", "command": ["x"], "gpu": 1})";
  EXPECT_THAT(ParseError(unknown, "body"),
              StartsWith(At(unknown, "\"gpu\"", 0, "body") +
                         "gpu: unknown field 'gpu'"));
  // Malformed JSON: a missing comma, a missing brace.
  EXPECT_THAT(ParseError(R"({"name": "j" "command": ["x"]})", "body"),
              StartsWith("body:1:"));
  EXPECT_THAT(ParseError("{\"name\": \"j\",\n\"command\": [\"x\"]\n", "body"),
              StartsWith("body:"));
  EXPECT_THAT(ParseError("{\"name\": \"j\",\n\"command\": [\"x\"]\n", "body"),
              HasSubstr("invalid YAML"));
  // A JSON body indented with tabs is fine.
  EXPECT_TRUE(
      ParseJobSpec("{\n\t\"name\": \"j\",\n\t\"command\": [\"x\"]\n}", "b")
          .ok());
}

TEST(ToJobRequest, Converts) {
  const Cluster cluster = Small();
  absl::StatusOr<JobRequest> job =
      ToJobRequest(DesignExampleSpec(), cluster, 7, absl::FromUnixSeconds(5));
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->id, 7);
  EXPECT_EQ(job->name, "retriever-ft");
  EXPECT_EQ(job->project, "search");
  EXPECT_EQ(job->user, "default");
  EXPECT_EQ(job->kind, JobKind::kFinetune);
  EXPECT_EQ(job->priority, 100);
  EXPECT_FALSE(job->preemptible);
  EXPECT_EQ(job->shape.tasks, 4);
  EXPECT_EQ(job->shape.gpus_per_task, 8);
  EXPECT_EQ(job->shape.gpu_model, cluster.FindGpuModel("h200"));
  EXPECT_EQ(job->shape.cpus_milli_per_task, 96000);
  EXPECT_EQ(job->shape.memory_bytes_per_task, kTiB);
  EXPECT_EQ(job->time_limit, absl::Hours(12));
  EXPECT_EQ(job->submit_time, absl::FromUnixSeconds(5));

  JobSpec spec;
  spec.name = "x";
  spec.command = {"true"};
  spec.user = "bob";
  spec.priority = "high";
  spec.gpus = 16;
  job = ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->user, "bob");
  EXPECT_EQ(job->priority, 1000);
  EXPECT_EQ(job->time_limit, absl::InfiniteDuration());
  EXPECT_EQ(job->shape.tasks, 2);
  EXPECT_EQ(job->shape.gpus_per_task, 8);
  EXPECT_EQ(job->shape.gpu_model, kAnyGpuModel);

  spec.gpus = 12;
  spec.nodes = 2;
  job = ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->shape.tasks, 2);
  EXPECT_EQ(job->shape.gpus_per_task, 6);
  EXPECT_TRUE(job->shape.one_task_per_node);

  // `nodes` spreads even what one node could hold (Slurm's -N).
  spec.gpus = 4;
  job = ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->shape.tasks, 2);
  EXPECT_EQ(job->shape.gpus_per_task, 2);
  EXPECT_TRUE(job->shape.one_task_per_node);
  EXPECT_FALSE(job->shape.OnOneNode(8));

  spec.gpus = 3;
  spec.nodes = 0;
  job = ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->shape.tasks, 1);
  EXPECT_EQ(job->shape.gpus_per_task, 3);

  // A task larger than these nodes passes here: whether it fits the cluster
  // is the scheduler's question (infeasible at submit).
  spec.gpus = 0;
  spec.gpus_per_task = 16;
  job = ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->shape.gpus_per_task, 16);
}

TEST(ToJobRequest, Errors) {
  const Cluster small = Small();
  const auto error = [](const JobSpec& spec, const Cluster& cluster) {
    absl::StatusOr<JobRequest> job =
        ToJobRequest(spec, cluster, 1, absl::UnixEpoch());
    EXPECT_FALSE(job.ok());
    if (job.ok()) return std::string();
    EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(job.status().message());
  };
  JobSpec spec = DesignExampleSpec();
  spec.gpu_model = "v100";
  EXPECT_EQ(error(spec, small),
            "resources.gpu_model: the cluster has no 'v100' GPUs (it has "
            "h200, a100)");
  absl::StatusOr<Cluster> large = ClusterPreset("large");
  ASSERT_TRUE(large.ok());
  spec.gpu_model = "a100";  // a known model, but no node has one
  EXPECT_EQ(error(spec, *large),
            "resources.gpu_model: the cluster has no 'a100' GPUs (it has "
            "h200)");

  spec = DesignExampleSpec();
  spec.priority = "urgent";
  EXPECT_EQ(error(spec, small),
            "priority: the cluster has no priority class 'urgent' (it has "
            "low, normal, high)");

  spec = DesignExampleSpec();
  spec.tasks = 1;
  spec.gpus_per_task = 1;
  spec.gpus = 12;
  EXPECT_THAT(error(spec, small),
              StartsWith("resources.gpus: 12 GPUs are more than one 8-GPU "
                         "node holds and not a multiple of 8"));
  spec.nodes = 5;
  EXPECT_THAT(error(spec, small),
              StartsWith("resources.gpus: 12 GPUs cannot be spread evenly "
                         "over 5 nodes"));
  spec.tasks = 2;
  EXPECT_THAT(error(spec, small),
              StartsWith("resources.gpus: cannot be combined with"));

  spec = DesignExampleSpec();
  spec.nodes = 2;
  EXPECT_THAT(error(spec, small), StartsWith("resources.nodes: only applies"));

  // ValidateJobRequest's checks, for specs built in code.
  spec = DesignExampleSpec();
  spec.gpus_per_task = 17;
  EXPECT_THAT(error(spec, small), StartsWith("resources.gpus_per_task: 17"));
  spec = DesignExampleSpec();
  spec.tasks = 0;
  EXPECT_THAT(error(spec, small), StartsWith("tasks: must be positive"));
  spec = DesignExampleSpec();
  spec.time_limit = absl::ZeroDuration();
  EXPECT_THAT(error(spec, small), StartsWith("time_limit: must be positive"));
}

// Returns a copy of `text` changed at random in a few places.
std::string Mutate(const std::string& text, std::mt19937& rng) {
  static constexpr char kInteresting[] =
      ":{}[]-,\"'\t\n #&*!|>%@`\\?~0123456789abcSIGKILL";
  std::string out = text;
  const int ops = std::uniform_int_distribution<int>(1, 4)(rng);
  for (int op = 0; op < ops; ++op) {
    if (out.empty()) out = "x";
    const size_t pos =
        std::uniform_int_distribution<size_t>(0, out.size() - 1)(rng);
    const size_t len = std::uniform_int_distribution<size_t>(
        1, std::min<size_t>(16, out.size() - pos))(rng);
    const auto pick = [&] {
      if (rng() % 4 == 0) return static_cast<char>(rng() % 256);
      return kInteresting[rng() % (sizeof(kInteresting) - 1)];
    };
    switch (rng() % 6) {
      case 0:
        out[pos] = pick();
        break;
      case 1:
        out.insert(out.begin() + pos, pick());
        break;
      case 2:
        out.erase(pos, len);
        break;
      case 3:
        out.insert(pos, out.substr(pos, len));
        break;
      case 4:
        out.resize(pos);
        break;
      default: {
        const size_t other =
            std::uniform_int_distribution<size_t>(0, out.size() - 1)(rng);
        std::swap(out[pos], out[other]);
        break;
      }
    }
  }
  return out;
}

// Mutated and truncated specs never crash or throw; every outcome is a spec
// that survives the storage round trip, or an InvalidArgument with a
// position.
TEST(ParseJobSpec, MutatedInputNeverCrashes) {
  const Cluster cluster = Small();
  const std::vector<std::string> seeds = {
      kDesignExample, kDesignExampleJson, ReadExample("batch.yaml"),
      ReadExample("train.yaml"), JobSpecToJson(EverythingSpec())};
  const std::regex located(R"(^fuzz:\d+:\d+: )");
  std::mt19937 rng(20240601);
  int parsed = 0;
  int failed = 0;
  const auto check = [&](const std::string& text) {
    absl::StatusOr<JobSpec> spec = ParseJobSpec(text, "fuzz");
    if (!spec.ok()) {
      ++failed;
      EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument)
          << spec.status();
      EXPECT_TRUE(
          std::regex_search(std::string(spec.status().message()), located))
          << spec.status() << "\n"
          << text;
      return;
    }
    ++parsed;
    (void)ToJobRequest(*spec, cluster, 1, absl::UnixEpoch());
    absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToJson(*spec), "fuzz");
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << text;
    EXPECT_EQ(*again, *spec) << text;
  };
  for (const std::string& seed : seeds) {
    for (size_t n = 0; n <= seed.size(); n += 3) check(seed.substr(0, n));
    for (int i = 0; i < 1000; ++i) check(Mutate(seed, rng));
  }
  EXPECT_GT(parsed, 100);
  EXPECT_GT(failed, 100);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Issue 15, item 8: one rule for user names in job specs and tokens.
TEST(IsValidUserName, PortableUnixNamesOnly) {
  for (const char* ok : {"alice", "a", "_svc", "alice.b", "build-bot",
                         "alice@corp.example", "host01$", "Alice", "a1000"}) {
    EXPECT_TRUE(IsValidUserName(ok)) << ok;
  }
  for (const char* bad : {"", ".", "..", "-rf", ".hidden", "a b", "a/b", "a:b",
                          "1000", "$", "a\nb", "ünï"}) {
    EXPECT_FALSE(IsValidUserName(bad)) << bad;
  }
  EXPECT_TRUE(IsValidUserName(std::string(64, 'a')));
  EXPECT_FALSE(IsValidUserName(std::string(65, 'a')));
  EXPECT_TRUE(IsValidProjectName("search"));
  for (const char* bad : {"", "a b", "a\tb"}) {
    EXPECT_FALSE(IsValidProjectName(bad)) << bad;
  }
  EXPECT_FALSE(IsValidProjectName(std::string_view("a\0b", 3)));
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(ParseJobSpec, NodeSelectorReachesTheJobRequest) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: j\ncommand: [x]\nnode_selector: {gpu.driver: 550.54.15, "
      "gpu.cuda: 12.4, nvme: \"\"}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->node_selector.at("gpu.cuda"), "12.4");
  EXPECT_EQ(spec->node_selector.at("nvme"), "");
  Cluster c;
  c.gpu_models = DefaultGpuModels();
  c.priority_classes = DefaultPriorityClasses();
  PoolSpec pool;
  pool.name = "h200";
  c.pools.push_back(pool);
  NodeSpec node;
  node.name = "h200-0";
  c.nodes.push_back(node);
  absl::StatusOr<JobRequest> req = ToJobRequest(*spec, c, 1, absl::Now());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->node_selector, spec->node_selector);
  // Only written when set.
  EXPECT_NE(JobSpecToJson(*spec).find("\"node_selector\""), std::string::npos);
  spec->node_selector.clear();
  EXPECT_EQ(JobSpecToJson(*spec).find("node_selector"), std::string::npos);
}

TEST(ParseJobSpec, SparesReachTheJobRequestAndNeedWholeNodeTasks) {
  absl::StatusOr<JobSpec> spec = ParseJobSpec(
      "name: j\ncommand: [x]\ntasks: 2\nspares: 2\n"
      "resources: {gpus_per_task: 8}\n",
      "spec.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->spares, 2);
  Cluster c;
  c.gpu_models = DefaultGpuModels();
  c.priority_classes = DefaultPriorityClasses();
  PoolSpec pool;
  pool.name = "h200";
  c.pools.push_back(pool);
  NodeSpec node;
  node.name = "h200-0";
  c.nodes.push_back(node);
  absl::StatusOr<JobRequest> req = ToJobRequest(*spec, c, 1, absl::Now());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->spares, 2);
  // Kept in the canonical form (only when set).
  absl::StatusOr<JobSpec> again = ParseJobSpec(JobSpecToJson(*spec), "j");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(*again, *spec);
  spec->spares = 0;
  EXPECT_EQ(JobSpecToJson(*spec).find("spares"), std::string::npos);
  // A task of half a node cannot move onto a spare.
  spec->spares = 1;
  spec->gpus_per_task = 4;
  req = ToJobRequest(*spec, c, 1, absl::Now());
  ASSERT_FALSE(req.ok());
  EXPECT_NE(req.status().message().find(
                "spares: only for jobs whose tasks take whole nodes"),
            std::string::npos)
      << req.status();
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Parts of GPUs in a job spec (docs/job-spec.md `mig`, `gpu_share`).
TEST(ParseJobSpec, MigAndGpuShare) {
  absl::StatusOr<JobSpec> mig = ParseJobSpec(
      "name: eval\ntasks: 2\nresources: {mig: 1G.18gb}\ncommand: [x]\n", "j");
  ASSERT_TRUE(mig.ok()) << mig.status();
  EXPECT_EQ(mig->mig, "1g.18gb");
  absl::StatusOr<JobSpec> share = ParseJobSpec(
      "name: emb\nresources: {gpu_share: {memory: 20Gi}}\ncommand: [x]\n", "j");
  ASSERT_TRUE(share.ok()) << share.status();
  EXPECT_EQ(share->gpu_share_bytes, 20 * kGiB);
  // The canonical JSON keeps them, and reads back the same.
  for (const JobSpec& s : {*mig, *share}) {
    absl::StatusOr<JobSpec> back = ParseJobSpec(JobSpecToJson(s), "json");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->mig, s.mig);
    EXPECT_EQ(back->gpu_share_bytes, s.gpu_share_bytes);
  }
  absl::StatusOr<JobRequest> req =
      ToJobRequest(*share, Small(), 3, absl::UnixEpoch());
  ASSERT_TRUE(req.ok()) << req.status();
  EXPECT_EQ(req->shape.slice.share_bytes, 20 * kGiB);
  EXPECT_EQ(req->shape.gpus_per_task, 1);

  auto error = [](const std::string& resources) {
    absl::StatusOr<JobSpec> s = ParseJobSpec(
        absl::StrCat("name: j\nresources: ", resources, "\ncommand: [x]\n"),
        "j.yaml");
    return s.ok() ? std::string("ok") : std::string(s.status().message());
  };
  EXPECT_THAT(error("{mig: 1g.18gb, gpu_share: {memory: 1Gi}}"),
              HasSubstr("resources.mig: cannot be combined with "
                        "`resources.gpu_share`"));
  EXPECT_THAT(error("{mig: 1g.18gb, gpus: 2}"),
              HasSubstr("cannot be combined with `resources.gpus`"));
  EXPECT_THAT(error("{gpu_share: {memory: 0}}"),
              HasSubstr("resources.gpu_share.memory"));
  // One byte (a unit left out) or less than a CUDA context: refused.
  EXPECT_THAT(error("{gpu_share: {memory: \"1\"}}"),
              HasSubstr("resources.gpu_share.memory: must be at least 1Gi "
                        "(a CUDA context alone takes hundreds of MiB), got "
                        "'1' (a number without a unit is bytes)"));
  EXPECT_THAT(error("{gpu_share: {memory: 512Mi}}"),
              HasSubstr("must be at least 1Gi"));
  EXPECT_EQ(error("{gpu_share: {memory: 1Gi}}"), "ok");
  EXPECT_THAT(error("{gpu_share: {}}"), HasSubstr("needs `memory`"));
  EXPECT_THAT(error("{gpu_share: {memory: 1Gi, cores: 2}}"),
              HasSubstr("unknown field 'cores'"));
}

}  // namespace
}  // namespace loom
