// What an agent leaves for the next one, through whole agents
// (task_recovery.cc): a restarted agent reports and re-adopts its running
// tasks, or fences them when the lease ran out; shims leave fencing to the
// process that launched them; a task whose shim dies is killed and reported
// lost; and what the agent keeps on disk is private.

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "httplib.h"
#include "loom/agent/agent.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/task_runner.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using agent_testing::AgentClient;
using agent_testing::BaseOptions;
using agent_testing::FakeServer;
using agent_testing::Launch;
using agent_testing::StartAgent;
using agent_testing::StateIs;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

TEST(AgentTest, RestartedAgentReportsItsRunningTasks) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> first = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(first, nullptr);
  {
    AgentClient client(*first);
    httplib::Result res =
        client.Post("/v1/tasks", Launch("11.0.0", {"/bin/sleep", "30"}));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
    res = client.Post(
        "/v1/tasks", Launch("11.0.1", {"/bin/sleep", "30"}, json::object(), 2));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "11.0.1"), "running");
  }));
  first.reset();  // the agent stops; its tasks run on

  const int before = server.registration_count("h200-0");
  std::unique_ptr<Agent> second = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  const json registration = server.registrations().back();
  std::map<std::string, std::string> states;
  for (const json& t : registration["tasks"]) {
    states[t["task_id"].get<std::string>()] = t["state"].get<std::string>();
  }
  EXPECT_EQ(states, (std::map<std::string, std::string>{
                        {"11.0.0", "running"}, {"11.0.1", "running"}}));

  AgentClient client(*second);
  httplib::Result res =
      client.Post("/v1/tasks", Launch("11.0.0", {"/bin/sleep", "30"}));
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 409);
  for (const char* id : {"11.0.0", "11.0.1"}) {
    res = client.Post(absl::StrCat("/v1/tasks/", id, "/stop"), json::object());
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
  for (const char* id : {"11.0.0", "11.0.1"}) {
    ASSERT_TRUE(WaitFor(
        [&] { return StateIs(server.LastStatus("h200-0", id), "exited"); }));
    EXPECT_EQ(server.LastStatus("h200-0", id)["signal"], SIGTERM) << id;
  }
}

TEST(AgentTest, RestartedAgentFencesTasksWhoseLeaseRanOut) {
  FakeServer server;
  server.set_fence_after_ms(1000);
  TempDir dir;
  std::unique_ptr<Agent> first = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(first, nullptr);
  {
    AgentClient client(*first);
    for (const char* id : {"12.0.0", "12.0.1"}) {
      httplib::Result res =
          client.Post("/v1/tasks", Launch(id, {"/bin/sleep", "30"}));
      ASSERT_TRUE(res);
      ASSERT_EQ(res->status, 201) << res->body;
    }
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "12.0.1"), "running");
  }));
  // Back within the lease: the task is re-adopted and keeps running.
  first.reset();
  std::unique_ptr<Agent> second = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(second, nullptr);
  ASSERT_TRUE(WaitFor([&] { return second->Registered("h200-0"); }));
  absl::SleepFor(absl::Milliseconds(300));
  EXPECT_TRUE(StateIs(server.LastStatus("h200-0", "12.0.0"), "running"));
  // Gone longer than the lease: the server may run the job elsewhere, so
  // the recovered tasks are killed before the agent registers.
  second.reset();
  absl::SleepFor(absl::Milliseconds(1500));
  const int before = server.registration_count("h200-0");
  std::unique_ptr<Agent> third = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(third, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  for (const char* id : {"12.0.0", "12.0.1"}) {
    ASSERT_TRUE(WaitFor([&] {
      return StateIs(server.LastStatus("h200-0", id), "exited");
    })) << id;
    EXPECT_EQ(server.LastStatus("h200-0", id)["signal"], SIGKILL) << id;
  }
}

// A shim fences its task only once the process that launched it is gone
// (tests/e2e_faults_test.sh kills an agent process and checks that). Here
// the agent is an object in this process, which stays: the shim leaves its
// task to the live process, and the next agent fences it.
TEST(AgentTest, ShimsLeaveFencingToTheProcessThatLaunchedThem) {
  FakeServer server;
  server.set_fence_after_ms(1000);
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  const std::string pid_file = dir.path() + "/task.pid";
  {
    AgentClient client(*agent);
    httplib::Result res = client.Post(
        "/v1/tasks",
        Launch("13.0.0",
               {"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"}));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 201) << res->body;
  }
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "13.0.0"), "running");
  }));
  pid_t pid = 0;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(pid_file);
    return static_cast<bool>(in >> pid) && pid > 0;
  }));
  // While the agent renews the lease, the task runs past the fence limit.
  absl::SleepFor(absl::Milliseconds(2500));
  ASSERT_EQ(::kill(pid, 0), 0) << "fenced while the lease was renewed";
  // The agent object goes; its process does not. The lease runs out, and
  // the shim, still this process's child, leaves the task alone.
  agent.reset();
  absl::SleepFor(absl::Milliseconds(2500));
  EXPECT_EQ(::kill(pid, 0), 0) << "a shim fenced while its launcher lives";
  // The next agent finds the lease run out and fences the task itself.
  const int before = server.registration_count("h200-0");
  agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(
      WaitFor([&] { return server.registration_count("h200-0") > before; }));
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "13.0.0"), "exited");
  }));
  EXPECT_EQ(server.LastStatus("h200-0", "13.0.0")["signal"], SIGKILL);
}

// A task whose shim dies is not left running unsupervised: its processes
// (a background child included) die and the server hears at once that it
// was lost, and why.
TEST(AgentTest, ATaskWhoseShimDiesIsKilledAndReportedLost) {
  FakeServer server;
  TempDir dir;
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  const std::string pids = dir.path() + "/bg.pid";
  httplib::Result res = client.Post(
      "/v1/tasks", Launch("6.0.0", {"/bin/sh", "-c",
                                    absl::StrCat("sleep 600 & echo $! > ", pids,
                                                 "; sleep 600")}));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor([&] {
    std::ifstream in(pids);
    pid_t p = 0;
    return static_cast<bool>(in >> p) && p > 0;
  }));
  pid_t background = 0;
  std::ifstream(pids) >> background;
  std::ifstream record(dir.path() + "/tasks/6.0.0.json");
  const json r = json::parse(record, nullptr, false);
  ASSERT_TRUE(r.is_object());
  const pid_t shim = r.value("shim_pid", 0);
  const pid_t main = r.value("pid", 0);
  ASSERT_GT(shim, 0);
  ASSERT_EQ(::kill(shim, SIGKILL), 0);
  ASSERT_TRUE(WaitFor([&] {
    return StateIs(server.LastStatus("h200-0", "6.0.0"), "lost");
  })) << server.LastStatus("h200-0", "6.0.0").dump();
  EXPECT_THAT(server.LastStatus("h200-0", "6.0.0").dump(),
              HasSubstr("supervisor (shim) died"));
  auto dead = [](pid_t pid) {
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string text((std::istreambuf_iterator<char>(stat)),
                     std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    return close == std::string::npos || text[close + 2] == 'Z';
  };
  EXPECT_TRUE(WaitFor([&] { return dead(main) && dead(background); }))
      << "the task's processes outlived its shim";
}

// What the agent keeps (task records with their argv, units, logs, the
// lease) is readable by root and the agent only: directories 0700 (0711 for
// the data dir, which tasks pass through to their checkpoint dir), files
// 0600, also in a data dir that an older agent made 0755.
TEST(AgentTest, KeepsItsFilesPrivate) {
  FakeServer server;
  server.set_fence_after_ms(60000);
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  fs::create_directories(dir.path() + "/tasks");
  ASSERT_EQ(::chmod((dir.path() + "/tasks").c_str(), 0755), 0);
  std::unique_ptr<Agent> agent = StartAgent(BaseOptions(server, dir.path()));
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(WaitFor([&] { return agent->Registered("h200-0"); }));
  AgentClient client(*agent);
  httplib::Result res = client.Post(
      "/v1/tasks",
      Launch("5.0.0", {"/bin/sh", "-c", "echo secret-argv; echo err >&2"},
             json::object(), 2));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 201) << res->body;
  ASSERT_TRUE(WaitFor(
      [&] { return StateIs(server.LastStatus("h200-0", "5.0.0"), "exited"); }));
  ASSERT_TRUE(WaitFor([&] { return fs::exists(dir.path() + "/lease"); }));

  auto mode = [](const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(dir.path()), 0711u);
  for (const char* sub : {"/tasks", "/units", "/logs"}) {
    EXPECT_EQ(mode(dir.path() + sub), 0700u) << sub;
  }
  int files = 0;
  std::set<std::string> kinds;
  for (const auto& entry : fs::recursive_directory_iterator(dir.path())) {
    if (!entry.is_regular_file()) continue;
    // Emulated GPUs' and NICs' stand-in device files are 0666, as
    // /dev/nvidia* and /dev/infiniband/* are.
    if (*entry.path().lexically_relative(dir.path()).begin() == "dev") {
      continue;
    }
    ++files;
    kinds.insert(entry.path().extension().string());
    EXPECT_EQ(mode(entry.path().string()), 0600u) << entry.path();
  }
  // Records, pid and exit files, a unit, logs, the lease.
  EXPECT_GE(files, 10);
  for (const char* ext : {".json", ".pid", ".exit", ".out", ".err"}) {
    EXPECT_TRUE(kinds.contains(ext)) << ext;
  }
}

}  // namespace
}  // namespace loom
