#pragma once

// The job spec: what a user submits with `loom submit -f job.yaml` and what
// the REST API accepts as a JSON body. The format is documented field by
// field in docs/job-spec.md.

#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/container_spec.h"
#include "loom/core/dataset_spec.h"
#include "loom/core/job.h"
#include "loom/core/job_name.h"

namespace loom {

// The most processes one task may run (`resources.processes_per_task`).
inline constexpr int kMaxProcessesPerTask = 256;

// The least GPU memory a task on a shared GPU may ask for
// (`resources.gpu_share.memory`): below it a CUDA context does not fit, and
// one GPU could be promised to thousands of tasks.
inline constexpr int64_t kMinGpuShareBytes = int64_t{1} << 30;

// The longest user name a job spec or a token may carry.
inline constexpr size_t kMaxUserNameLength = 64;

// True when a job spec may set the environment variable `name` (`env`): a
// shell identifier ([A-Za-z_][A-Za-z0-9_]*) of at most 256 characters, not
// `LOOM_*` (except LOOM_FAKE_SECONDS) and not one of the variables loom sets
// for every task (CUDA_VISIBLE_DEVICES, MASTER_ADDR, MASTER_PORT,
// WORLD_SIZE, RANK, LOCAL_RANK, NODE_RANK, LOCAL_WORLD_SIZE).
bool IsSettableEnvName(std::string_view name);

// True for a project name (also a priority class name) as a job spec and a
// token accept it: 1 to 128 bytes of printable ASCII or UTF-8, no spaces or
// control characters.
bool IsValidProjectName(std::string_view name);

// True for a user name as a job spec (`user`) and a token accept it, the
// portable subset of what useradd and sssd allow: 1 to
// `kMaxUserNameLength` characters of letters, digits, '_', '.', '-' and '@',
// starting with a letter, digit or '_', optionally ending in '$' (a machine
// account), not digits only (it would read as a uid). So never ".", "..",
// "-rf" or a path.
bool IsValidUserName(std::string_view name);

// What the agent does to let a job save its state before it is preempted:
// send `signal` to every task, wait up to `grace`, then SIGKILL.
struct CheckpointSpec {
  std::string dir;  // absolute path, or empty; exported as LOOM_CHECKPOINT_DIR
  int signal = SIGUSR1;
  absl::Duration grace = absl::Seconds(120);

  bool operator==(const CheckpointSpec&) const = default;
};

// How often a failed job is requeued (`max` times, 0: never), waiting
// `backoff` before each retry.
struct RestartSpec {
  int max = 0;
  absl::Duration backoff = absl::Seconds(10);

  bool operator==(const RestartSpec&) const = default;
};

// A job as submitted. Durations are whole milliseconds when parsed.
struct JobSpec {
  std::string name;
  std::string project = "default";
  // Filled by the server from the caller; a spec may set it. Empty: unset.
  std::string user;
  JobKind kind = JobKind::kBatch;
  std::string priority = "normal";  // a priority class of the cluster
  bool preemptible = false;
  // The shape: `tasks` x `gpus_per_task`, or `gpus` in total (then `tasks`
  // and `gpus_per_task` keep their defaults), spread over `nodes` when set.
  int tasks = 1;
  int gpus_per_task = 1;
  int gpus = 0;                     // 0: not given
  int nodes = 0;                    // 0: not given; only with `gpus`
  std::string gpu_model = "any";    // lower case
  int64_t cpus_milli_per_task = 0;  // 0: no CPU requirement
  int64_t memory_bytes_per_task = 0;
  // Part of one GPU per task instead of whole GPUs (docs/job-spec.md):
  // a MIG instance of this profile ("1g.18gb"), or a time-sliced share of
  // this much of one GPU's memory. Empty / 0: whole GPUs.
  std::string mig;
  int64_t gpu_share_bytes = 0;  // 0, or at least kMinGpuShareBytes
  // RDMA NICs each task counts on its node; 0: none counted.
  int nics_per_task = 0;
  // Processes each task runs (torchrun's --nproc-per-node): ranks
  // task x processes_per_task + k, LOCAL_RANK k, all sharing the task's GPUs.
  int processes_per_task = 1;

  // argv of every task; a spec's one-string command becomes
  // {"/bin/sh", "-c", command}.
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string working_dir;  // absolute path, or empty: the agent's default
  // The image every task runs in (docs/images.md); nullopt: a host process.
  // `command` is still required: it replaces the image's Cmd.
  std::optional<ContainerSpec> container;
  // Datasets every task reads (docs/datasets.md): each seen read-only at its
  // `mount`, one version on all of the job's nodes. Empty: none.
  std::vector<DatasetSpec> data;
  std::optional<absl::Duration> time_limit;  // nullopt: none
  CheckpointSpec checkpoint;
  RestartSpec restart;
  // What happens to the job when it is preempted or moved off an unhealthy
  // node: queued again after `backoff`, at most `max` times (-1: no limit,
  // the default; 0: never, the job then fails). Requeues do not use up
  // `restart.max`.
  RestartSpec requeue{-1, absl::ZeroDuration()};
  int cancel_signal = SIGTERM;
  absl::Duration cancel_grace = absl::Seconds(30);
  bool hold = false;  // submitted held: not scheduled until released
  // Hot spares (docs/job-spec.md `spares`, docs/scheduling.md "Hot
  // spares"): whole nodes reserved near the job while it runs, lent to
  // preemptible work, taking a lost node's place at once; 0..kMaxSpares.
  int spares = 0;
  std::map<std::string, std::string> labels;
  // Only nodes whose labels match (loom/core/labels.h `MatchesSelector`):
  // every key with the same value, an empty value matching any. As
  // Kubernetes' nodeSelector; `loom run --constraint KEY=VALUE`.
  std::map<std::string, std::string> node_selector;
  // Jobs this one waits for, in Slurm's `--dependency` syntax
  // (loom/core/job_dependency.h), canonical; empty: none. A job whose
  // dependency can never be met is cancelled when `kill_on_invalid_dep`,
  // else it stays pending (docs/scheduling.md).
  std::string dependency;
  bool kill_on_invalid_dep = false;
  // An array (loom/core/job_array.h): one submission, one job per index,
  // in Slurm's `--array` syntax, canonical; empty: a single job.
  std::string array;

  bool operator==(const JobSpec&) const = default;
};

// Parses a job spec written in YAML or JSON (JSON is read as YAML, so both
// go through one parser). `source` names the document in error messages,
// which are InvalidArgument and read "<source>:<line>:<column>: <field
// path>: <reason>", e.g. "job.yaml:7:18: resources.gpus_per_task: must be
// between 1 and 16, got 32". Unknown fields, repeated fields, tabs used for
// indentation, empty documents and several documents in one text are
// errors. Never throws; any bytes give either a spec or an error.
absl::StatusOr<JobSpec> ParseJobSpec(std::string_view text,
                                     std::string_view source);

// Reads back a spec that `JobSpecToJson` wrote (a stored record): the same
// checks as `ParseJobSpec` except the size of the whole text, which is a
// limit on input. The canonical form of an accepted spec can be longer than
// the text that was accepted (escapes, every field written out), so loading
// must not refuse it.
absl::StatusOr<JobSpec> ParseStoredJobSpec(std::string_view text,
                                           std::string_view source);

// Resolves a spec against `cluster` into what the scheduler sees: the
// priority class's value, the GPU model's id (`any`: `kAnyGpuModel`), and the
// shape (`tasks` x `gpus_per_task`, or `gpus` [over `nodes`] split by
// `ShapeFromTotalGpus` with the model's node size: the largest number of
// GPUs a node of that model has, of any model for `any`). An empty `user`
// becomes "default". Finishes with
// `ValidateJobRequest`. Whether the job could ever fit the cluster is not
// checked here. Errors are InvalidArgument naming the field:
// "resources.gpu_model: the cluster has no 'v100' GPUs (it has h200, a100)".
absl::StatusOr<JobRequest> ToJobRequest(const JobSpec& spec,
                                        const Cluster& cluster, JobId id,
                                        absl::Time submit_time);

// The spec as canonical JSON, for storage: every field written out in a
// fixed order (durations as "120s"-style strings, signals by name, memory as
// an exact byte quantity), so that `ParseJobSpec` reads it back to an equal
// spec. The shape is written as `gpus` [+ `nodes`] when `gpus` > 0 and as
// `tasks` + `gpus_per_task` otherwise. Durations are written to the
// millisecond. Never throws; invalid UTF-8 is replaced.
std::string JobSpecToJson(const JobSpec& spec);

// Parses a signal: a name with or without "SIG" in any case ("SIGTERM",
// "TERM", "sigusr1") or a number from 1 to SIGRTMAX ("15").
absl::StatusOr<int> ParseSignal(std::string_view name);

// The name of `signal` ("SIGUSR1"), or its number as text when it has none.
std::string SignalName(int signal);

}  // namespace loom
