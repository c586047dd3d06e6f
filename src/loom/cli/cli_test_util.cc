#include "loom/cli/cli_test_util.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "loom/cli/job_commands.h"

namespace loom {
namespace {

using Json = nlohmann::json;

void Reply(httplib::Response& res, int status, const Json& j) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}

}  // namespace

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

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

FakeServer::FakeServer() : server_(std::make_unique<httplib::Server>()) {}

FakeServer::~FakeServer() { Stop(); }

void FakeServer::Start() {
  port_ = server_->bind_to_any_port("127.0.0.1");
  ASSERT_GT(port_, 0);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  while (!server_->is_running()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void FakeServer::Stop() {
  if (thread_.joinable()) {
    server_->stop();
    thread_.join();
  }
}

std::string FakeServer::url() const {
  return absl::StrCat("http://127.0.0.1:", port_);
}

void VerbTest::SetUp() {
  httplib::Server& s = fake_.server();
  s.Get("/v1/nodes", [](const httplib::Request&, httplib::Response& res) {
    Reply(res, 200,
          Json::array({{{"name", "h200-0"}, {"pool", "h200"}, {"gpus", 8}},
                       {{"name", "a100-0"}, {"pool", "a100"}, {"gpus", 4}}}));
  });
  s.Post("/v1/jobs",
         [this](const httplib::Request& req, httplib::Response& res) {
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
  s.Get(R"(/v1/jobs/(\d+))",
        [this](const httplib::Request& req, httplib::Response& res) {
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
  s.Post(R"(/v1/jobs/(\d+)/cancel)", [this](const httplib::Request& req,
                                            httplib::Response& res) {
    if (req.matches[1] == "42") {
      // Polled after this, the job has ended cancelled.
      std::lock_guard<std::mutex> lock(mu_);
      states_ = {{{"id", 42}, {"state", "cancelled"}}};
      polls_ = 0;
    }
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
  s.Post(R"(/v1/jobs/(\d+)/release)", [this](const httplib::Request& req,
                                             httplib::Response& res) {
    std::lock_guard<std::mutex> lock(mu_);
    released_.push_back(std::stoi(req.matches[1]));
    Reply(res, 200, {{"id", std::stoi(req.matches[1])}, {"state", "pending"}});
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

CliResult VerbTest::Run(std::vector<std::string> args,
                        const std::atomic<bool>* interrupted) {
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
  ctx.environment = [this] {
    return std::vector<std::pair<std::string, std::string>>(env_.begin(),
                                                            env_.end());
  };
  ctx.working_dir = [] { return std::string("/home/carol/work"); };
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

std::string VerbTest::TempFile(const std::string& name,
                               const std::string& text) {
  const std::string path = (std::filesystem::temp_directory_path() /
                            absl::StrCat("loom-cli-test-", getpid(), "-", name))
                               .string();
  std::ofstream(path) << text;
  files_.push_back(path);
  return path;
}

void VerbTest::TearDown() {
  for (const std::string& f : files_) std::remove(f.c_str());
}

}  // namespace loom
