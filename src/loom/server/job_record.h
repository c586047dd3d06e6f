#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"
#include "loom/core/job_spec.h"
#include "loom/server/job_events.h"
#include "loom/server/job_recovery.h"
#include "nlohmann/json.hpp"

namespace loom {

enum class JobState {
  kHeld,       // submitted held; waits for `release`
  kPending,    // in the scheduler's queue
  kRunning,    // tasks launched on their nodes
  kStopping,   // cancel or failure: waiting for every task to exit
  kSucceeded,  // every task exited 0
  kFailed,     // a task failed, was lost, or its node went down
  kCancelled,
};

std::string_view JobStateName(JobState state);
absl::StatusOr<JobState> ParseJobState(std::string_view name);
bool IsFinal(JobState state);

// How the image pull of a launching container task stands, as its node
// reports it (not persisted).
struct TaskPull {
  absl::Time since;  // when the server first heard of the pull
  std::string image;
  std::string phase;  // manifest | layers | unpacking | done ("": unknown)
  int64_t bytes_done = 0;
  int64_t bytes_total = 0;
};

// A task on part of a GPU (docs/scheduling.md "GPU partitions"): its MIG
// instance (profile name and index into the node's profiles, first memory
// slice) with the layout its GPU must have, or its share of the GPU's
// memory. The GPU is the task's one entry of `TaskRecord::gpus`.
struct TaskSlice {
  std::string mig;  // empty: a share
  int mig_profile = -1;
  int mig_start = -1;
  int64_t share_bytes = 0;
  std::vector<std::pair<std::string, int>> layout;  // (profile, start)
};

// One task of a running (or finished) job: where it runs and how it ended.
struct TaskRecord {
  int index = 0;
  std::string node;       // node name
  std::vector<int> gpus;  // GPU indices on the node
  std::optional<TaskSlice> slice;
  std::string task_id;  // "<job>.<index>.<restart>"
  enum class State {
    kLaunching,
    kRunning,
    kExited,
    kLost
  } state = State::kLaunching;
  std::optional<int> exit_code;
  std::optional<int> signal;
  // Not persisted: a launching task whose node pulls its image (the agent
  // accepted the launch with 202, or its heartbeats say `pulling`).
  std::optional<TaskPull> pull;
  // A service replica (docs/services.md): the port its agent gave it (in
  // `PORT`), and whether its readiness probe passes (kept, so that a
  // restarted server serves it at once; the next heartbeat says again),
  // since when (not kept).
  std::optional<int> port;
  bool ready = false;
  std::optional<absl::Time> ready_since;
  // While it runs and is not ready: its agent's reason (not persisted).
  std::string ready_reason;
  // Its datasets' fills are counted (`DatasetCatalog::RecordUse`; not
  // persisted).
  bool data_counted = false;
};

// GPUs in use for a time: `gpus` GPUs from `start` to `end` (one run of a
// job, or the part of it so far).
struct GpuSpan {
  absl::Time start;
  absl::Time end;
  int gpus = 0;
  // Set: the work of [lost_from, end) was lost (goodput, docs/accounting.md):
  // the run ended by a failure, a node loss or a preemption after its last
  // checkpoint (or without one: then `lost_from` is `start`).
  std::optional<absl::Time> lost_from;
};

// Everything the controller persists about a job (as JSON under
// /jobs/<id>); the source of truth across restarts.
// The version of one dataset of a job's current run (docs/datasets.md):
// listed before the run is queued, sent to every task in its launch.
struct JobDataVersion {
  std::string source;
  std::string mount;
  std::string version;
  int64_t files = 0;
  int64_t bytes = 0;
};

// A run of a job that ended without finishing (it was restarted or
// requeued): its number (`LOOM_RESTART_COUNT`) and the node of each task,
// so that its logs can still be read (`loom logs JOB --run N`; task i's id
// is `JOB.i.N`).
struct PastRun {
  int run = 0;
  std::vector<std::string> nodes;  // [task index]
};

// How many past runs a job keeps (the newest).
inline constexpr size_t kKeptPastRuns = 5;

// The id of task `index` of run `run` of job `job`: "JOB.INDEX.RUN".
std::string TaskIdOf(JobId job, int index, int run);

struct JobRecord {
  JobId id = 0;
  JobSpec spec;
  JobState state = JobState::kPending;
  std::string reason;  // why it ended (final states) or is stopping
  absl::Time submit_time = absl::UnixEpoch();
  std::optional<absl::Time> start_time;    // when the scheduler placed it
  std::optional<absl::Time> running_time;  // when every task was running
  // A pending job waiting out its restart backoff: queued again at this time.
  std::optional<absl::Time> not_before;
  std::optional<absl::Time> end_time;
  std::optional<int> exit_code;
  int restart_count = 0;
  bool cancel_requested = false;
  // Stopping because the scheduler preempted it or its node failed a health
  // check: queued again once stopped (`spec.requeue`).
  bool preempted = false;
  // The job whose start preempted it last (0: none, or moved off a node).
  JobId preempted_by = 0;
  // An agent refused to launch one of its tasks as specified (HTTP 400: an
  // unknown user, say): the run ends as failed and is not restarted, since
  // it would be refused again.
  bool launch_refused = false;
  // A launch of the current run was answered "not ready" (HTTP 503, an
  // agent that has just registered): the run never started there, so
  // queuing it again is not a requeue (`requeues` stays). Not persisted.
  bool launch_not_ready = false;
  // Times it was requeued after a preemption or a move (`spec.requeue.max`).
  int requeues = 0;
  // Runs ended by losing their node (requeued; at most
  // `kMaxNodeLossRequeues`, then the loss counts as the job's failure).
  int node_losses = 0;
  // An element of an array (docs/scheduling.md, "Arrays"): the array job's
  // ID and this element's index; 0 and -1 otherwise. Its ID is the array's
  // ID plus one plus the index's position in the array.
  JobId array_job = 0;
  int array_index = -1;
  // For an array job itself (spec.array set): the indices cancelled before
  // their elements existed, in `FormatIndexRanges` form.
  std::string array_cancelled;
  // The client's idempotency key of the submission (`Idempotency-Key`), if
  // it sent one: a retried submission with the same key gets this job back.
  std::string request_id;
  // Restarts after failures so far (at most `spec.restart.max`); preemptions
  // do not count. `restart_count` counts every new run (LOOM_RESTART_COUNT).
  int restarts_used = 0;
  // The last checkpoint the job reported (`POST /v1/jobs/{id}/checkpoint`).
  std::optional<absl::Time> checkpoint_time;
  std::optional<int64_t> checkpoint_step;
  int checkpoint_run = 0;  // the restart_count of the run that saved it
  // GPU-seconds of the runs that ended (the current one is added when it
  // ends): the job's accounting.
  double gpu_seconds = 0;
  // Of those, the GPU-seconds of work lost: after the last checkpoint of
  // each run that failed, lost its node or was preempted (goodput:
  // 1 - lost / allocated; docs/accounting.md "Goodput").
  double lost_gpu_seconds = 0;
  // Runs that ended whose GPU-seconds the usage ledger has not taken yet
  // (not persisted): they go to the ledger in the commit that writes the
  // end of the run (`Controller::Persist`, usage_ledger.h).
  std::vector<GpuSpan> unledgered;
  // Placement while running and after: the switch level the gang spans.
  int switch_level = 0;
  std::string switch_name;
  int master_port = 0;
  // Its last recovery (a run lost, the next one's start), phase by phase.
  std::optional<RecoveryTimes> recovery;
  // Hot spares (`spec.spares`, docs/scheduling.md): the nodes the scheduler
  // holds for the job while it runs (as of its last write), and, while it
  // waits to run again after losing a node, the node of each task of the
  // run that ended ("" for a lost one). The scheduler gets both back on a
  // requeue and after a restart of the server (`JobRequest::last_nodes`,
  // `spare_nodes`), so the next run starts on the survivors and spares.
  std::vector<std::string> spare_nodes;
  std::vector<std::string> last_nodes;
  // The versions of `spec.data` for the current run, one per dataset;
  // listed again each time the job is queued.
  std::vector<JobDataVersion> data_versions;
  // A replica of a service (docs/services.md): the service's name, the
  // revision it runs (`ReplicaTemplateDigest`), the probes its launch
  // carries, and since when it is drained from the balancer.
  std::string service;
  std::string revision;
  nlohmann::json replica_probes;
  std::optional<absl::Time> drain_since;
  std::vector<TaskRecord> tasks;
  // The runs before the current one that ended unfinished, oldest first, at
  // most `kKeptPastRuns`.
  std::vector<PastRun> past_runs;
  // Bounded: the last `JobEvents::kMaxJobEvents`, repeats coalesced.
  JobEvents events;

  void AddEvent(absl::Time t, std::string message, std::string_view kind = {}) {
    events.Add(t, std::move(message), kind);
  }
};

// How many runs of a job loom queues again after losing their node, as
// Slurm's MaxBatchRequeue: a job that takes its node down each time it runs
// must not go round the cluster for ever. Past it, a loss is the job's
// failure (its restart policy decides).
inline constexpr int kMaxNodeLossRequeues = 5;

// The most grace the other tasks of a gang get from their stop signal when
// one of its tasks is lost: the run cannot go on without it, and they may
// hang in a collective with it (docs/fault-tolerance.md).
inline constexpr absl::Duration kLostGangGrace = absl::Seconds(3);

// Whether the task may still run and write output: launching or running.
bool TaskLive(const TaskRecord& t);

// GPU-seconds of the job's current run up to `now` (0 when not started).
double CurrentRunGpuSeconds(const JobRecord& job, absl::Time now);
// The job's current run up to `now` as a span (nullopt when not started).
std::optional<GpuSpan> CurrentRunSpan(const JobRecord& job, absl::Time now);
// The current run of `job` ends at `now`: its GPU-seconds are the job's
// (`gpu_seconds`, and `unledgered` for the usage ledger). Unless
// `work_kept` (it succeeded, or the user cancelled it), its work after the
// run's last checkpoint is lost (`lost_gpu_seconds`, `GpuSpan::lost_from`).
void ChargeRun(JobRecord& job, absl::Time now, bool work_kept);
// The job's goodput so far, for the API: {"gpu_seconds", "lost_gpu_seconds",
// "ratio"} (ratio null before any GPU-second).
nlohmann::json GoodputJson(const JobRecord& job, absl::Time now);

// Whether `run` (a restart count) is `job`'s current run and that run is
// live (running or stopping): what a job token of that run needs. OK, or
// FailedPrecondition saying why not.
absl::Status CheckLiveRun(const JobRecord& job, int64_t run);

// The storage form of the record under `JobKey`, without the job's history
// (its events and checkpoint, stored apart: job_events_store.h).
// `FromJson` still reads a history embedded by older versions. `FromJson`
// rejects documents that are not a job record
// with InvalidArgument (a corrupt store entry is reported, never crashes).
nlohmann::json JobRecordToJson(const JobRecord& job);
absl::StatusOr<JobRecord> JobRecordFromJson(const nlohmann::json& json);

// RFC 3339 UTC with milliseconds: "2026-11-29T19:40:00.123Z".
std::string FormatTimestamp(absl::Time t);
absl::StatusOr<absl::Time> ParseTimestamp(std::string_view text);

// The store key of a job: "/jobs/" + 20-digit zero-padded id, so that key
// order is id order.
std::string JobKey(JobId id);

// Filters of a job listing; empty means any.
struct JobQuery {
  std::vector<JobState> states;
  std::string project;
  std::string user;
  int limit = 0;
};
// Whether `job` passes the filters of `query` (all but `limit`).
bool JobMatches(const JobQuery& query, const JobRecord& job);

// A job as the API shows it (docs/api.md, `GET /v1/jobs/{id}`): `reason` is
// the human-readable state reason, `shape` the scheduler's view of the job
// (null: derived from the spec), `host_of` the host of a node's agent ("" if
// unknown).
nlohmann::json JobApiJson(
    const JobRecord& job, const Cluster& cluster, const std::string& reason,
    const JobShape* shape,
    const std::function<std::string(const std::string& node)>& host_of);

}  // namespace loom
