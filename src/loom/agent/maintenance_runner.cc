#include "loom/agent/maintenance_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/json_values.h"
#include "loom/agent/task_files.h"
#include "loom/common/atomic_file.h"

extern char** environ;

namespace loom {
namespace {

using json = nlohmann::json;

// The wrapper: runs the command ($1) and writes its exit code to the result
// file ($2) through a rename, so that the file is whole or absent.
constexpr char kMaintenanceWrapperScript[] =
    "/bin/sh -c \"$1\"; echo $? > \"$2.tmp\" && mv -f \"$2.tmp\" \"$2\"";

absl::Status MaintenanceErrno(int error, const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(error)));
}

// Starts the wrapper of maintenance `id` of node `node_name` (root `root`):
// its own session, cwd `root`, stdin /dev/null, stdout and stderr appended
// to the log, default signal handling and an empty signal mask (the agent
// blocks its stop signals), no descriptor of the agent's but 0-2.
absl::StatusOr<pid_t> SpawnMaintenanceWrapper(const std::string& node_name,
                                              const std::string& root,
                                              const std::string& id,
                                              const std::string& command) {
  const std::string log_path = MaintenanceLogPath(root, id);
  const int log_fd =
      ::open(log_path.c_str(),
             O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (log_fd < 0) {
    return MaintenanceErrno(errno, absl::StrCat("cannot open ", log_path));
  }
  std::vector<std::string> env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    if (absl::StartsWith(*e, "LOOM_NODE=") ||
        absl::StartsWith(*e, "LOOM_MAINTENANCE_ID=")) {
      continue;
    }
    env.emplace_back(*e);
  }
  env.push_back(absl::StrCat("LOOM_NODE=", node_name));
  env.push_back(absl::StrCat("LOOM_MAINTENANCE_ID=", id));
  std::vector<char*> envp;
  envp.reserve(env.size() + 1);
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string result = MaintenanceResultPath(root, id);
  const char* argv[] = {"/bin/sh",
                        "-c",
                        kMaintenanceWrapperScript,
                        "loom-maintenance",
                        command.c_str(),
                        result.c_str(),
                        nullptr};

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 1);
  posix_spawn_file_actions_adddup2(&actions, log_fd, 2);
  posix_spawn_file_actions_addchdir_np(&actions, root.c_str());
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, "/bin/sh", &actions, &attr,
                             const_cast<char**>(argv), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    const std::string line =
        absl::StrCat("loom agent: cannot start /bin/sh in ", root, ": ",
                     std::strerror(rc), "\n");
    (void)!::write(log_fd, line.data(), line.size());
    ::close(log_fd);
    return MaintenanceErrno(rc, absl::StrCat("cannot start /bin/sh in ", root));
  }
  ::close(log_fd);
  return pid;
}

std::string MaintenanceExitText(const std::optional<int>& code) {
  return code ? absl::StrCat(*code) : "null";
}

}  // namespace

MaintenanceRunner::MaintenanceRunner(MaintenanceRunnerOptions options,
                                     const AgentLog& log)
    : options_(std::move(options)), log_(log) {}

MaintenanceRunner::~MaintenanceRunner() = default;

absl::Time MaintenanceRunner::Now() const {
  return options_.now ? options_.now() : absl::Now();
}

void MaintenanceRunner::SaveRecord(const Entry& e) const {
  const std::string path = MaintenanceCurrentPath(e.node->root);
  if (absl::Status s = WriteFileAtomically(
          path, MaintenanceRecordToJson(e.record), kPrivateFileMode);
      !s.ok()) {
    log_("warn", e.node->name,
         absl::StrCat("cannot write ", path, " (", Str(s.message()),
                      "): should this agent stop, its successor may not "
                      "know how maintenance ",
                      e.record.id, " stands"));
  }
}

json MaintenanceRunner::StatusOf(const Entry& e) const {
  MaintenanceStatus s;
  s.id = e.record.id;
  s.state = e.record.state.empty() ? "running" : e.record.state;
  s.exit_code = e.record.exit_code;
  s.started = e.record.started;
  s.ended = e.record.ended;
  // The log is read again only when it grew (or shrank).
  const std::string log = MaintenanceLogPath(e.node->root, e.record.id);
  struct stat st {};
  const int64_t size = ::stat(log.c_str(), &st) == 0 ? st.st_size : -1;
  if (size != e.output_size) {
    e.output = size < 0 ? "" : MaintenanceOutputTail(log);
    e.output_size = size;
  }
  s.output = e.output;
  return MaintenanceStatusJson(s);
}

absl::Status MaintenanceRunner::Recover(AgentNode& node) {
  const std::string path = MaintenanceCurrentPath(node.root);
  absl::StatusOr<std::string> text = agent_internal::ReadWholeFile(path);
  if (!text.ok()) {
    if (text.status().code() == absl::StatusCode::kNotFound) {
      return absl::OkStatus();
    }
    return text.status();
  }
  absl::StatusOr<MaintenanceRecord> record = MaintenanceRecordFromJson(*text);
  if (!record.ok()) {
    const std::string aside = path + ".bad";
    const bool moved = ::rename(path.c_str(), aside.c_str()) == 0;
    log_("warn", node.name,
         absl::StrCat("ignoring ", path, ": ", Str(record.status().message()),
                      moved ? absl::StrCat(" (moved to ", aside, ")") : ""));
    return absl::OkStatus();
  }
  Entry e;
  e.node = &node;
  e.record = *std::move(record);
  if (e.record.state.empty()) {
    const std::string result = MaintenanceResultPath(node.root, e.record.id);
    absl::Time written;
    absl::StatusOr<int> code = ReadMaintenanceResult(result, &written);
    std::string why;
    if (code.ok()) {
      e.record.state = "exited";
      e.record.exit_code = *code;
      e.record.ended = written;
    } else if (code.status().code() == absl::StatusCode::kNotFound &&
               e.record.pid > 0 &&
               agent_internal::ProbeProcess(e.record.pid,
                                            e.record.start_ticks) ==
                   agent_internal::ProcessStatus::kAlive) {
      log_("info", node.name,
           absl::StrCat("maintenance ", e.record.id, " still runs (pid ",
                        e.record.pid, "); watching it again"));
    } else {
      e.record.state = "lost";
      e.record.ended = Now();
      why = code.status().code() != absl::StatusCode::kNotFound
                ? Str(code.status().message())
            : e.record.pid == 0
                ? "the agent stopped while starting it"
                : absl::StrCat("its process (pid ", e.record.pid,
                               ") is gone and left no result");
    }
    if (!e.record.state.empty()) {
      absl::MutexLock lock(&mu_);
      SaveRecord(e);
    }
    if (!e.record.state.empty()) {
      log_("info", node.name,
           absl::StrCat("maintenance ended: id=", e.record.id,
                        " state=", e.record.state,
                        " exit_code=", MaintenanceExitText(e.record.exit_code),
                        why.empty() ? " (while the agent was away)"
                                    : absl::StrCat(" (", why, ")")));
    }
  }
  absl::MutexLock lock(&mu_);
  entries_[node.name] = std::move(e);
  return absl::OkStatus();
}

absl::StatusOr<MaintenanceRunner::StartResult> MaintenanceRunner::Start(
    AgentNode& node, const std::string& id, const std::string& command) {
  if (!ValidMaintenanceId(id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("id: must be 1 to ", kMaxMaintenanceIdLength,
                     " letters, digits, '.', '_', ':' or '-'"));
  }
  if (command.empty() || command.size() > kMaxMaintenanceCommandBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("command: must be a shell command of 1 byte to ",
                     kMaxMaintenanceCommandBytes / 1024, " KiB"));
  }
  if (command.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError("command: must not contain NUL");
  }
  StartResult out;
  {
    absl::MutexLock lock(&mu_);
    auto it = entries_.find(node.name);
    if (it != entries_.end()) {
      const Entry& latest = it->second;
      if (latest.record.id == id) {
        out.status = StatusOf(latest);
        return out;
      }
      if (latest.record.state.empty()) {
        return absl::AlreadyExistsError(absl::StrCat(
            "maintenance '", latest.record.id, "' is running on node ",
            node.name, " (since ", FormatMaintenanceTime(latest.record.started),
            "); a node runs one command at a time"));
      }
    }
    struct stat st {};
    if (::lstat(MaintenanceLogPath(node.root, id).c_str(), &st) == 0 ||
        ::lstat(MaintenanceResultPath(node.root, id).c_str(), &st) == 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("maintenance '", id, "' already ran on node ", node.name,
                       " (its log is ", MaintenanceLogPath(node.root, id),
                       "); a new command needs a new id"));
    }
    if (absl::Status s =
            EnsureDirectory(MaintenanceDir(node.root), kPrivateDirMode);
        !s.ok()) {
      return absl::InternalError(Str(s.message()));
    }
    Entry e;
    e.node = &node;
    e.record.id = id;
    e.record.command = command;
    e.record.started = Now();
    // Kept before the command starts: should this agent die now, its
    // successor knows the id, and never runs it again.
    if (absl::Status s = WriteFileAtomically(MaintenanceCurrentPath(node.root),
                                             MaintenanceRecordToJson(e.record),
                                             kPrivateFileMode);
        !s.ok()) {
      return absl::InternalError(Str(s.message()));
    }
    absl::StatusOr<pid_t> pid =
        SpawnMaintenanceWrapper(node.name, node.root, id, command);
    if (!pid.ok()) {
      e.record.state = "lost";
      e.record.ended = Now();
      SaveRecord(e);
      entries_[node.name] = std::move(e);
      log_("warn", node.name,
           absl::StrCat("maintenance ", id,
                        " could not start: ", Str(pid.status().message())));
      return pid.status();
    }
    e.record.pid = *pid;
    e.record.start_ticks = agent_internal::ProcStartTicks(*pid).value_or(0);
    e.own_child = true;
    SaveRecord(e);
    Entry& stored = entries_[node.name];
    stored = std::move(e);
    out.status = StatusOf(stored);
    out.started = true;
  }
  log_("info", node.name,
       absl::StrCat("maintenance started: id=", id,
                    " command=", Dump(json(command))));
  if (options_.on_change) options_.on_change(node);
  return out;
}

std::optional<json> MaintenanceRunner::Status(const AgentNode& node) const {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(node.name);
  if (it == entries_.end()) return std::nullopt;
  return StatusOf(it->second);
}

int MaintenanceRunner::Running() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [name, e] : entries_) n += e.record.state.empty();
  return n;
}

MaintenanceRunner::EndSeen MaintenanceRunner::Check(const Entry& e) {
  EndSeen end;
  const std::string result = MaintenanceResultPath(e.node->root, e.record.id);
  absl::Time written;
  if (e.own_child) {
    // Ours: it ended when it can be reaped (the result is written before).
    int status = 0;
    const pid_t w = ::waitpid(e.record.pid, &status, WNOHANG);
    if (w == 0 || (w < 0 && errno == EINTR)) return end;
    end.ended = true;
    absl::StatusOr<int> code = ReadMaintenanceResult(result, &written);
    if (code.ok()) {
      end.exit_code = *code;
      end.ended_at = written;
    } else {
      end.ended_at = Now();
      end.why_lost =
          code.status().code() != absl::StatusCode::kNotFound
              ? Str(code.status().message())
          : w == e.record.pid
              ? absl::StrCat("its wrapper shell ",
                             agent_internal::DescribeWaitStatus(status),
                             " without writing a result")
              : "its wrapper shell is gone without writing a result";
    }
    return end;
  }
  // An earlier agent's: the result, else whether its process still runs.
  for (int pass = 0; pass < 2; ++pass) {
    absl::StatusOr<int> code = ReadMaintenanceResult(result, &written);
    if (code.ok()) {
      end.ended = true;
      end.exit_code = *code;
      end.ended_at = written;
      return end;
    }
    if (code.status().code() != absl::StatusCode::kNotFound) {
      end.ended = true;
      end.ended_at = Now();
      end.why_lost = Str(code.status().message());
      return end;
    }
    // Gone: read the result once more, written just before it exited.
    if (pass == 0 &&
        agent_internal::ProbeProcess(e.record.pid, e.record.start_ticks) ==
            agent_internal::ProcessStatus::kAlive) {
      return end;
    }
  }
  end.ended = true;
  end.ended_at = Now();
  end.why_lost = absl::StrCat("its process (pid ", e.record.pid,
                              ") is gone and left no result");
  return end;
}

void MaintenanceRunner::Finish(AgentNode& node, const EndSeen& end) {
  // The stack first: the first report that says the command ended carries
  // what it installed.
  if (options_.read_stack) {
    absl::StatusOr<GpuSoftware> software = options_.read_stack(node);
    if (software.ok()) {
      const GpuSoftware before = node.Software();
      if (software->driver != before.driver || software->cuda != before.cuda) {
        log_("info", node.name,
             absl::StrCat("software stack now: driver ", software->driver,
                          ", cuda ", software->cuda, " (was ", before.driver,
                          ", ", before.cuda, ")"));
      }
      node.SetSoftware(*std::move(software));
    } else {
      log_("warn", node.name,
           absl::StrCat("cannot read the software stack again after "
                        "maintenance: ",
                        Str(software.status().message()),
                        "; the node keeps reporting the old one"));
    }
  }
  std::string id;
  std::string state;
  std::optional<int> code;
  {
    absl::MutexLock lock(&mu_);
    Entry& e = entries_[node.name];
    e.record.state = end.exit_code ? "exited" : "lost";
    e.record.exit_code = end.exit_code;
    e.record.ended = end.ended_at;
    e.finishing = false;
    SaveRecord(e);
    id = e.record.id;
    state = e.record.state;
    code = e.record.exit_code;
  }
  log_("info", node.name,
       absl::StrCat(
           "maintenance ended: id=", id, " state=", state,
           " exit_code=", MaintenanceExitText(code),
           end.why_lost.empty() ? "" : absl::StrCat(" (", end.why_lost, ")")));
  if (options_.on_change) options_.on_change(node);
}

void MaintenanceRunner::Poll() {
  std::vector<Entry> running;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [name, e] : entries_) {
      if (!e.record.state.empty() || e.finishing) continue;
      e.finishing = true;  // claimed by this poll
      running.push_back(e);
    }
  }
  for (const Entry& e : running) {
    const EndSeen end = Check(e);
    if (end.ended) {
      Finish(*e.node, end);
      continue;
    }
    absl::MutexLock lock(&mu_);
    entries_[e.node->name].finishing = false;
  }
}

}  // namespace loom
