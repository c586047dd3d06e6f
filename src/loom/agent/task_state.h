#pragma once

// A task as the agent keeps it: one or more processes (`TaskProcess`) that
// make up one task of a job (`TaskUnit`), what the server is told about it
// (`SummarizeTask`, `TaskStatusJson`), and how a signal is named in
// messages. Plain data and pure functions: no locks, no I/O.

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "loom/agent/probe_spec.h"
#include "nlohmann/json.hpp"

namespace loom {

// One process of a task.
struct TaskProcess {
  enum class State { kStarting, kRunning, kExited, kLost };
  std::string launcher_id;
  std::string stdout_path;
  std::string stderr_path;
  State state = State::kStarting;
  pid_t pid = 0;
  int exit_code = 0;  // kExited: 0..255, or -1 when killed by `term_signal`
  int term_signal = 0;
  absl::Time ended_at = absl::InfinitePast();
  std::string reason;

  bool ended() const {
    return state == State::kExited || state == State::kLost;
  }
  bool failed() const {
    return state == State::kLost ||
           (state == State::kExited && (exit_code != 0 || term_signal != 0));
  }
};

struct ContainerLaunch;  // image_step.h

// How a container task's image pull stands while its processes wait for it
// (docs/images.md, "Pulling"): written by the pulling thread, read by
// heartbeats and the API without the node's lock.
struct ImagePullMeter {
  std::string image;  // the reference the user gave
  absl::Time started = absl::InfinitePast();
  std::atomic<int> phase{0};  // image::PullProgress::Phase
  std::atomic<int64_t> bytes_done{0};
  std::atomic<int64_t> bytes_total{0};
  // True while the task's datasets are being cached (data_step.h): the
  // phase is then "dataset" and the bytes are the datasets'.
  std::atomic<bool> dataset_filling{false};
};

// A task as the server sees it: one or more processes.

struct TaskUnit {
  std::string task_id;
  int64_t job_id = 0;
  int64_t task_index = 0;
  std::vector<TaskProcess> procs;
  std::vector<int> gpus;  // GPU indices (for metrics)
  // The MIG instance it runs in ("MIG-..."; mig_step.h); "" for none, or
  // not known (recovered after an agent restart).
  std::string mig_uuid;
  bool launching = false;  // `TaskRunner::Launch` in progress: not reported
  bool stopping = false;
  bool persisted = false;  // has a unit file (unit_file.h)
  bool end_announced = false;
  // Whether a process of it has written output yet (heartbeats say
  // `output`: a recovered run's first progress, docs/fault-tolerance.md);
  // looked for in the first `kOutputChecks` heartbeats only.
  bool output_seen = false;
  int output_checks = 0;
  // The process whose failure this agent learned of first: the cause
  // reported for the task (exit times have only whole seconds).
  std::optional<int> first_failure;
  // A stop asked for while the task was being launched: (signal, grace),
  // applied once the launch is done.
  std::optional<std::pair<int, absl::Duration>> stop_after_launch;
  // A container task's image, held while the unit is (image_step.h).
  std::shared_ptr<const ContainerLaunch> container;
  // Set while the task waits for its image (it is `launching` too): the
  // heartbeats report it `pulling`, with this progress.
  std::shared_ptr<ImagePullMeter> pull;
  // The task's holds on its cached dataset versions (data_step.h).
  std::shared_ptr<const void> data_holds;
  // What filling them took (`LaunchContext::data_report`); null for none.
  nlohmann::json data_report;
  // The launch failed after it was accepted, for a reason another run would
  // meet too (its image cannot be pulled): the processes are lost with the
  // reason and the server fails the job without restarting it.
  bool refused = false;

  // A service replica (`port: true`, docs/agent.md "Service replicas"):
  // its port (0: not a replica), held in the runner's port pool while the
  // task runs, and its probes (task_replica.cc).
  int port = 0;
  std::optional<ProbeSpec> readiness;
  std::optional<ProbeSpec> liveness;
  // When its processes were started (the probes' initial delays count from
  // it); kept in the unit file.
  absl::Time started_at = absl::InfinitePast();
  // The prober's key for its probes (probe_runner.h); 0: none registered.
  uint64_t probe_key = 0;
  // The readiness probe's verdict (unused without one: ready while
  // running), and why it is not ready ("" when it is, or before a first
  // failure).
  bool ready = false;
  std::string not_ready_reason;
  // Set when the agent stopped the task because its liveness probe failed:
  // the start of its final `reason`.
  std::string liveness_failure;
};

// What a task amounts to for the server.
struct TaskSummary {
  std::string state;  // running | exited | lost
  int exit_code = 0;
  int signal = 0;
  std::string reason;
};

// Running while any process runs. Ended: the first failure decides (the one
// this agent saw first, else the earliest by time, then by process index);
// a killed process exits with 128 + its signal; a lost process makes the
// task lost; no failure: exited with 0.
TaskSummary SummarizeTask(const TaskUnit& unit);

// The status of `unit` on node `node`: {task_id, state, exit_code, signal,
// reason}, and with `detailed` also node, job, processes and `stopping`.
// A task waiting for its image is `pulling`, with `pull` {image, phase,
// bytes_done, bytes_total}; one whose launch was refused after it
// was accepted has `refused`.
// A service replica has `port` and `ready` (with `ready_reason` while it
// runs and is not ready); one the agent stopped for failed liveness has
// `liveness_failed` and a `reason` that says so.
nlohmann::json TaskStatusJson(const std::string& node, const TaskUnit& unit,
                              bool detailed);

// "SIGTERM" for 15; "signal N" for a number the C library cannot name.
std::string SignalText(int sig);

}  // namespace loom
