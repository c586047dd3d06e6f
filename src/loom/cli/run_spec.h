#pragma once

// The pure parts of `loom run`: the job spec it submits, built from its
// flags, and the exit code that `--wait` ends with.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/job_spec.h"
#include "nlohmann/json.hpp"

namespace loom {

// Flags of `loom run`.
struct RunFlags {
  int gpus = 0;  // -g: GPUs in total (with --mig/--gpu-memory: tasks)
  // --mig PROFILE / --gpu-memory QUANTITY: each task on a MIG instance or a
  // share of one GPU (docs/job-spec.md); -g then counts tasks (default 1).
  // nullopt: not given (given empty, `--mig ''`, is an error of that flag).
  std::optional<std::string> mig;
  std::optional<std::string> gpu_memory;
  int nodes = 0;           // --nodes: 0 = let the server choose the shape
  int procs_per_node = 0;  // --procs-per-node: 0 = not given
  std::string project;
  std::string gpu_model;
  std::string name;              // empty: from the command's basename
  std::string time_limit;        // a duration ("2h"), empty: none
  std::vector<std::string> env;  // -e NAME=VALUE
  // --constraint KEY=VALUE or KEY (repeatable): the job's node_selector.
  std::vector<std::string> constraints;
  bool hold = false;
  bool wait = false;
  // --dependency (-d) in Slurm's syntax, and --kill-on-invalid-dep.
  std::string dependency;
  bool kill_on_invalid_dep = false;
  // --array (-a): an array in Slurm's syntax (0-999%10).
  std::string array;
  // The image to run in (--image), its mounts (--mount SRC:DST[:ro]), its
  // working directory (--container-workdir), a writable layer (--writable)
  // and the /dev/shm size (--shm-size, a quantity). All but `image` need
  // `image`.
  std::string image;
  std::vector<std::string> mounts;
  std::string container_workdir;
  bool writable = false;
  std::string shm_size;
  std::vector<std::string> command;
};

// The job spec JSON that `loom run` submits: `resources.gpus` = N (the
// server splits them into tasks with the node size of the cluster, as
// `ShapeFromTotalGpus` does), `resources.nodes` = K with `--nodes`, and
// `resources.processes_per_task` with `--procs-per-node`. Returns
// InvalidArgument naming the flag for values that are wrong on any cluster
// (-g < 1, N not divisible by K, a bad name, model or time limit, a bad
// mount or size); whether the shape fits the cluster's nodes, whether the
// image exists and whether the cluster allows the mounts are the server's
// questions. With `--image` the spec has a `container`.
absl::StatusOr<nlohmann::json> BuildRunSpec(const RunFlags& flags);

// `--dependency` and `--kill-on-invalid-dep` of `loom run` and `loom submit`
// put into `spec` (an empty `dependency` leaves the spec's own). Returns
// InvalidArgument naming the flag for a dependency that does not parse.
absl::Status ApplyDependencyFlags(std::string_view dependency,
                                  bool kill_on_invalid_dep, JobSpec* spec);
absl::Status ApplyArrayFlag(std::string_view array, JobSpec* spec);

// A job name from a command: the basename of its first word, lower-cased,
// every run of other characters than [a-z0-9] turned into one '-', led by
// "job-" when it does not start with a letter, at most 63 characters.
std::string DefaultJobName(const std::vector<std::string>& command);

// True for the states a job never leaves: succeeded, failed, cancelled.
bool IsFinalJobState(std::string_view state);

// The exit code of `loom run --wait` for a finished job: 0 when it
// succeeded; else 128 + the signal that killed it (a `signal` field, or a
// negative `exit_code`), else its exit code (capped at 255), looking at the
// job first and then at its tasks in order; 1 when none says.
int WaitExitCode(const nlohmann::json& job);

}  // namespace loom
