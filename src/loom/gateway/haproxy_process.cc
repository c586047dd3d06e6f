#include "loom/gateway/haproxy_process.h"

#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <map>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/gateway/child_process.h"

namespace loom::gateway {
namespace {

// In the run directory.
constexpr char kConfigFile[] = "haproxy.cfg";
// The candidate `haproxy -c` checks before it replaces haproxy.cfg.
constexpr char kCandidateFile[] = "haproxy.cfg.next";
constexpr char kMasterSocket[] = "master.sock";
constexpr char kLogFile[] = "haproxy.log";

int ParseProcInt(absl::string_view text) {
  int out = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end ? out : -1;
}

}  // namespace

absl::StatusOr<MasterProcs> ParseShowProc(std::string_view text) {
  MasterProcs out;
  enum { kHead, kWorkers, kOld, kOther } section = kHead;
  bool have_master = false;
  for (absl::string_view line :
       absl::StrSplit(absl::string_view(text.data(), text.size()), '\n',
                      absl::SkipEmpty())) {
    if (line == "# workers") {
      section = kWorkers;
      continue;
    }
    if (line == "# old workers") {
      section = kOld;
      continue;
    }
    if (line[0] == '#') {
      if (section != kHead) section = kOther;
      continue;
    }
    std::vector<absl::string_view> f =
        absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (f.size() < 2) continue;
    const int pid = ParseProcInt(f[0]);
    if (pid <= 0) continue;
    if (section == kHead && f[1] == "master") {
      have_master = true;
      out.master_pid = pid;
      if (f.size() > 2) out.reloads = std::max(0, ParseProcInt(f[2]));
      // "<reloads> [failed: <n>]"
      if (f.size() > 4 && f[3] == "[failed:") {
        absl::string_view n = f[4];
        if (!n.empty() && n.back() == ']') n.remove_suffix(1);
        out.failed_reloads = std::max(0, ParseProcInt(n));
      }
    } else if (section == kWorkers && f[1] == "worker") {
      out.workers.push_back(pid);
    } else if (section == kOld && f[1] == "worker") {
      out.old_workers.push_back(pid);
    }
  }
  if (!have_master) {
    return absl::InvalidArgumentError(
        absl::StrCat("show proc: no master line in '",
                     std::string(text.substr(0, 200)), "'"));
  }
  return out;
}

HaproxyProcess::HaproxyProcess(HaproxyProcessOptions options)
    : options_(std::move(options)) {}

HaproxyProcess::~HaproxyProcess() { (void)Stop(); }

std::string HaproxyProcess::config_path() const {
  return options_.run_dir == nullptr ? kConfigFile
                                     : options_.run_dir->PathOf(kConfigFile);
}
std::string HaproxyProcess::master_socket() const {
  return options_.run_dir == nullptr ? kMasterSocket
                                     : options_.run_dir->PathOf(kMasterSocket);
}
std::string HaproxyProcess::log_path() const {
  return options_.run_dir == nullptr ? kLogFile
                                     : options_.run_dir->PathOf(kLogFile);
}

HaproxyRuntime HaproxyProcess::runtime() const {
  return HaproxyRuntime(config_.stats_socket, options_.command_timeout);
}

absl::StatusOr<MasterProcs> HaproxyProcess::ShowProc() const {
  absl::StatusOr<std::string> answer =
      CliExchange(master_socket(), "show proc", options_.command_timeout);
  if (!answer.ok()) return answer.status();
  return ParseShowProc(*answer);
}

std::string HaproxyProcess::LogTail() const {
  std::string tail = options_.run_dir->Tail(kLogFile, 1500);
  while (!tail.empty() && tail.back() == '\n') tail.pop_back();
  return tail.empty() ? "(haproxy.log is empty)"
                      : absl::StrCat("end of ", log_path(), ":\n", tail);
}

absl::Status HaproxyProcess::CheckConfigText(const std::string& text) const {
  const std::string candidate = options_.run_dir->PathOf(kCandidateFile);
  if (auto s = options_.run_dir->WriteFile(kCandidateFile, text, 0600);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<CommandResult> check = RunCommand(
      {options_.binary, "-c", "-q", "-f", candidate}, absl::Seconds(30));
  if (!check.ok()) return check.status();
  if (!check->succeeded()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "haproxy -c refused the config (", candidate, ", ",
        DescribeWaitStatus(check->wait_status), "): ", check->output));
  }
  return absl::OkStatus();
}

absl::Status HaproxyProcess::ClaimSocket(const std::string& name) const {
  if (!options_.run_dir->Exists(name)) return absl::OkStatus();
  const std::string path = options_.run_dir->PathOf(name);
  if (CliExchange(path, "show info", absl::Seconds(1)).ok()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "another haproxy answers on ", path, "; stop it or use another path"));
  }
  return options_.run_dir->Remove(name);
}

absl::Status HaproxyProcess::WaitForWorker(int old_worker, int failed_before,
                                           absl::Time deadline) {
  const HaproxyRuntime rt = runtime();
  absl::Duration pause = absl::Milliseconds(5);
  absl::Status last;
  for (;;) {
    if (absl::Status alive = CheckRunning(); !alive.ok()) return alive;
    absl::StatusOr<MasterProcs> procs = ShowProc();
    int new_worker = 0;
    if (!procs.ok()) {
      last = procs.status();  // the master may be re-executing
    } else if (procs->failed_reloads > failed_before) {
      return absl::FailedPreconditionError(
          "the master reports a failed reload");
    } else {
      for (int pid : procs->workers) {
        if (pid != old_worker) new_worker = pid;
      }
      if (new_worker == 0) {
        last = absl::UnavailableError("no new worker in show proc yet");
      } else if (absl::StatusOr<int> answering = rt.WorkerPid();
                 !answering.ok()) {
        last = answering.status();
      } else if (*answering != new_worker) {
        last = absl::UnavailableError(
            absl::StrCat("stats socket answered by worker ", *answering,
                         ", not the new worker ", new_worker));
      } else {
        worker_pid_ = new_worker;
        return absl::OkStatus();
      }
    }
    if (absl::Now() >= deadline) break;
    absl::SleepFor(std::min(pause, deadline - absl::Now()));
    pause = std::min(pause * 2, absl::Milliseconds(100));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "haproxy's new worker did not answer on ", config_.stats_socket,
      " within ", absl::FormatDuration(options_.ready_timeout),
      " (last: ", last.message(), "); ", LogTail()));
}

absl::Status HaproxyProcess::Start(const HaproxyConfig& config) {
  if (running()) {
    return absl::FailedPreconditionError(
        absl::StrCat("haproxy already runs (master pid ", master_pid_, ")"));
  }
  if (::access(options_.binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("no haproxy executable at ", options_.binary,
                     " (scripts/setup.sh --test installs Debian's haproxy)"));
  }
  if (options_.run_dir == nullptr) {
    return absl::FailedPreconditionError("haproxy: no run directory");
  }
  // HAProxy binds the stats socket as whoever runs it: only in the run
  // directory, where no other user can plant or swap anything.
  const std::string stats_dir = options_.run_dir->path() + "/";
  if (config.stats_socket.substr(0, stats_dir.size()) != stats_dir ||
      config.stats_socket.find('/', stats_dir.size()) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("stats_socket: '", config.stats_socket,
                     "' is not in the run directory ", stats_dir));
  }
  absl::StatusOr<std::string> text = RenderHaproxyConfig(config);
  if (!text.ok()) return text.status();
  if (auto s = ClaimSocket(kMasterSocket); !s.ok()) return s;
  if (auto s = ClaimSocket(config.stats_socket.substr(stats_dir.size()));
      !s.ok()) {
    return s;
  }
  // Before anything is written: a log that is not ours stops the start.
  absl::StatusOr<int> log_fd = options_.run_dir->OpenAppend(kLogFile);
  if (!log_fd.ok()) return log_fd.status();
  absl::Status written = CheckConfigText(*text);
  if (written.ok()) {
    written = options_.run_dir->WriteFile(kConfigFile, *text, 0600);
  }
  if (!written.ok()) {
    ::close(*log_fd);
    return written;
  }
  SpawnOptions spawn;
  spawn.output_fd = *log_fd;
  spawn.terminate_with_parent = options_.terminate_with_parent;
  absl::StatusOr<pid_t> pid =
      Spawn({options_.binary, "-W", "-S", master_socket() + ",mode,600", "-f",
             config_path()},
            spawn);
  ::close(*log_fd);
  if (!pid.ok()) return pid.status();
  master_pid_ = *pid;
  config_ = config;
  config_text_ = *text;
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  absl::Status s =
      WaitForWorker(/*old_worker=*/0, /*failed_before=*/0, deadline);
  if (!s.ok()) {
    absl::Status stopped = Stop();
    (void)stopped;
    return absl::Status(s.code(),
                        absl::StrCat("haproxy did not start: ", s.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> HaproxyProcess::Apply(HaproxyConfig config) {
  if (!running()) {
    return absl::FailedPreconditionError("haproxy is not running");
  }
  absl::StatusOr<std::string> want = ConfigShape(config);
  if (!want.ok()) return want.status();
  absl::StatusOr<std::string> have = ConfigShape(config_);
  if (have.ok() && *have == *want) return false;
  if (auto s = Reload(std::move(config)); !s.ok()) return s;
  return true;
}

absl::Status HaproxyProcess::Reload(HaproxyConfig config) {
  if (absl::Status alive = CheckRunning(); !alive.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("haproxy is not running: ", alive.message()));
  }
  if (auto s = ValidateConfig(config); !s.ok()) return s;
  // Seeds: what the running worker serves, per backend of the new config.
  absl::StatusOr<std::vector<ServerStateRow>> servers =
      runtime().ShowServersState();
  if (!servers.ok()) {
    return absl::UnavailableError(
        absl::StrCat("not reloading: cannot read the running servers: ",
                     servers.status().message()));
  }
  std::map<std::string, std::vector<SeedServer>> ready;
  for (const ServerStateRow& row : *servers) {
    if (row.admin == ServerAdminState::kReady && !row.address.empty()) {
      ready[row.backend].push_back({row.server, row.address});
    }
  }
  for (ServiceFrontend& s : config.services) {
    s.seed_servers = ready[BackendName(s.name)];
  }
  absl::StatusOr<std::string> text = RenderHaproxyConfig(config);
  if (!text.ok()) return text.status();
  if (auto s = CheckConfigText(*text); !s.ok()) return s;
  absl::StatusOr<MasterProcs> before = ShowProc();
  if (!before.ok()) {
    return absl::UnavailableError(
        absl::StrCat("not reloading: master CLI: ", before.status().message()));
  }
  if (auto s = options_.run_dir->WriteFile(kConfigFile, *text, 0600); !s.ok()) {
    return s;
  }
  const int old_worker = worker_pid_;
  // The master closes the connection without an answer once it re-executes;
  // the outcome is read from `show proc` below.
  absl::StatusOr<std::string> sent =
      CliExchange(master_socket(), "reload", options_.command_timeout);
  const HaproxyConfig previous = config_;
  config_ = config;
  absl::Status s = WaitForWorker(old_worker, before->failed_reloads,
                                 absl::Now() + options_.ready_timeout);
  if (s.ok()) {
    config_text_ = *text;
    return s;
  }
  config_ = previous;
  (void)options_.run_dir->WriteFile(kConfigFile, config_text_, 0600);
  return absl::FailedPreconditionError(absl::StrCat(
      "haproxy reload failed (", s.message(),
      sent.ok() ? ""
                : absl::StrCat("; sending reload: ", sent.status().message()),
      "); the previous config stays in force. ", LogTail()));
}

absl::Status HaproxyProcess::CheckRunning() {
  if (!running()) return absl::UnavailableError("haproxy is not running");
  std::optional<int> status = WaitForExit(master_pid_, absl::ZeroDuration());
  if (!status.has_value()) return absl::OkStatus();
  const pid_t pid = master_pid_;
  master_pid_ = 0;
  worker_pid_ = 0;
  return absl::UnavailableError(absl::StrCat("haproxy (master pid ", pid, ") ",
                                             DescribeWaitStatus(*status), "; ",
                                             LogTail()));
}

absl::Status HaproxyProcess::Stop() {
  if (!running()) return absl::OkStatus();
  const pid_t pid = master_pid_;
  // Detect exits without reaping: while the master is a zombie its process
  // group id cannot be reused, so the last kill cannot hit a stranger.
  auto exited = [pid](absl::Duration wait) {
    return WaitForExit(pid, wait, /*reap=*/false).has_value();
  };
  bool done = exited(absl::ZeroDuration());
  if (!done) {
    ::kill(pid, SIGUSR1);
    done = exited(options_.stop_timeout);
  }
  if (!done) {
    ::kill(pid, SIGTERM);
    done = exited(absl::Seconds(3));
  }
  ::kill(-pid, SIGKILL);  // stragglers of the group (workers), or all
  const std::optional<int> status = WaitForExit(pid, absl::Seconds(10));
  master_pid_ = 0;
  worker_pid_ = 0;
  if (!status.has_value()) {
    return absl::InternalError(
        absl::StrCat("haproxy (master pid ", pid, ") did not exit"));
  }
  return done ? absl::OkStatus()
              : absl::DeadlineExceededError(
                    absl::StrCat("haproxy did not stop within ",
                                 absl::FormatDuration(options_.stop_timeout +
                                                      absl::Seconds(3)),
                                 "; killed"));
}

}  // namespace loom::gateway
