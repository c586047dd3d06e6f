#pragma once

// Helpers shared by the tests of the task launcher and its parts
// (shim_task_launcher_test.cc, shim_start_test.cc, task_setup_test.cc,
// spawn_test.cc, shim_task_test.cc, cgroup_test.cc): temporary directories,
// a fake clock, file and process probes, and a fixture that makes launchers
// on a temporary state directory and tasks that run shell snippets. Shell
// snippets print "ready" once their traps are installed; tests wait for it
// before they send signals.

#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/agent/task_launcher.h"

namespace loom::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "loom_agent_XXXXXX");
    char* made = ::mkdtemp(pattern.data());
    EXPECT_NE(made, nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return path_ + "/" + name;
  }

 private:
  std::string path_;
};

class FakeClock {
 public:
  absl::Time Now() {
    absl::MutexLock lock(&mu_);
    return now_;
  }
  void Advance(absl::Duration d) {
    absl::MutexLock lock(&mu_);
    now_ += d;
  }
  std::function<absl::Time()> AsFunction() {
    return [this] { return Now(); };
  }

 private:
  absl::Mutex mu_;
  absl::Time now_ = absl::FromUnixSeconds(1700000000);
};

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
}

inline bool WaitUntil(const std::function<bool()>& done,
                      absl::Duration timeout = absl::Seconds(5)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (absl::Now() < deadline) {
    if (done()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done();
}

inline bool WaitForText(const std::string& path, const std::string& text) {
  return WaitUntil([&] { return absl::StrContains(ReadFile(path), text); });
}

// Polls until `task_id` has an event; other events are dropped.
inline std::optional<TaskEvent> WaitForEvent(
    TaskLauncher& launcher, const std::string& task_id,
    absl::Duration timeout = absl::Seconds(5)) {
  std::optional<TaskEvent> found;
  WaitUntil(
      [&] {
        for (TaskEvent& e : launcher.Poll()) {
          if (e.task_id == task_id) found = std::move(e);
        }
        return found.has_value();
      },
      timeout);
  return found;
}

inline std::optional<TaskInfo> InfoOf(const TaskLauncher& launcher,
                                      const std::string& task_id) {
  for (const TaskInfo& info : launcher.List()) {
    if (info.task_id == task_id) return info;
  }
  return std::nullopt;
}

inline bool ProcessIsGone(pid_t pid) {
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

inline std::set<std::string> FilesIn(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    out.insert(entry.path().filename().string());
  }
  return out;
}

class TaskLauncherTest : public ::testing::Test {
 protected:
  std::string state_dir() const { return tmp_ / "state"; }

  std::unique_ptr<ShimTaskLauncher> NewLauncher(
      CgroupManager* cgroups = nullptr) {
    ShimTaskLauncherOptions options;
    options.state_dir = state_dir();
    options.cgroups = cgroups;
    options.now = clock_.AsFunction();
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> launcher =
        ShimTaskLauncher::Create(std::move(options));
    EXPECT_TRUE(launcher.ok()) << launcher.status();
    return launcher.ok() ? *std::move(launcher) : nullptr;
  }

  // `/bin/sh -c script` with a minimal environment.
  TaskSpec Shell(const std::string& task_id, const std::string& script) {
    TaskSpec spec;
    spec.task_id = task_id;
    spec.argv = {"/bin/sh", "-c", script};
    spec.env = {
        {"PATH", "/usr/bin:/bin"}, {"HOME", tmp_.path()}, {"LANG", "C"}};
    spec.working_dir = tmp_ / "work";
    spec.stdout_path = Out(task_id);
    spec.stderr_path = Err(task_id);
    return spec;
  }
  std::string Out(const std::string& task_id) const {
    return tmp_ / (task_id + ".out");
  }
  std::string Err(const std::string& task_id) const {
    return tmp_ / (task_id + ".err");
  }

  // Stops a task that a test left running and forgets it.
  void Cleanup(TaskLauncher& launcher, const std::string& task_id) {
    (void)launcher.Stop(task_id, SIGKILL, absl::ZeroDuration());
    WaitForEvent(launcher, task_id);
    (void)launcher.Forget(task_id);
  }

  TempDir tmp_;
  FakeClock clock_;
};

// A fake cgroup v1 tree: memory and cpu hierarchies, the agent in
// /agent/pod in the memory one and at the root of the cpu one.
class FakeCgroupTree {
 public:
  explicit FakeCgroupTree(const std::string& root, bool with_cpu = true)
      : root_(root) {
    std::filesystem::create_directories(root + "/memory/agent/pod");
    WriteFile(root + "/memory/agent/pod/memory.limit_in_bytes", "max");
    WriteFile(root + "/memory/agent/pod/memory.memsw.limit_in_bytes", "max");
    if (with_cpu) {
      std::filesystem::create_directories(root + "/cpu");
      WriteFile(root + "/cpu/cpu.cfs_quota_us", "-1");
    }
    WriteFile(root + "/self", "4:memory:/agent/pod\n2:cpu,cpuacct:/\n");
  }
  std::string self() const { return root_ + "/self"; }

 private:
  std::string root_;
};

}  // namespace loom::testing
