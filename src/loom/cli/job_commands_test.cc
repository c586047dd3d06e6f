#include "loom/cli/job_commands.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

const absl::Time kNow = absl::FromUnixSeconds(1795969200);  // 2026-11-29 16:20Z

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

// --- `loom run` flags -> job spec ---

RunFlags Flags(int gpus, std::vector<std::string> command) {
  RunFlags f;
  f.gpus = gpus;
  f.command = std::move(command);
  return f;
}

TEST(BuildRunSpec, OneNodeOrLessSendsTheTotal) {
  absl::StatusOr<Json> spec = BuildRunSpec(Flags(8, {"python", "train.py"}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["name"], "python");
  EXPECT_EQ((*spec)["resources"]["gpus"], 8);
  EXPECT_FALSE((*spec)["resources"].contains("nodes"));
  EXPECT_EQ((*spec)["resources"]["processes_per_task"], 1);
  EXPECT_FALSE(spec->contains("tasks"));
  EXPECT_EQ((*spec)["command"], Json::array({"python", "train.py"}));
  EXPECT_EQ((*spec)["project"], "default");
  EXPECT_EQ((*spec)["resources"]["gpu_model"], "any");
  EXPECT_EQ((*spec)["hold"], false);
  EXPECT_FALSE(spec->contains("time_limit"));
}

TEST(BuildRunSpec, NodesSpreadTheGpus) {
  RunFlags f = Flags(16, {"torchrun", "train.py"});
  f.nodes = 2;
  f.procs_per_node = 8;
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["resources"]["gpus"], 16);
  EXPECT_EQ((*spec)["resources"]["nodes"], 2);
  EXPECT_EQ((*spec)["resources"]["processes_per_task"], 8);
}

TEST(BuildRunSpec, EnvFlags) {
  RunFlags f = Flags(1, {"a"});
  f.env = {"GLOO_SOCKET_IFNAME=lo", "EMPTY=", "EQ=a=b"};
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["env"]["GLOO_SOCKET_IFNAME"], "lo");
  EXPECT_EQ((*spec)["env"]["EMPTY"], "");
  EXPECT_EQ((*spec)["env"]["EQ"], "a=b");
}

TEST(BuildRunSpec, ShapeAgainstTheNodeSizeIsLeftToTheServer) {
  // 12 GPUs do not fill whole 8-GPU nodes, but only the server knows the
  // cluster's node size: the client sends the total as it is.
  absl::StatusOr<Json> spec = BuildRunSpec(Flags(12, {"a"}));
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["resources"]["gpus"], 12);
  EXPECT_FALSE((*spec)["resources"].contains("nodes"));
}

TEST(BuildRunSpec, OptionalFields) {
  RunFlags f = Flags(2, {"/usr/bin/python3", "-c", "print(1)"});
  f.project = "search";
  f.gpu_model = "H200";
  f.name = "my-eval";
  f.time_limit = "1h30m";
  f.hold = true;
  absl::StatusOr<Json> spec = BuildRunSpec(f);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ((*spec)["name"], "my-eval");
  EXPECT_EQ((*spec)["project"], "search");
  EXPECT_EQ((*spec)["resources"]["gpu_model"], "h200");
  EXPECT_EQ((*spec)["hold"], true);
  ASSERT_TRUE(spec->contains("time_limit"));
  EXPECT_EQ((*spec)["time_limit"], "90m");
}

TEST(BuildRunSpec, ErrorsNameTheFlag) {
  auto error = [](const RunFlags& f) {
    absl::StatusOr<Json> spec = BuildRunSpec(f);
    EXPECT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().code(), absl::StatusCode::kInvalidArgument);
    return std::string(spec.status().message());
  };
  EXPECT_THAT(error(Flags(0, {"a"})), HasSubstr("-g"));
  EXPECT_THAT(error(Flags(2, {})), HasSubstr("no command"));
  RunFlags f = Flags(12, {"a"});
  f.nodes = 5;
  EXPECT_THAT(error(f), HasSubstr("--nodes 5"));
  f = Flags(2, {"a"});
  f.nodes = -1;
  EXPECT_THAT(error(f), HasSubstr("--nodes"));
  f = Flags(2, {"a"});
  f.procs_per_node = -2;
  EXPECT_THAT(error(f), HasSubstr("--procs-per-node"));
  f = Flags(2, {"a"});
  f.procs_per_node = 1000;
  EXPECT_THAT(error(f), ::testing::StartsWith("--procs-per-node: "));
  f = Flags(2, {"a"});
  f.env = {"NOEQUALS"};
  EXPECT_THAT(error(f), HasSubstr("'NOEQUALS' is not NAME=VALUE"));
  f.env = {"RANK=3"};
  EXPECT_THAT(error(f), ::testing::StartsWith("--env RANK: "));
  f.env = {"1X=3"};
  EXPECT_THAT(error(f), ::testing::StartsWith("--env 1X: "));
  f = Flags(2, {"a"});
  f.name = "Bad_Name";
  EXPECT_THAT(error(f), ::testing::StartsWith("--name: "));
  f = Flags(2, {"a"});
  f.time_limit = "soon";
  EXPECT_THAT(error(f), ::testing::StartsWith("--time-limit: "));
  f = Flags(2, {"a"});
  f.gpu_model = "v@100";
  EXPECT_THAT(error(f), ::testing::StartsWith("--gpu-model: "));
  f = Flags(2, {"a"});
  f.project = "Not A Project";
  EXPECT_THAT(error(f), ::testing::StartsWith("--project: "));
}

TEST(DefaultJobName, SanitisesTheBasename) {
  EXPECT_EQ(DefaultJobName({"python", "x.py"}), "python");
  EXPECT_EQ(DefaultJobName({"/usr/bin/python3"}), "python3");
  EXPECT_EQ(DefaultJobName({"./Run_All.sh"}), "run-all-sh");
  EXPECT_EQ(DefaultJobName({"123"}), "job-123");
  EXPECT_EQ(DefaultJobName({"__"}), "job");
  EXPECT_EQ(DefaultJobName({""}), "job");
  EXPECT_EQ(DefaultJobName({"dir/"}), "dir");
  EXPECT_EQ(DefaultJobName({std::string(100, 'a')}), std::string(63, 'a'));
}

// --- `loom run --wait` exit codes ---

TEST(WaitExitCode, MapsTheOutcome) {
  EXPECT_EQ(WaitExitCode({{"state", "succeeded"}, {"exit_code", 0}}), 0);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 3}}), 3);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 300}}), 255);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"signal", 9}}), 137);
  EXPECT_EQ(WaitExitCode({{"state", "cancelled"}, {"exit_code", -15}}), 143);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", nullptr}}), 1);
  EXPECT_EQ(WaitExitCode({{"state", "failed"}, {"exit_code", 0}}), 1);
  EXPECT_EQ(WaitExitCode({{"state", "cancelled"}}), 1);
  // No code on the job: the first task (by index) that has one.
  const Json tasks = {{"state", "failed"},
                      {"exit_code", nullptr},
                      {"placement",
                       {{"tasks",
                         {{{"index", 1}, {"exit_code", 2}},
                          {{"index", 0}, {"exit_code", 0}, {"signal", 6}}}}}}};
  EXPECT_EQ(WaitExitCode(tasks), 134);
}

TEST(IsFinalJobState, Finals) {
  EXPECT_TRUE(IsFinalJobState("succeeded"));
  EXPECT_TRUE(IsFinalJobState("failed"));
  EXPECT_TRUE(IsFinalJobState("cancelled"));
  EXPECT_FALSE(IsFinalJobState("stopping"));
  EXPECT_FALSE(IsFinalJobState("held"));
}

// --- Tables ---

Json SampleJobs() {
  return {{"jobs",
           {{{"id", 41},
             {"name", "retriever-ft"},
             {"user", "alice"},
             {"project", "search"},
             {"state", "running"},
             {"priority", "normal"},
             {"tasks", 4},
             {"gpus_per_task", 8},
             {"gpus", 32},
             {"gpu_model", "h200"},
             {"reason", ""},
             {"submit_time", Rfc3339(kNow - absl::Minutes(10))},
             {"start_time", Rfc3339(kNow - absl::Seconds(185))},
             {"end_time", nullptr},
             {"placement", {{"nodes", 4}, {"switch_level", 1}}}},
            {{"id", 42},
             {"name", "eval"},
             {"user", "bob"},
             {"project", "research"},
             {"state", "pending"},
             {"priority", "low"},
             {"tasks", 1},
             {"gpus_per_task", 2},
             {"gpus", 2},
             {"gpu_model", "any"},
             {"reason", "waiting for 2 free GPUs; 1 free"},
             {"submit_time", Rfc3339(kNow - absl::Hours(3))},
             {"start_time", nullptr}}}}};
}

TEST(FormatJobTable, AlignsColumns) {
  EXPECT_EQ(
      FormatJobTable(SampleJobs(), false, kNow),
      "JOBID  NAME          USER   PROJECT   STATE    GPUS  NODES  TIME   "
      "REASON\n"
      "41     retriever-ft  alice  search    running  32    4      3m05s  "
      "-\n"
      "42     eval          bob    research  pending  2     1      -      "
      "waiting for 2 free GPUs; 1 free\n");
}

TEST(FormatJobTable, WideAddsPriorityModelAndSubmit) {
  const std::string table = FormatJobTable(SampleJobs(), true, kNow);
  EXPECT_THAT(table, HasSubstr("PRIORITY  GPU_MODEL  SUBMIT   REASON\n"));
  EXPECT_THAT(table, HasSubstr("normal    h200       10m ago  -\n"));
  EXPECT_THAT(table, HasSubstr("low       any        3h ago   waiting"));
}

TEST(FormatJobTable, EmptyListIsTheHeader) {
  EXPECT_EQ(FormatJobTable({{"jobs", Json::array()}}, false, kNow),
            "JOBID  NAME  USER  PROJECT  STATE  GPUS  NODES  TIME  REASON\n");
  EXPECT_EQ(FormatJobTable(Json::array(), false, kNow),
            FormatJobTable({{"jobs", Json::array()}}, false, kNow));
}

TEST(FormatNodeTable, ListsNodes) {
  const Json nodes = {{"nodes",
                       {{{"name", "h200-0"},
                         {"state", "up"},
                         {"reason", ""},
                         {"address", "127.0.0.2:7100"},
                         {"pool", "h200"},
                         {"gpu_model", "h200"},
                         {"gpus", 8},
                         {"gpus_allocated", 8},
                         {"cpus", 192},
                         {"memory_bytes", int64_t{2199023255552}},
                         {"leaf", "leaf0"},
                         {"last_heartbeat", Rfc3339(kNow - absl::Seconds(1))},
                         {"jobs", {41, 43}}},
                        {{"name", "a100-0"},
                         {"state", "cordoned"},
                         {"reason", "driver upgrade"},
                         {"address", "127.0.0.3:7100"},
                         {"gpu_model", "a100"},
                         {"gpus", 8},
                         {"gpus_allocated", 0},
                         {"jobs", Json::array()}}}}};
  EXPECT_EQ(FormatNodeTable(nodes, false, kNow),
            "NAME    STATE     GPUS  ALLOC  MODEL  ADDRESS         JOBS   "
            "REASON\n"
            "h200-0  up        8     8      h200   127.0.0.2:7100  41,43  -\n"
            "a100-0  cordoned  8     0      a100   127.0.0.3:7100  -      "
            "driver upgrade\n");
  const std::string wide = FormatNodeTable(nodes, true, kNow);
  EXPECT_THAT(wide, HasSubstr("POOL  LEAF   CPUS  MEMORY  HEARTBEAT  REASON"));
  EXPECT_THAT(wide, HasSubstr("h200  leaf0  192   2Ti     1s ago     -"));
}

TEST(FormatProjectTable, ListsProjects) {
  const Json projects = {{"projects",
                          {{{"name", "search"},
                            {"quota_gpus", 96},
                            {"weight", 2},
                            {"running_gpus", 16},
                            {"gpu_seconds", 7200.0},
                            {"pending_jobs", 3},
                            {"running_jobs", 2}}}}};
  EXPECT_EQ(FormatProjectTable(projects),
            "NAME    QUOTA_GPUS  WEIGHT  RUNNING_GPUS  RUNNING  PENDING  "
            "GPU_HOURS\n"
            "search  96          2       16            2        3        "
            "2.0\n");
}

TEST(FormatTable, LastColumnIsNotPadded) {
  EXPECT_EQ(FormatTable({"A", "LONGER"}, {{"xyz", ""}, {"1", "2"}}),
            "A    LONGER\nxyz\n1    2\n");
}

TEST(DescribeSwitchSpan, NamesTheLevel) {
  EXPECT_EQ(DescribeSwitchSpan({{"switch_level", 1}, {"switch", "leaf0"}}),
            "one leaf switch (leaf0)");
  EXPECT_EQ(DescribeSwitchSpan(
                {{"switch_level", 2}, {"switch", "spine1"}, {"leaves", 3}}),
            "one spine switch (spine1), 3 leaves");
  EXPECT_EQ(DescribeSwitchSpan({{"switch_level", 3}, {"leaves", 40}}),
            "one core switch, 40 leaves");
  EXPECT_EQ(DescribeSwitchSpan(
                {{"switch_level", 0}, {"tasks", {{{"node", "h200-3"}}}}}),
            "one node (h200-3)");
  EXPECT_EQ(DescribeSwitchSpan(Json::object()), "");
}

TEST(FormatJobDetails, DescribesARunningJob) {
  Json job = SampleJobs()["jobs"][0];
  job["kind"] = "finetune";
  job["preemptible"] = false;
  job["restart_count"] = 1;
  job["placement"] = {{"switch_level", 1},
                      {"switch", "leaf0"},
                      {"nodes", 2},
                      {"leaves", 1},
                      {"tasks",
                       {{{"index", 0},
                         {"node", "h200-0"},
                         {"address", "127.0.0.2"},
                         {"gpus", {0, 1, 2, 3, 4, 5, 6, 7}},
                         {"state", "running"},
                         {"exit_code", nullptr}},
                        {{"index", 1},
                         {"node", "h200-1"},
                         {"address", "127.0.0.3"},
                         {"gpus", {0, 2, 3}},
                         {"state", "running"}}}}};
  job["spec"] = {{"command", {"python", "train.py", "--note", "a b"}},
                 {"time_limit", "12h"}};
  job["events"] = {
      {{"time", Rfc3339(kNow - absl::Minutes(10))}, {"message", "submitted"}},
      {{"time", Rfc3339(kNow - absl::Seconds(185))},
       {"message", "started on 2 nodes under leaf0"}}};
  const std::string text = FormatJobDetails(job, kNow);
  EXPECT_EQ(text,
            "Job:         41 (retriever-ft)\n"
            "State:       running\n"
            "User:        alice\n"
            "Project:     search\n"
            "Kind:        finetune, priority normal, not preemptible\n"
            "GPUs:        32 x h200 (4 tasks x 8 GPUs)\n"
            "Placement:   one leaf switch (leaf0), 2 nodes\n"
            "Command:     python train.py --note 'a b'\n"
            "Time limit:  12h\n"
            "Submitted:   2026-11-29 16:10:00 UTC (10m ago)\n"
            "Started:     2026-11-29 16:16:55 UTC (3m ago), ran 3m05s\n"
            "Restarts:    1\n"
            "Tasks:\n"
            "  TASK  NODE    ADDRESS    GPUS   STATE    EXIT\n"
            "  0     h200-0  127.0.0.2  0-7    running  -\n"
            "  1     h200-1  127.0.0.3  0,2-3  running  -\n"
            "Events:\n"
            "  TIME                     AGE      MESSAGE\n"
            "  2026-11-29 16:10:00 UTC  10m ago  submitted\n"
            "  2026-11-29 16:16:55 UTC  3m ago   started on 2 nodes under "
            "leaf0\n");
  EXPECT_THAT(text, Not(HasSubstr("Exit code")));
}

TEST(FormatJobDetails, CoalescedEventsShowTheirCount) {
  Json job = SampleJobs()["jobs"][0];
  job["events"] = {{{"time", Rfc3339(kNow - absl::Minutes(10))},
                    {"message", "checkpoint saved (step 900)"},
                    {"count", 12},
                    {"last_time", Rfc3339(kNow - absl::Minutes(1))}}};
  EXPECT_THAT(FormatJobDetails(job, kNow),
              HasSubstr("checkpoint saved (step 900) (12 times, the last 1m "
                        "ago)\n"));
}

TEST(FormatJobDetails, PendingJobShowsWhyAndFinishedItsCode) {
  const Json pending = SampleJobs()["jobs"][1];
  EXPECT_THAT(FormatJobDetails(pending, kNow),
              HasSubstr("Pending reason:  waiting for 2 free GPUs; 1 free\n"));
  Json failed = pending;
  failed["state"] = "failed";
  failed["reason"] = "task 0 exited with 3";
  failed["exit_code"] = 3;
  const std::string text = FormatJobDetails(failed, kNow);
  EXPECT_THAT(text, HasSubstr("Reason:     task 0 exited with 3\n"));
  EXPECT_THAT(text, HasSubstr("Exit code:  3\n"));
}

TEST(JsonToYaml, QuotesStringsThatLookLikeOtherTypes) {
  const Json j = {{"a", "true"},       {"b", "123"},     {"c", 123},
                  {"d", "hello"},      {"e", nullptr},   {"f", Json::array()},
                  {"g", {{"x", 1.5}}}, {"h", {"p", "q"}}};
  EXPECT_EQ(JsonToYaml(j),
            "a: \"true\"\nb: \"123\"\nc: 123\nd: hello\ne: ~\nf: []\n"
            "g:\n  x: 1.5\nh:\n  - p\n  - q\n");
}

TEST(FormatTimes, AgoAndElapsed) {
  EXPECT_EQ(FormatAgo(kNow - absl::Seconds(5), kNow), "5s ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Minutes(3), kNow), "3m ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Hours(5), kNow), "5h ago");
  EXPECT_EQ(FormatAgo(kNow - absl::Hours(50), kNow), "2d ago");
  EXPECT_EQ(FormatAgo(kNow + absl::Seconds(5), kNow), "0s ago");
  EXPECT_EQ(FormatElapsed(absl::Seconds(45)), "45s");
  EXPECT_EQ(FormatElapsed(absl::Seconds(725)), "12m05s");
  EXPECT_EQ(FormatElapsed(absl::Minutes(184)), "3h04m");
  EXPECT_EQ(FormatElapsed(absl::Hours(51)), "2d03h");
}

// --- Whole verbs against an in-process fake server ---

class FakeServer {
 public:
  ~FakeServer() { Stop(); }
  httplib::Server& server() { return server_; }
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

int UnusedPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

void Reply(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

struct CliResult {
  int rc = -1;
  std::string out;
  std::string err;
};

class VerbTest : public ::testing::Test {
 protected:
  void SetUp() override {
    httplib::Server& s = fake_.server();
    s.Post("/v1/jobs", [this](const httplib::Request& req,
                              httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      submitted_ = Json::parse(req.body, nullptr, false);
      submit_user_ = req.get_header_value("X-Loom-User");
      Json job = {
          {"id", 42},
          {"name", submitted_.value("name", "")},
          {"state", submitted_.value("hold", false) ? "held" : "pending"}};
      Reply(res, 201, job);
    });
    s.Get("/v1/jobs", [this](const httplib::Request& req,
                             httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      list_query_ = req.get_param_value("state");
      Json jobs = SampleJobs();
      if (list_query_ == "held") {
        jobs = {
            {"jobs",
             {{{"id", 5}, {"state", "held"}}, {{"id", 6}, {"state", "held"}}}}};
      }
      Reply(res, 200, jobs);
    });
    s.Get(R"(/v1/jobs/(\d+))", [this](const httplib::Request& req,
                                      httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      if (req.matches[1] != "42") {
        Reply(res, 404,
              {{"error",
                {{"code", "not_found"},
                 {"message",
                  absl::StrCat("no job ", std::string(req.matches[1]))}}}});
        return;
      }
      const size_t i = std::min(polls_++, states_.size() - 1);
      Reply(res, 200, states_[i]);
    });
    s.Post(R"(/v1/jobs/(\d+)/cancel)", [](const httplib::Request& req,
                                          httplib::Response& res) {
      if (req.matches[1] == "7") {
        Reply(res, 404,
              {{"error", {{"code", "not_found"}, {"message", "no job 7"}}}});
        return;
      }
      Reply(res, 200,
            {{"id", std::stoi(req.matches[1])},
             {"state", req.matches[1] == "43" ? "stopping" : "cancelled"}});
    });
    s.Post("/v1/jobs/release", [this](const httplib::Request& req,
                                      httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      Json released = Json::array(), errors = Json::array();
      const Json body = Json::parse(req.body);
      for (const Json& id : body["ids"]) {
        if (id == 7) {
          errors.push_back({{"id", 7},
                            {"error",
                             {{"code", "failed_precondition"},
                              {"message", "job 7 is running, not held"}}}});
        } else {
          released_.push_back(id.get<int>());
          released.push_back(id);
        }
      }
      Reply(res, 200, {{"released", released}, {"errors", errors}});
    });
    s.Post(R"(/v1/jobs/(\d+)/checkpoint)",
           [this](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard<std::mutex> lock(mu_);
             checkpoint_ = {{"id", std::stoi(req.matches[1])},
                            {"body", Json::parse(req.body)}};
             Reply(res, 200, {{"id", std::stoi(req.matches[1])}});
           });
    s.Post(R"(/v1/jobs/(\d+)/release)",
           [this](const httplib::Request& req, httplib::Response& res) {
             std::lock_guard<std::mutex> lock(mu_);
             released_.push_back(std::stoi(req.matches[1]));
             Reply(res, 200,
                   {{"id", std::stoi(req.matches[1])}, {"state", "pending"}});
           });
    s.Get(R"(/v1/jobs/(\d+)/logs)",
          [](const httplib::Request& req, httplib::Response& res) {
            // The agent's errors, passed through by the server.
            if (req.matches[1] == "13") {
              Reply(res, 502,
                    {{"error",
                      {{"code", "bad_gateway"},
                       {"message",
                        "the agent of node h200-1 did not answer: "
                        "Connection refused"}}}});
              return;
            }
            if (req.matches[1] == "14") {
              res.status = 504;
              res.set_content("agent timed out\n", "text/plain");
              return;
            }
            if (req.matches[1] == "15") {
              Reply(res, 409,
                    {{"error",
                      {{"code", "failed_precondition"},
                       {"message", "task 3 has not started"}}}});
              return;
            }
            res.set_content(
                absl::StrCat("line from ", req.get_param_value("stream"),
                             " of task ", req.get_param_value("task"), "\n"),
                "text/plain");
          });
    s.Post(R"(/v1/nodes/([^/]+)/drain)",
           [](const httplib::Request& req, httplib::Response& res) {
             Reply(res, 200,
                   {{"name", std::string(req.matches[1])},
                    {"state", "draining"},
                    {"jobs", {41}}});
           });
    fake_.Start();
    env_["LOOM_SERVER"] = fake_.url();
    env_["HOME"] = "/nonexistent";
    env_["USER"] = "carol";
  }

  // Parses `args` as `loom ARGS...` would and runs the verb.
  CliResult Run(std::vector<std::string> args,
                const std::atomic<bool>* interrupted = nullptr) {
    CLI::App app{"loom", "loom"};
    app.require_subcommand(1);
    JobCommandFlags flags;
    AddJobCommands(app, &flags);
    std::vector<const char*> argv = {"loom"};
    for (const std::string& a : args) argv.push_back(a.c_str());
    CliResult r;
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError& e) {
      std::ostringstream out, err;
      r.rc = app.exit(e, out, err) == 0 ? 0 : 2;
      r.out = out.str();
      r.err = err.str();
      return r;
    }
    std::ostringstream out, err;
    CommandContext ctx;
    ctx.getenv = [this](const char* name) -> std::optional<std::string> {
      auto it = env_.find(name);
      if (it == env_.end()) return std::nullopt;
      return it->second;
    };
    ctx.out = &out;
    ctx.err = &err;
    ctx.now = [] { return kNow; };
    ctx.interrupted = interrupted;
    ctx.poll_interval = absl::Milliseconds(5);
    for (const auto& [name, verb] : flags.verbs) {
      if (verb->parsed()) r.rc = RunJobCommand(name, flags, ctx);
    }
    r.out = out.str();
    r.err = err.str();
    return r;
  }

  std::string TempFile(const std::string& name, const std::string& text) {
    const std::string path =
        (std::filesystem::temp_directory_path() /
         absl::StrCat("loom-cli-test-", getpid(), "-", name))
            .string();
    std::ofstream(path) << text;
    files_.push_back(path);
    return path;
  }
  void TearDown() override {
    for (const std::string& f : files_) std::remove(f.c_str());
  }

  FakeServer fake_;
  std::map<std::string, std::string> env_;
  std::vector<std::string> files_;
  std::mutex mu_;
  Json submitted_;
  std::string submit_user_;
  std::string list_query_;
  std::vector<int> released_;
  Json checkpoint_;
  std::vector<Json> states_ = {{{"id", 42}, {"state", "running"}}};
  size_t polls_ = 0;
};

TEST_F(VerbTest, QueuePrintsActiveJobsByDefault) {
  CliResult r = Run({"queue"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, FormatJobTable(SampleJobs(), false, kNow));
  EXPECT_EQ(list_query_, "held,pending,running,stopping");
  r = Run({"queue", "--all", "-o", "json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(list_query_, "");
  EXPECT_EQ(Json::parse(r.out), SampleJobs());
  r = Run({"queue", "--state", "failed,Succeeded", "-o", "yaml"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(list_query_, "failed,succeeded");
  EXPECT_THAT(r.out, HasSubstr("jobs:\n  - "));
}

TEST_F(VerbTest, QueueRejectsBadUsage) {
  CliResult r = Run({"queue", "--state", "sleeping"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("unknown state 'sleeping'"));
  EXPECT_EQ(Run({"queue", "-o", "xml"}).rc, 2);
  EXPECT_EQ(Run({"queue", "--all", "--state", "held"}).rc, 2);
}

TEST_F(VerbTest, SubmitParsesLocallyThenSends) {
  const std::string path = TempFile(
      "job.yaml",
      "name: train\nresources:\n  gpus: 8\ncommand: [python, train.py]\n");
  CliResult r = Run({"submit", "-f", path, "--hold"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "submitted job 42 (held; start it with `loom release 42`)\n");
  EXPECT_EQ(submitted_["name"], "train");
  EXPECT_EQ(submitted_["hold"], true);
  EXPECT_EQ(submitted_["resources"]["gpus"], 8);
  EXPECT_EQ(submit_user_, "carol");
}

TEST_F(VerbTest, SubmitSeveralFilesChecksAllFirst) {
  const std::string a = TempFile("a.yaml", "name: a\ncommand: [x]\n");
  const std::string b = TempFile("b.yaml", "name: b\ncommand: [y]\n");
  const std::string bad = TempFile("c.yaml", "name: c\ncommand: 3\ntasks: 0\n");
  CliResult r = Run({"submit", "-f", a, b});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\nsubmitted job 42\n");
  EXPECT_EQ(submitted_["name"], "b");  // the last one sent
  submitted_ = Json();
  r = Run({"submit", "-f", a, "-f", bad, "-f", b});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(bad + ":3:"));
  EXPECT_TRUE(submitted_.is_null());  // nothing was sent
  r = Run({"submit", "-f", a, b, "-o", "json"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["jobs"].size(), 2u);
}

TEST_F(VerbTest, SubmitBadFileIsExit2WithLocation) {
  const std::string path = TempFile("bad.yaml",
                                    "name: train\nresources:\n  gpus: many\n"
                                    "command: [x]\n");
  CliResult r = Run({"submit", "-f", path});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr(path + ":3:"));
  EXPECT_THAT(r.err, HasSubstr("resources.gpus"));
  EXPECT_TRUE(submitted_.is_null());

  r = Run({"submit", "-f", "/nonexistent/job.yaml"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("cannot read /nonexistent/job.yaml"));
}

TEST_F(VerbTest, RunSubmitsTheBuiltSpec) {
  CliResult r = Run({"run", "-g", "16", "--nodes", "2", "--procs-per-node", "8",
                     "--", "torchrun", "train.py", "--lr", "3"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\n");
  EXPECT_EQ(submitted_["resources"]["nodes"], 2);
  EXPECT_EQ(submitted_["resources"]["processes_per_task"], 8);
  EXPECT_EQ(submitted_["command"],
            Json::array({"torchrun", "train.py", "--lr", "3"}));
  // Without "--", flags after the command's first word are the command's.
  r = Run({"run", "-g", "1", "python", "x.py", "-g", "2"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(submitted_["command"], Json::array({"python", "x.py", "-g", "2"}));
  EXPECT_EQ(submitted_["resources"]["gpus"], 1);
}

TEST_F(VerbTest, RunBadFlagsAreExit2) {
  CliResult r = Run({"run", "-g", "12", "--nodes", "5", "--", "x"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom run: -g 12 GPUs cannot be spread"));
  EXPECT_EQ(Run({"run", "--", "x"}).rc, 2);  // -g is required
  EXPECT_EQ(Run({"run", "-g", "2"}).rc, 2);  // no command
  EXPECT_TRUE(submitted_.is_null());
}

TEST_F(VerbTest, RunWaitExitsWithTheJobsCode) {
  states_ = {{{"id", 42}, {"state", "pending"}, {"reason", "no free GPUs"}},
             {{"id", 42},
              {"state", "running"},
              {"placement", {{"tasks", {{{"node", "h200-0"}}}}}}},
             {{"id", 42}, {"state", "failed"}, {"exit_code", 3}}};
  CliResult r = Run({"run", "-g", "2", "--wait", "--", "false"});
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(r.out, "submitted job 42\n");
  EXPECT_THAT(r.err, HasSubstr("job 42 is pending: no free GPUs\n"));
  EXPECT_THAT(r.err, HasSubstr("job 42 is running on h200-0\n"));
  EXPECT_THAT(r.err, HasSubstr("job 42 failed (exit status 3)"));

  polls_ = 0;
  states_ = {{{"id", 42}, {"state", "succeeded"}, {"exit_code", 0}}};
  EXPECT_EQ(Run({"run", "-g", "2", "--wait", "--", "true"}).rc, 0);
}

TEST_F(VerbTest, RunWaitInterruptedIs130) {
  std::atomic<bool> interrupted{false};
  std::thread ctrl_c([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    interrupted = true;
  });
  CliResult r =
      Run({"run", "-g", "1", "--wait", "--", "sleep", "1000"}, &interrupted);
  ctrl_c.join();
  EXPECT_EQ(r.rc, 130);
  EXPECT_THAT(r.err, HasSubstr("job 42 keeps running"));
}

TEST_F(VerbTest, ShowAndLogs) {
  states_ = {SampleJobs()["jobs"][0]};
  states_[0]["id"] = 42;
  CliResult r = Run({"show", "42"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Job:        42 (retriever-ft)"));
  r = Run({"show", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, "loom show: no job 9\n");
  EXPECT_EQ(Run({"show", "abc"}).rc, 2);

  r = Run({"logs", "42", "--task", "3", "--stderr"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "line from stderr of task 3\n");
}

// Issue 14.7: CLI11 read "0x10" as job 16, "010" as 8 and clamped 2^64-1
// to 2^63-1; job IDs are canonical positive decimals.
TEST_F(VerbTest, JobIdsAreCanonicalDecimals) {
  for (const char* bad : {"0x10", "010", "+5", "18446744073709551615"}) {
    CliResult r = Run({"show", bad});
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
    EXPECT_THAT(r.err, HasSubstr(bad));
  }
  EXPECT_THAT(Run({"show", "18446744073709551615"}).err,
              HasSubstr("out of range"));
  EXPECT_EQ(Run({"cancel", "41", "0x2b"}).rc, 2);
  EXPECT_EQ(Run({"logs", "0042"}).rc, 2);
  EXPECT_EQ(Run({"show", "42"}).rc, 0);
}

// Any non-2xx answer to a log read is an error: its message is printed, not
// the body as log text, and the verb exits 1 (issue 14.6).
TEST_F(VerbTest, LogsPrintsTheErrorOfAnyNon2xxAnswerAndExits1) {
  CliResult r = Run({"logs", "13"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "loom logs: job 13: the agent of node h200-1 did not answer: "
            "Connection refused\n");
  r = Run({"logs", "14", "-f"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_THAT(r.err, HasSubstr("HTTP 504"));
  EXPECT_THAT(r.err, HasSubstr("agent timed out"));
  r = Run({"logs", "15", "--task", "3"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "loom logs: job 15: task 3 has not started\n");
}

TEST_F(VerbTest, CancelReportsEachJob) {
  CliResult r = Run({"cancel", "41", "7", "43"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.out, HasSubstr("cancelled job 41\n"));
  EXPECT_THAT(r.out, HasSubstr("job 43 is stopping"));
  EXPECT_EQ(r.err, "loom cancel: no job 7\n");
}

TEST_F(VerbTest, ReleaseAllReleasesMyHeldJobs) {
  CliResult r = Run({"release", "--all"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "released job 5\nreleased job 6\n");
  EXPECT_EQ(released_, (std::vector<int>{5, 6}));
  EXPECT_EQ(Run({"release"}).rc, 2);
  EXPECT_EQ(Run({"release", "5", "--all"}).rc, 2);
  // Several IDs: one request; a job that cannot be released fails the verb.
  released_.clear();
  r = Run({"release", "8", "7", "9"});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "released job 8\nreleased job 9\n");
  EXPECT_THAT(r.err, HasSubstr("job 7 is running, not held"));
  EXPECT_EQ(released_, (std::vector<int>{8, 9}));
}

TEST_F(VerbTest, CheckpointUsesTheTasksJob) {
  CliResult r = Run({"checkpoint"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("LOOM_JOB_ID"));
  env_["LOOM_JOB_ID"] = "17";
  r = Run({"checkpoint", "--step", "40"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "job 17: checkpoint recorded (step 40)\n");
  EXPECT_EQ(checkpoint_["id"], 17);
  EXPECT_EQ(checkpoint_["body"]["step"], 40);
  r = Run({"checkpoint", "5"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(checkpoint_["id"], 5);
  EXPECT_FALSE(checkpoint_["body"].contains("step"));
}

TEST_F(VerbTest, DrainSaysWhatHappens) {
  CliResult r = Run({"drain", "h200-0"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out,
            "node h200-0 is draining: no new work; drained when its 1 job "
            "end\n");
}

TEST_F(VerbTest, ServerDiscoveryAndNetworkFailures) {
  env_.erase("LOOM_SERVER");
  CliResult r = Run({"nodes"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_THAT(r.err, HasSubstr("loom nodes: no loom server given: pass "
                               "--server URL, set LOOM_SERVER"));

  const std::string down = absl::StrCat("http://127.0.0.1:", UnusedPort());
  r = Run({"projects", "--server", down});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.err, absl::StrCat("loom projects: cannot reach the loom server "
                                "at ",
                                down, ": Connection refused\n"));
  // --server wins over LOOM_SERVER.
  env_["LOOM_SERVER"] = fake_.url();
  r = Run({"queue", "--server", down});
  EXPECT_EQ(r.rc, 1);
  EXPECT_THAT(r.err, HasSubstr(down));
}

TEST_F(VerbTest, EveryVerbHasHelp) {
  for (const char* verb :
       {"submit", "run", "release", "queue", "show", "logs", "cancel", "nodes",
        "cordon", "uncordon", "drain", "projects", "checkpoint"}) {
    CliResult r = Run({verb, "--help"});
    EXPECT_EQ(r.rc, 0) << verb;
    EXPECT_THAT(r.out, HasSubstr("--server")) << verb;
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(FormatTopTest, TotalsNodeMapAndJobs) {
  const absl::Time now = absl::FromUnixSeconds(1800000000);
  nlohmann::json nodes = {{"nodes", nlohmann::json::array()}};
  const std::vector<std::tuple<const char*, const char*, int>> spec = {
      {"leaf0", "up", 8},      {"leaf0", "up", 4},     {"leaf0", "up", 1},
      {"leaf0", "up", 0},      {"leaf1", "down", 0},   {"leaf1", "drained", 0},
      {"leaf1", "suspect", 0}, {"leaf1", "unknown", 0}};
  for (const auto& [leaf, state, alloc] : spec) {
    nodes["nodes"].push_back({{"leaf", leaf},
                              {"state", state},
                              {"gpus", 8},
                              {"gpus_allocated", alloc}});
  }
  nlohmann::json jobs = {{"jobs",
                          {{{"id", 7},
                            {"name", "big"},
                            {"user", "ana"},
                            {"gpus", 12},
                            {"state", "running"},
                            {"start_time", "2027-01-15T07:50:00.000Z"},
                            {"placement",
                             {{"switch_level", 1},
                              {"switch", "leaf0"},
                              {"nodes", 2},
                              {"tasks", nlohmann::json::array()}}}},
                           {{"id", 9},
                            {"name", "wait"},
                            {"user", "bo"},
                            {"gpus", 64},
                            {"state", "pending"},
                            {"reason", "no room"}}}}};
  const std::string top =
      FormatTop(nodes, jobs, "http://127.0.0.1:7070", 80, 10, now);
  EXPECT_THAT(top, ::testing::HasSubstr("GPUs   13/64 allocated (20%)"));
  EXPECT_THAT(top,
              ::testing::HasSubstr(
                  "Nodes  8, 4 up, 1 suspect, 1 drained, 1 down, 1 unknown"));
  EXPECT_THAT(top, ::testing::HasSubstr("Jobs   1 running, 1 waiting"));
  EXPECT_THAT(top, ::testing::HasSubstr("leaf0  #+-.  leaf1  Xds?"));
  EXPECT_THAT(top, ::testing::ContainsRegex("9 +wait +bo +64 +no room"));
  EXPECT_THAT(top, ::testing::ContainsRegex("7 +big +ana +12 +"));
  for (absl::string_view line : absl::StrSplit(top, '\n')) {
    EXPECT_LE(line.size(), 80u) << line;
  }
}

}  // namespace
}  // namespace loom
