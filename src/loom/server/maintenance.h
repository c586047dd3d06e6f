#pragma once

// Rolling maintenance (docs/maintenance.md): a few nodes at a time, cordon a
// node, move its jobs off, run a command on it through its agent (the
// upgrade), wait until it is back, healthy and on its pool's declared
// stack, return it to service, and go on; as the GPU Operator's upgrade
// controller (maxParallelUpgrades, maxUnavailable, drain timeout) and
// Slurm's `scontrol reboot ASAP nextstate=RESUME`.
//
// `Maintenance` is one such run, as stored (`/maintenance/<id>`), and
// `StepMaintenance` its state machine: a pure function of the run, what the
// controller knows of each of its nodes and the time, which says what to do
// to the nodes. The controller (controller_maintenance.cc) does it and
// stores the run whenever it changed, so that a server restarted half-way
// carries on where it was.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

struct MaintenanceSettings {
  // The nodes, in the order given (a pool's: the spec's order); `pool` is
  // the pool they came from, "" when named one by one.
  std::string pool;
  std::vector<std::string> nodes;
  // Run with `/bin/sh -c` on each node by its agent.
  std::string command;
  // Nodes per batch: a batch starts when the one before has ended.
  int batch = 1;
  // Nodes of the set out of service at once, for whatever reason (in
  // maintenance, failed, down, cordoned): a node of the batch waits while
  // as many are out.
  int max_unavailable = 1;
  // Zero: a node's jobs are moved off at once (checkpoint signal, then
  // queued again); else they have this long to end by themselves first.
  absl::Duration drain_timeout = absl::ZeroDuration();
  // After the command, how long the node has to be back, healthy and on
  // its pool's stack.
  absl::Duration ready_timeout = absl::Minutes(10);
  // A failed node stops the run (true) or the run goes on without it.
  bool stop_on_failure = true;
};

// One node of a run.
struct MaintenanceNode {
  enum class Phase {
    kPending,   // its turn has not come
    kDraining,  // cordoned; its jobs are moving off
    kRunning,   // the command runs on it
    kChecking,  // the command ended; waiting for the node to be ready
    kDone,      // back in service
    kFailed,    // out of service, cordoned (an operator looks at it)
    kSkipped,   // never started (the run was aborted)
  };
  std::string name;
  int batch = 0;  // 1-based; 0 until its batch starts
  Phase phase = Phase::kPending;
  absl::Time since = absl::InfinitePast();  // of the phase
  std::optional<int> exit_code;
  std::string message;  // for people
  std::string output;   // the end of the command's output, when it failed
  // The node's mode before the run cordoned it, put back at the end.
  bool was_cordoned = false;
  bool was_draining = false;
  std::string was_reason;
  // When the command was last sent to the agent (sent again, under the
  // same id, while no report of it comes).
  absl::Time sent = absl::InfinitePast();
};

const char* PhaseName(MaintenanceNode::Phase phase);

struct Maintenance {
  enum class State { kRunning, kPaused, kFailed, kAborted, kDone };
  int64_t id = 0;
  State state = State::kRunning;
  std::string reason;
  std::string author;
  absl::Time created = absl::InfinitePast();
  absl::Time updated = absl::InfinitePast();
  std::optional<absl::Time> ended;
  MaintenanceSettings settings;
  int batch_current = 0;  // 1-based; 0 before the first
  std::vector<MaintenanceNode> nodes;

  int batches_total() const;
  // The agent's id of the command on `node`: "maint-<id>-<node>".
  std::string CommandId(const std::string& node) const;
  // A node of it is draining, running or checking.
  bool InFlight() const;
  // Running or paused, or ended with a node still in flight: no other run
  // may start.
  bool Active() const;
};

const char* StateName(Maintenance::State state);

// What the controller knows of one node of a run, at a step.
struct MaintenanceFacts {
  bool known = false;  // still in the cluster
  bool up = false;     // registered and heard from (not suspect, not down)
  // What is not right with it: "" when it is healthy and on its pool's
  // declared stack, else e.g. "unhealthy: gpu 3 lost" or "outdated: driver
  // 550.54.15 (pool wants 560.35.03)".
  std::string not_ready;
  int jobs = 0;            // jobs with tasks on it
  int gpus_allocated = 0;  // to order a batch: emptiest first
  // Out of service for a reason of its own (down, cordoned or drained by
  // someone else, unhealthy), counted against `max_unavailable`.
  bool unavailable = false;
  // Its mode now (kept when the run cordons it, to be put back).
  bool cordoned = false;
  bool draining = false;
  std::string mode_reason;
  // The agent's last report of a maintenance command on it.
  std::string report_id;
  std::string report_state;  // running | exited | lost
  std::optional<int> report_exit_code;
  std::string report_output;
};

// What to do to nodes after a step (by name).
struct MaintenanceOps {
  std::vector<std::string> cordon;   // take out of service (drain mode)
  std::vector<std::string> evict;    // move its running jobs off now
  std::vector<std::string> send;     // send it the command
  std::vector<std::string> restore;  // put back the mode it had before
  bool changed = false;              // the run changed: store it
};

// The drain reason a run gives the nodes it takes out of service:
// "maintenance 7 (alice)". A node found drained with its own run's reason
// (the server stopped between draining it and storing the run) was in
// service before: restoring it returns it to service.
std::string MaintenanceDrainReason(const Maintenance& m);

// Advances `m` at `now`; `facts` has one entry per node of `m.nodes`, in
// order.
MaintenanceOps StepMaintenance(Maintenance& m,
                               const std::vector<MaintenanceFacts>& facts,
                               absl::Time now);

// The operator's pause, resume and abort. FailedPrecondition when not
// possible in the run's state. Abort skips the nodes not started and
// returns draining ones to service (their names in `*restore`); nodes whose
// command was sent are followed to their end.
absl::Status PauseMaintenance(Maintenance& m, const std::string& who,
                              absl::Time now);
absl::Status ResumeMaintenance(Maintenance& m, const std::string& who,
                               absl::Time now);
absl::Status AbortMaintenance(Maintenance& m, const std::string& who,
                              absl::Time now,
                              std::vector<std::string>* restore);

// The API's object (docs/api.md); without `node_status` for lists.
nlohmann::json MaintenanceJson(const Maintenance& m, bool with_nodes = true);
// The stored record and back (DataLoss for one that cannot be read).
std::string MaintenanceRecord(const Maintenance& m);
absl::StatusOr<Maintenance> ReadMaintenanceRecord(std::string_view text);

// The settings of a `POST /v1/maintenance` body, with the pool's nodes
// (`pool_nodes`, by pool name) to expand `pool`: InvalidArgument naming the
// field.
absl::StatusOr<MaintenanceSettings> ParseMaintenanceRequest(
    const nlohmann::json& body,
    const std::vector<std::pair<std::string, std::vector<std::string>>>&
        pool_nodes,
    const std::vector<std::string>& all_nodes);

}  // namespace loom
