#pragma once

// Maintenance commands (docs/agent.md, "Maintenance"): during a rolling
// maintenance (`loom maintain`), the server cordons and drains a node, then
// asks its agent (`POST /v1/maintenance`) to run an operator's command, a
// driver upgrade say, and waits for its end and for the node's new stack.
//
// A command runs as `/bin/sh -c CMD` under a wrapper shell that writes its
// exit code to `<id>.result` when it ends (maintenance_files.h), in a
// session of its own, in the node's root directory, stdin /dev/null,
// stdout and stderr appended to `<id>.log`, with the agent's environment
// plus `LOOM_NODE` and `LOOM_MAINTENANCE_ID`. Its end is thus known even
// when the agent died, or was restarted by the command itself, while it
// ran: a new agent's `Recover` finds it exited (its result is there),
// running (watched again) or lost (its process is gone without a result).
// A node runs at most one command at a time, and an id at most once.
//
// When a command ends, the node's software stack is read again
// (`read_stack`) before its end is reported, so that the first report
// saying `exited` carries the new stack.

#include <sys/types.h>

#include <functional>
#include <map>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/maintenance_files.h"
#include "nlohmann/json.hpp"

namespace loom {

struct MaintenanceRunnerOptions {
  // Reads `node`'s software stack again once a command ended; the result
  // replaces `node.Software()`. An error keeps the old one (and is logged).
  // Null: the stack is kept. Called without locks held, on the thread that
  // polls.
  std::function<absl::StatusOr<GpuSoftware>(AgentNode& node)> read_stack;
  // Called (without locks held) when a command of `node` started or ended,
  // so that the server hears of it soon.
  std::function<void(AgentNode& node)> on_change;
  // The clock of `started` and `ended` where no file tells; null: absl::Now.
  std::function<absl::Time()> now;
};

// The maintenance commands of every node of an agent.
//
// Thread-safety: thread-safe. `Recover` of a node comes before any other
// call for it. The nodes must outlive the runner.
class MaintenanceRunner {
 public:
  MaintenanceRunner(MaintenanceRunnerOptions options, const AgentLog& log);
  // Commands still running keep running; a new runner's `Recover` finds
  // them.
  ~MaintenanceRunner();
  MaintenanceRunner(const MaintenanceRunner&) = delete;
  MaintenanceRunner& operator=(const MaintenanceRunner&) = delete;

  // Reads what an earlier agent left for `node` (`current`): a command
  // whose result is there is `exited`; one whose process still runs is
  // `running`, and watched by `Poll`; one whose process is gone without a
  // result is `lost`. A `current` that cannot be read is logged and set
  // aside (`current.bad`). Errors only from the file system.
  absl::Status Recover(AgentNode& node);

  struct StartResult {
    nlohmann::json status;  // `MaintenanceStatusJson`
    bool started = false;   // false: `id` is the node's latest already
  };
  // Starts `command` as maintenance `id` on `node`, or returns the status
  // of the node's latest command when it has that id (it never runs
  // twice). `InvalidArgument` for an invalid id or command;
  // `AlreadyExists` when another command runs on the node (its message
  // names it); `FailedPrecondition` when `id` ran on the node before an
  // other one; `Internal` when the command cannot be started (it is then
  // recorded `lost`, so that asking again answers that).
  absl::StatusOr<StartResult> Start(AgentNode& node, const std::string& id,
                                    const std::string& command);

  // The status of `node`'s latest command; nullopt when it never ran one.
  std::optional<nlohmann::json> Status(const AgentNode& node) const;

  // Sees running commands end: reaps the wrapper when this runner started
  // it, reads the result, re-reads the node's stack, records the end in
  // `current`, logs it and calls `on_change`. Called every poll interval
  // (the agent's supervise thread); cheap when nothing runs.
  void Poll();

  // How many commands run now.
  int Running() const;

 private:
  struct Entry {
    AgentNode* node = nullptr;
    MaintenanceRecord record;
    // This runner started the wrapper: it reaps it (`waitpid`).
    bool own_child = false;
    // `Poll` is recording its end.
    bool finishing = false;
    // The output of the last status built, and the log size it was read at
    // (a cache: `StatusOf` fills it).
    mutable int64_t output_size = -1;
    mutable std::string output;
  };
  // What `Poll` found of a running command.
  struct EndSeen {
    bool ended = false;
    std::optional<int> exit_code;  // "exited" with this code; none: "lost"
    absl::Time ended_at;
    std::string why_lost;
  };

  absl::Time Now() const;
  EndSeen Check(const Entry& e);
  void Finish(AgentNode& node, const EndSeen& end);
  // Writes `current` for `e`; logs (does not fail) when it cannot.
  void SaveRecord(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The status of `e`, its output read from the log (or the cache).
  nlohmann::json StatusOf(const Entry& e) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const MaintenanceRunnerOptions options_;
  const AgentLog& log_;

  mutable absl::Mutex mu_;
  // By node name: the node's latest command.
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
