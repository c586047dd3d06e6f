#pragma once

// The task runner: launches a node's tasks through its launch steps
// (launch_steps.h), supervises them (the launcher's events), stops them,
// recovers them after an agent restart, and rolls back a launch that failed
// half-way. It owns no state of its own: each node's task table lives in the
// `AgentNode` (guarded by `node.mu`); the runner is the only code that
// changes it.

#include <atomic>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "loom/agent/probe_runner.h"
#include "loom/agent/replica_port.h"
#include "nlohmann/json.hpp"

namespace loom {

struct TaskRunnerOptions {
  // How tasks are stopped by default: this signal, then SIGKILL after the
  // grace.
  int stop_signal = 15;
  absl::Duration stop_grace = absl::Seconds(10);
  LaunchSteps steps;
  // Called (without locks held) when a task of `node` ended, or a service
  // replica became ready or not ready, so that the server hears of it soon.
  std::function<void(AgentNode& node)> on_task_ended;
  // Service replicas (task_replica.cc, docs/agent.md "Service replicas"):
  // the agent's own address (its `--listen` host), where their ports are
  // checked and their probes go; the range their ports come from
  // (`--service-ports`); the prober's threads.
  std::string replica_host = "127.0.0.1";
  PortRange service_ports;
  ProbeRunnerOptions probes;
  // False (fake tasks): no probes run, and a replica is ready while it
  // runs.
  bool run_probes = true;
};

// Thread-safe: launches, stops and polls of one node may run at once (the
// API's threads, the supervise thread, the session's threads).
class TaskRunner {
 public:
  TaskRunner(TaskRunnerOptions options, const AgentLog& log)
      : options_(std::move(options)),
        log_(log),
        ports_(options_.replica_host, options_.service_ports),
        probes_(options_.probes) {}
  ~TaskRunner();

  // Starts probing service replicas (those launched or recovered before
  // are probed from now on). Call it once the parts that `on_task_ended`
  // reaches exist.
  void Start() { probes_.Start(); }

  // Stops the probes and waits for the launches that pull an image (their
  // threads) to end. The nodes must outlive it.
  void Shutdown();

  // The ports of service replicas (tests).
  const ReplicaPortPool& ports() const { return ports_; }
  // Tasks whose probes are registered (tests).
  size_t probed_tasks() const { return probes_.size(); }

  int stop_signal() const { return options_.stop_signal; }
  absl::Duration stop_grace() const { return options_.stop_grace; }

  // Runs the launch steps and starts the task's processes. Returns the
  // task's detailed status. A task whose image the node lacks is accepted
  // at once, its status `pulling`: a thread pulls the image and then starts
  // it; a pull that fails ends the task lost and `refused`, with the
  // reason; a stop while it pulls ends it at once. `InvalidArgument` (with
  // `*field`) or `FailedPrecondition` for a request this node cannot run,
  // `AlreadyExists` for a known task id, the launcher's errors otherwise;
  // after an error nothing of the task is left (or, when a started process
  // cannot be confirmed gone, the task stays, lost, until it is).
  absl::StatusOr<nlohmann::json> Launch(AgentNode& node,
                                        const LaunchRequest& request,
                                        std::string* field);

  // Applies the launcher's events (ended processes) to the task table.
  void Poll(AgentNode& node);

  // Rebuilds the task table from what the launcher recovered and the unit
  // files; unreadable unit files are renamed `.bad`. Errors from the
  // launcher's `Recover`.
  absl::Status Recover(AgentNode& node);

  // Stops task `id` (the API's `POST /v1/tasks/{id}/stop`): `signal`, then
  // SIGKILL after `grace`; a task being launched is stopped once it is.
  // Returns its detailed status; `NotFound` for an unknown task.
  absl::StatusOr<nlohmann::json> Stop(AgentNode& node, const std::string& id,
                                      int signal, absl::Duration grace);

  // Kills every running task of `node` at once (fencing). Returns how many.
  int KillAll(AgentNode& node);

  // The server's orders in a heartbeat answer: `acks` (ended tasks it has
  // recorded: forgotten) and `stops` (tasks to stop; an ended one in
  // `reported` that it does not expect is forgotten).
  void ApplyServerOrders(AgentNode& node, const std::vector<std::string>& acks,
                         const std::vector<std::string>& stops,
                         const std::set<std::string>& reported);

  // The short status of every task (not those being launched), for a
  // heartbeat; appends the ids of ended ones to `*ended_ids`.
  nlohmann::json Statuses(AgentNode& node, std::vector<std::string>* ended_ids);
  // The detailed status of every task of `node` to `*out`.
  void ListDetailed(AgentNode& node, nlohmann::json* out);
  // The detailed status of task `id`; `NotFound` when unknown (or being
  // launched).
  absl::StatusOr<nlohmann::json> Get(AgentNode& node, const std::string& id);
  // Whether process `k` of task `id` has ended (or is not known).
  bool ProcessEnded(AgentNode& node, const std::string& id, int k);
  // Output path of process `k`: "" for an unknown task; `InvalidArgument`
  // when the task has no process `k`.
  absl::StatusOr<std::string> LogPath(AgentNode& node, const std::string& id,
                                      int k, bool stderr_stream);

 private:
  struct PendingLaunch;
  struct Fetcher {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  // The second half of a launch: writes the unit file, starts the
  // processes, rolls back on failure. `accepted`: the launch was answered
  // already (it waited for its image), so a failure ends the task instead.
  absl::StatusOr<nlohmann::json> StartProcesses(AgentNode& node,
                                                PendingLaunch& launch,
                                                bool accepted);
  // On its own thread: the steps' slow work, then the processes.
  void FetchThenStart(AgentNode& node, PendingLaunch& launch,
                      const std::shared_ptr<ImagePullMeter>& meter);
  // Ends a task none of whose processes started: lost, with `reason`.
  void EndUnstartedLocked(AgentNode& node, TaskUnit& unit,
                          const std::string& reason, bool* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // Ends a task that waits for its image, as killed by `signal`.
  void EndPullingLocked(AgentNode& node, TaskUnit& unit, int signal,
                        bool* report) ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  std::string ApplyEvent(AgentNode& node, const TaskEvent& event)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // After a process of `unit` changed: announces the end of the task, or
  // stops the other processes when one failed.
  void AfterChange(AgentNode& node, TaskUnit& unit, bool* report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  void StopLocked(AgentNode& node, TaskUnit& unit, int signal,
                  absl::Duration grace) ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  void ForgetLocked(AgentNode& node, const std::string& task_id)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // Kills what a failed launch started and forgets the task; false when a
  // process could not be confirmed gone (the task then stays, lost).
  bool RollBack(AgentNode& node, const std::string& task_id);
  void Report(AgentNode& node) {
    if (options_.on_task_ended) options_.on_task_ended(node);
  }

  // Service replicas (task_replica.cc). A port for a launch of
  // `port: true`, into `unit` and `ctx`; `Unavailable` when none is free.
  absl::Status AllocatePortLocked(AgentNode& node, TaskUnit& unit,
                                  LaunchContext& ctx)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // Once its processes run: registers the task's probes.
  void StartReplicaLocked(AgentNode& node, TaskUnit& unit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // After a restart: holds the port of a running replica again and probes
  // it.
  void RecoverReplicaLocked(AgentNode& node, TaskUnit& unit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // The task ended (or is forgotten, or rolled back): gives its port back
  // and removes its probes. Idempotent.
  void EndReplicaLocked(AgentNode& node, TaskUnit& unit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(node.mu);
  // A probe's result (on the prober's thread, no lock held).
  void OnProbeReport(AgentNode& node, const std::string& task_id,
                     const ProbeReport& report);

  const TaskRunnerOptions options_;
  const AgentLog& log_;
  absl::Mutex fetch_mu_;
  std::vector<Fetcher> fetchers_ ABSL_GUARDED_BY(fetch_mu_);
  ReplicaPortPool ports_;
  // Last: its threads call back into the runner, so it goes first.
  ProbeRunner probes_;
};

}  // namespace loom
