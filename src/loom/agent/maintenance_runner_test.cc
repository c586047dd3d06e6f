// `MaintenanceRunner` (maintenance_runner.h) on emulated nodes, without an
// agent: real `/bin/sh` commands, their exit codes, output and env; an id
// never run twice, one command at a time; a new runner over the same files
// (an agent restart) finding commands exited, lost or still running; and the
// node's stack read again from an `@FILE` before the end is recorded.

#include "loom/agent/maintenance_runner.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/emulated_stack.h"
#include "loom/agent/maintenance_files.h"
#include "loom/agent/task_files.h"
#include "loom/common/atomic_file.h"
#include "loom/common/utf8.h"

namespace loom {
namespace {

using json = nlohmann::json;
using agent_testing::CapturedLog;
using agent_testing::FakeNodes;
using agent_testing::TempDir;
using agent_testing::WaitFor;
using ::testing::HasSubstr;

std::string SlurpForMaintenanceTest(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class MaintenanceRunnerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    nodes_ = FakeNodes(dir_.path(), {"h200-0"}, log_.log());
    ASSERT_NE(nodes_, nullptr);
    node_ = nodes_->nodes().front().get();
  }

  std::unique_ptr<MaintenanceRunner> NewRunner(
      MaintenanceRunnerOptions options = {}) {
    if (!options.on_change) {
      options.on_change = [this](AgentNode&) { ++changes_; };
    }
    auto runner =
        std::make_unique<MaintenanceRunner>(std::move(options), log_.log());
    EXPECT_TRUE(runner->Recover(*node_).ok());
    return runner;
  }

  // Polls until the node's latest command is no longer running; its status.
  json WaitEnded(MaintenanceRunner& runner) {
    json status;
    EXPECT_TRUE(WaitFor(
        [&] {
          runner.Poll();
          std::optional<json> s = runner.Status(*node_);
          if (!s) return false;
          status = *s;
          return status["state"] != "running";
        },
        absl::Seconds(10)))
        << status.dump();
    return status;
  }

  json MustStart(MaintenanceRunner& runner, const std::string& id,
                 const std::string& command) {
    absl::StatusOr<MaintenanceRunner::StartResult> r =
        runner.Start(*node_, id, command);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return json();
    EXPECT_TRUE(r->started);
    return r->status;
  }

  TempDir dir_;
  CapturedLog log_;
  std::unique_ptr<NodeTable> nodes_;
  AgentNode* node_ = nullptr;
  std::atomic<int> changes_{0};
};

TEST_F(MaintenanceRunnerTest, RunsCommandsAndKeepsTheirExitCodes) {
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  EXPECT_EQ(runner->Status(*node_), std::nullopt);
  const json started = MustStart(*runner, "m1", "exit 0");
  EXPECT_EQ(started["id"], "m1");
  EXPECT_EQ(started["state"], "running");
  EXPECT_TRUE(started["exit_code"].is_null());
  EXPECT_TRUE(started["ended"].is_null());
  EXPECT_TRUE(started["started"].is_string());
  EXPECT_EQ(runner->Running(), 1);
  json ended = WaitEnded(*runner);
  EXPECT_EQ(ended["state"], "exited");
  EXPECT_EQ(ended["exit_code"], 0);
  EXPECT_TRUE(ended["ended"].is_string());
  EXPECT_EQ(runner->Running(), 0);

  MustStart(*runner, "m2", "echo failing; exit 3");
  ended = WaitEnded(*runner);
  EXPECT_EQ(ended["id"], "m2");
  EXPECT_EQ(ended["state"], "exited");
  EXPECT_EQ(ended["exit_code"], 3);
  EXPECT_EQ(ended["output"], "failing\n");
  // A command killed by a signal: the shell's 128 + signal.
  MustStart(*runner, "m3", "kill -9 $$");
  EXPECT_EQ(WaitEnded(*runner)["exit_code"], 137);
  EXPECT_GE(changes_.load(), 6);  // each start and each end

  // The audit lines: one at the start, one at the end.
  EXPECT_EQ(log_.LinesWith("maintenance started: id=m2 command="
                           "\\\"echo failing; exit 3\\\""),
            1);
  EXPECT_EQ(log_.LinesWith("maintenance ended: id=m2 state=exited "
                           "exit_code=3"),
            1);

  // The files: the log, the result, and `current` (the latest).
  const std::string mdir = MaintenanceDir(node_->root);
  EXPECT_EQ(SlurpForMaintenanceTest(mdir + "/m2.result"), "3\n");
  struct stat st {};
  ASSERT_EQ(stat(mdir.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(stat((mdir + "/m2.log").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  absl::StatusOr<MaintenanceRecord> record = MaintenanceRecordFromJson(
      SlurpForMaintenanceTest(MaintenanceCurrentPath(node_->root)));
  ASSERT_TRUE(record.ok()) << record.status();
  EXPECT_EQ(record->id, "m3");
  EXPECT_EQ(record->state, "exited");
  EXPECT_EQ(record->exit_code, 137);
}

TEST_F(MaintenanceRunnerTest, OutputTailEnvAndWorkingDirectory) {
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  MustStart(*runner, "env.1",
            "echo \"node=$LOOM_NODE id=$LOOM_MAINTENANCE_ID\"; pwd; "
            "echo to-stderr >&2; read x && echo stdin-had-data; true");
  json ended = WaitEnded(*runner);
  EXPECT_EQ(ended["exit_code"], 0);
  const std::string output = ended["output"];
  EXPECT_THAT(output, HasSubstr("node=h200-0 id=env.1\n"));
  EXPECT_THAT(output, HasSubstr(node_->root + "\n"));
  EXPECT_THAT(output, HasSubstr("to-stderr\n"));
  EXPECT_THAT(output, ::testing::Not(HasSubstr("stdin-had-data")));

  // A long output: its last 2 KiB, valid UTF-8 although the cut falls in
  // a character and an invalid byte is in it.
  MustStart(*runner, "long",
            "printf x; i=0; while [ $i -lt 1500 ]; do printf 'é'; "
            "i=$((i+1)); done; "
            "printf 'a\\377b\\n'; echo END");
  ended = WaitEnded(*runner);
  const std::string tail = ended["output"];
  EXPECT_LE(tail.size(), kMaintenanceOutputBytes);
  EXPECT_GE(tail.size(), kMaintenanceOutputBytes - 4);
  EXPECT_TRUE(IsValidUtf8(tail));
  EXPECT_TRUE(absl::EndsWith(tail,
                             "a\xEF\xBF\xBD"
                             "b\nEND\n"))
      << tail;
  EXPECT_TRUE(absl::StartsWith(tail, "\xC3\xA9")) << tail.substr(0, 8);
}

// A descriptor of the agent's (its listening socket, say) would keep the
// port of an agent the command restarts.
TEST_F(MaintenanceRunnerTest, TheCommandGetsNoDescriptorOfTheAgent) {
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(devnull, 0);
  const int inherited = dup2(devnull, 77);  // not close-on-exec
  close(devnull);
  ASSERT_EQ(inherited, 77);
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  MustStart(*runner, "fds", "ls /proc/$$/fd | tr '\\n' ' '");
  const json ended = WaitEnded(*runner);
  close(inherited);
  EXPECT_EQ(ended["exit_code"], 0);
  const std::vector<std::string> fds = absl::StrSplit(
      absl::StripAsciiWhitespace(ended["output"].get<std::string>()), ' ');
  EXPECT_THAT(fds, ::testing::IsSupersetOf({"0", "1", "2"}));
  EXPECT_THAT(fds,
              ::testing::Not(::testing::Contains(absl::StrCat(inherited))));
}

TEST_F(MaintenanceRunnerTest, AnIdRunsOnceAndANodeOneCommandAtATime) {
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  MustStart(*runner, "upgrade-1", "echo ran >> runs; sleep 0.3");
  // Asked again (a restarted server): its status, not a second run.
  absl::StatusOr<MaintenanceRunner::StartResult> again =
      runner->Start(*node_, "upgrade-1", "echo ran >> runs; sleep 0.3");
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(again->started);
  EXPECT_EQ(again->status["id"], "upgrade-1");
  EXPECT_EQ(again->status["state"], "running");
  // Another while it runs: refused, naming the running one.
  absl::StatusOr<MaintenanceRunner::StartResult> other =
      runner->Start(*node_, "upgrade-2", "true");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_THAT(std::string(other.status().message()), HasSubstr("upgrade-1"));
  EXPECT_EQ(WaitEnded(*runner)["exit_code"], 0);

  again = runner->Start(*node_, "upgrade-1", "echo ran >> runs");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->started);
  EXPECT_EQ(again->status["state"], "exited");
  // After a restart too.
  runner = NewRunner();
  again = runner->Start(*node_, "upgrade-1", "echo ran >> runs");
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->started);
  EXPECT_EQ(again->status["state"], "exited");
  EXPECT_EQ(SlurpForMaintenanceTest(node_->root + "/runs"), "ran\n");

  // The next one may run now; an id older than the latest is refused.
  MustStart(*runner, "upgrade-2", "true");
  EXPECT_EQ(WaitEnded(*runner)["exit_code"], 0);
  other = runner->Start(*node_, "upgrade-1", "echo ran >> runs");
  ASSERT_FALSE(other.ok());
  EXPECT_EQ(other.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(SlurpForMaintenanceTest(node_->root + "/runs"), "ran\n");

  // Bad ids and commands.
  for (const std::string& id :
       {std::string(""), std::string("a/b"), std::string("a b"),
        std::string(129, 'x'), std::string("\xc3\xa9")}) {
    EXPECT_EQ(runner->Start(*node_, id, "true").status().code(),
              absl::StatusCode::kInvalidArgument)
        << id;
  }
  EXPECT_TRUE(ValidMaintenanceId(std::string(128, 'x')));
  EXPECT_TRUE(ValidMaintenanceId("pool-a:2026-11-29.drv_550-1"));
  for (const std::string& command :
       {std::string(""), std::string(64 * 1024 + 1, ' '),
        std::string("true\0x", 6)}) {
    absl::Status s = runner->Start(*node_, "c", command).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(absl::StartsWith(s.message(), "command:")) << s;
  }
}

// A pid that no process has now.
pid_t DeadPidForMaintenanceTest() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  int status = 0;
  waitpid(pid, &status, 0);
  return pid;
}

TEST_F(MaintenanceRunnerTest, ARestartedAgentFindsResultsAndLostCommands) {
  ASSERT_TRUE(EnsureDirectory(MaintenanceDir(node_->root), 0700).ok());
  MaintenanceRecord record;
  record.id = "while-away";
  record.command = "exit 4";
  record.pid = DeadPidForMaintenanceTest();
  record.start_ticks = 1;
  record.started = absl::Now() - absl::Minutes(1);
  ASSERT_TRUE(WriteFileAtomically(MaintenanceCurrentPath(node_->root),
                                  MaintenanceRecordToJson(record))
                  .ok());
  // Its result is there: it exited while no agent ran.
  ASSERT_TRUE(
      WriteFileAtomically(MaintenanceResultPath(node_->root, record.id), "4\n")
          .ok());
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  std::optional<json> status = runner->Status(*node_);
  ASSERT_TRUE(status);
  EXPECT_EQ((*status)["state"], "exited");
  EXPECT_EQ((*status)["exit_code"], 4);
  EXPECT_TRUE((*status)["ended"].is_string());
  EXPECT_EQ(runner->Running(), 0);

  // No result, and its process is gone: lost, for good.
  record.id = "gone";
  ASSERT_TRUE(WriteFileAtomically(MaintenanceCurrentPath(node_->root),
                                  MaintenanceRecordToJson(record))
                  .ok());
  runner = NewRunner();
  status = runner->Status(*node_);
  ASSERT_TRUE(status);
  EXPECT_EQ((*status)["id"], "gone");
  EXPECT_EQ((*status)["state"], "lost");
  EXPECT_TRUE((*status)["exit_code"].is_null());
  EXPECT_EQ(log_.LinesWith("maintenance ended: id=gone state=lost"), 1);
  runner = NewRunner();
  EXPECT_EQ((*runner->Status(*node_))["state"], "lost");
  EXPECT_EQ(log_.LinesWith("maintenance ended: id=gone state=lost"), 1);

  // A record that is no record is set aside.
  ASSERT_TRUE(
      WriteFileAtomically(MaintenanceCurrentPath(node_->root), "{oops").ok());
  runner = NewRunner();
  EXPECT_EQ(runner->Status(*node_), std::nullopt);
  EXPECT_EQ(
      access((MaintenanceCurrentPath(node_->root) + ".bad").c_str(), F_OK), 0);
}

TEST_F(MaintenanceRunnerTest, ARestartedAgentWatchesACommandThatStillRuns) {
  std::unique_ptr<MaintenanceRunner> first = NewRunner();
  MustStart(*first, "long-one", "sleep 0.5; exit 7");
  first.reset();  // the agent stops; the command runs on
  std::unique_ptr<MaintenanceRunner> runner = NewRunner();
  std::optional<json> status = runner->Status(*node_);
  ASSERT_TRUE(status);
  EXPECT_EQ((*status)["state"], "running");
  EXPECT_EQ(runner->Running(), 1);
  const json ended = WaitEnded(*runner);
  EXPECT_EQ(ended["state"], "exited");
  EXPECT_EQ(ended["exit_code"], 7);
  // The wrapper was this test's child (the first runner's): reap it.
  absl::StatusOr<MaintenanceRecord> record = MaintenanceRecordFromJson(
      SlurpForMaintenanceTest(MaintenanceCurrentPath(node_->root)));
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(waitpid(record->pid, nullptr, 0), record->pid);

  // One killed while no agent watched: its process is gone, no result.
  first = NewRunner();
  MustStart(*first, "killed", "sleep 30");
  record = MaintenanceRecordFromJson(
      SlurpForMaintenanceTest(MaintenanceCurrentPath(node_->root)));
  ASSERT_TRUE(record.ok());
  first.reset();
  runner = NewRunner();
  EXPECT_EQ((*runner->Status(*node_))["state"], "running");
  ASSERT_EQ(kill(-record->pid, SIGKILL), 0);  // its whole session
  EXPECT_EQ(waitpid(record->pid, nullptr, 0), record->pid);
  EXPECT_EQ(WaitEnded(*runner)["state"], "lost");
}

TEST_F(MaintenanceRunnerTest, TheStackIsReadAgainBeforeTheEndIsRecorded) {
  const std::string file = dir_.path() + "/driver-version";
  ASSERT_TRUE(WriteFileAtomically(file, "550.54.15\n").ok());
  GpuEmulation emulation = ParseGpuEmulation("8xH200").value();
  ASSERT_TRUE(ResolveEmulatedVersionFlag("--emulate-driver", "@" + file,
                                         &emulation.driver_version,
                                         &emulation.driver_file)
                  .ok());
  EXPECT_EQ(emulation.driver_version, "550.54.15");
  MaintenanceRunnerOptions options;
  options.read_stack = [&](AgentNode& node) -> absl::StatusOr<GpuSoftware> {
    std::vector<std::string> warnings;
    GpuSoftware s =
        RereadEmulatedSoftware(emulation, node.Software(), &warnings);
    for (const std::string& w : warnings) log_.log()("warn", node.name, w);
    absl::SleepFor(absl::Milliseconds(50));  // a slow probe
    return s;
  };
  std::unique_ptr<MaintenanceRunner> runner = NewRunner(std::move(options));
  MustStart(*runner, "drv", absl::StrCat("sleep 0.1; echo 560.35.03 > ", file));
  // A reader that checks what a heartbeat would send, as often as it can:
  // once the command is reported ended, the stack must be the new one.
  std::atomic<bool> stop{false};
  std::atomic<int> stale{0};
  std::thread reader([&] {
    while (!stop.load()) {
      std::optional<json> s = runner->Status(*node_);
      const GpuSoftware software = node_->Software();
      if (s && (*s)["state"] == "exited" && software.driver != "560.35.03") {
        ++stale;
      }
    }
  });
  const json ended = WaitEnded(*runner);
  stop = true;
  reader.join();
  EXPECT_EQ(ended["exit_code"], 0);
  EXPECT_EQ(node_->Software().driver, "560.35.03");
  EXPECT_EQ(node_->Software().cuda, "12.4");
  EXPECT_EQ(stale.load(), 0);

  // A file that holds no version then: the node keeps its stack, and says
  // why.
  MustStart(*runner, "drv-bad", absl::StrCat("echo 'not a version' > ", file));
  EXPECT_EQ(WaitEnded(*runner)["exit_code"], 0);
  EXPECT_EQ(node_->Software().driver, "560.35.03");
  EXPECT_EQ(log_.LinesWith("level=warn node=h200-0 msg=\"--emulate-driver: "
                           "the version file"),
            1);
  EXPECT_EQ(log_.LinesWith("keeps reporting '560.35.03'"), 1);
}

}  // namespace
}  // namespace loom
