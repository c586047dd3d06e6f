#pragma once

// `loom sbatch script.sh`: the merged `#SBATCH` and command-line options
// (loom/core/sbatch_script.h) turned into a loom job spec. Every task of the
// job (one per node) runs `loom _batch ...`; node 0's task runs the script,
// the others host the script's `srun` steps. What the batch runtime needs
// that is known at submission travels in the task's argv
// (`BatchInvocation`). Pure functions: no I/O, no clock, no environment;
// the caller passes in the script, the submitting environment and so on.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/core/job_spec.h"
#include "loom/core/sbatch_script.h"

namespace loom {

// The largest script `BuildSbatchJob` accepts, in bytes: it travels in the
// task's argv.
inline constexpr size_t kMaxSbatchScriptBytes = 100'000;

// How `loom _batch` is invoked: everything the batch runtime needs that is
// known at submission.
struct BatchInvocation {
  int ntasks = 1;                      // SLURM_NTASKS
  std::optional<int> ntasks_per_node;  // only when given
  std::optional<int> cpus_per_task;    // only when given
  // Only when the user gave a per-node count (--gpus-per-node/--gres).
  std::optional<int> gpus_per_node;
  std::string job_name;           // SLURM_JOB_NAME
  std::string submit_dir;         // SLURM_SUBMIT_DIR (absolute)
  std::string submit_host;        // SLURM_SUBMIT_HOST
  std::string account;            // SLURM_JOB_ACCOUNT (the project)
  std::string partition;          // SLURM_JOB_PARTITION ("" when none)
  std::string output;             // -o pattern, never empty (default below)
  std::string error;              // -e pattern, "" = with stdout
  std::string script;             // the script's text
  std::vector<std::string> args;  // the script's arguments

  bool operator==(const BatchInvocation&) const = default;
};

// The task's argv: {"loom", "_batch", "--ntasks=4", ["--ntasks-per-node=2"],
// ["--cpus-per-task=8"], ["--gpus-per-node=8"], "--job-name=X",
// "--submit-dir=D", "--submit-host=H", "--account=A", ["--partition=P"],
// "--output=PAT", ["--error=PAT"], "--script", SCRIPT_TEXT, "--", ARGS...}
// (bracketed: only when set; the bracketed strings only when not empty;
// the other strings always, even when empty). Values may contain anything
// (spaces, '=', newlines): each is one argv element, split from its flag at
// the first '='.
std::vector<std::string> BatchInvocationArgv(const BatchInvocation& b);

// Reads back what `BatchInvocationArgv` wrote, from argv[2] on (argv[0],
// "loom", and argv[1], "_batch", are skipped whatever they hold). The round
// trip is exact. Flags may come in any order before "--"; everything after
// "--" is the script's arguments; a missing "--" means no arguments. The
// script is the element after "--script" (or the value of "--script=TEXT").
// A missing --script, an unknown or repeated flag, a flag without its value
// or a number that is not positive is InvalidArgument naming the flag:
// `loom _batch: --ntasks: "x" is not a positive number`.
absl::StatusOr<BatchInvocation> ParseBatchInvocation(
    const std::vector<std::string>& argv);

// What `loom sbatch` knows besides the options.
struct SbatchContext {
  std::string script;  // the script's text
  // Its file name as given ("train.sh", "./jobs/a.sh"), for the default job
  // name.
  std::string script_name;
  std::vector<std::string> args;  // the script's arguments
  std::string submit_dir;         // absolute: loom sbatch's working directory
  std::string submit_host;
  std::string user;  // the submitting user ("" = let the server decide)
  // The submitter's environment, for --export.
  std::vector<std::pair<std::string, std::string>> environment;
  int node_gpus = 0;  // GPUs in a whole node of the cluster; 0 = unknown
};

// The result of `BuildSbatchJob`.
struct SbatchJob {
  JobSpec spec;
  BatchInvocation batch;  // also encoded in spec.command
  std::vector<std::string> warnings;
};

// Builds the job `loom sbatch` submits. Errors are InvalidArgument starting
// with "sbatch: " and naming the option, e.g. `sbatch: -G/--gpus 6 cannot be
// spread evenly over 4 nodes`. The rules:
//
// - The script must start with "#!" (as Slurm requires), hold no NUL byte
//   and be at most kMaxSbatchScriptBytes long. It, its arguments and every
//   other string that travels in spec.command must be UTF-8 text without
//   NUL (a spec is JSON), e.g. `sbatch: -o/--output: not UTF-8 text without
//   NUL`.
// - Nodes N: -N, else ceil(ntasks / ntasks-per-node) when both are given,
//   else 1. -N MIN-MAX allocates exactly MIN nodes (a warning says so).
// - Tasks: -n, else N x --ntasks-per-node (default 1). Fewer tasks than
//   nodes is an error, and so is more than N x --ntasks-per-node when that
//   is given.
// - GPUs per node G (at most one of -G, --gpus-per-node/--gres and
//   --gpus-per-task): --gpus-per-node's count; -G's total / N (it must
//   divide evenly); --gpus-per-task x ntasks / N (ntasks must divide evenly
//   by N); else, with --exclusive and a known node size, the node's GPUs.
//   Else the job asks for no GPUs, an error: loom allocates GPUs and every
//   job needs one. With --exclusive and a known node size, a smaller G
//   becomes the node's GPUs (with a warning). A GPU type becomes
//   spec.gpu_model, lower-cased ("any" when none).
// - spec.gpus = N x G and spec.nodes = N (also for one node); spec.tasks and
//   spec.gpus_per_task keep their defaults (the server splits the GPUs over
//   the nodes, one task per node); spec.processes_per_task = 1.
// - -c C: spec.cpus_milli_per_task = C x 1000 x ceil(ntasks / N) (a loom
//   task is a whole node's share). --mem above 0 (per node, as in Slurm):
//   spec.memory_bytes_per_task; --mem=0 asks for nothing (with a warning).
//   -t above 0: spec.time_limit; 0 (UNLIMITED): none.
// - -p P: spec.node_selector["pool"] = P. -C: terms joined by '&', each KEY
//   or KEY=VALUE (loom/core/labels.h `ParseConstraint`), into
//   spec.node_selector (KEY alone: any value). '|', '[', ']', '*', ',' or an
//   empty term is an error, as is a key given twice with different values
//   or a "pool" term that differs from -p.
// - -A: spec.project; --qos: spec.priority (both checked as
//   `IsValidProjectName`); -a: spec.array, canonical (`FormatArraySpec`);
//   -d: spec.dependency, canonical (`FormatDependency`);
//   --kill-on-invalid-dep: spec.kill_on_invalid_dep; -H: spec.hold.
// - --no-requeue: spec.requeue.max = 0 (the job fails instead of being
//   requeued on preemption or node loss); --requeue or neither: the spec's
//   default.
// - --signal=[B:]SIG@T: spec.checkpoint.signal = SIG, spec.checkpoint.grace
//   = T seconds; "B:" is ignored with a warning (loom signals every process
//   of the job).
// - -D DIR: spec.working_dir = DIR, a relative DIR taken from
//   ctx.submit_dir; "." components, repeated and trailing '/' are tidied
//   and ".." is an error. Without -D: ctx.submit_dir.
// - --export (absent: ALL, as in Slurm): ALL passes each variable of
//   ctx.environment that a job spec may set (`IsSettableEnvName`) except
//   SLURM_* and the shell's own PWD, OLDPWD, SHLVL and _ (the others are
//   skipped silently; a value that is not UTF-8 is skipped with a warning);
//   NONE passes none; a list may start with ALL or NONE as in
//   `SbatchExport`, and its named variables take their given value, else
//   ctx.environment's (a variable not there is skipped with a warning). A named
//   variable that `IsSettableEnvName` refuses, or whose value is not UTF-8, is
//   an error.
// - Job name: -J, which must be `IsValidJobName`; else the basename of
//   ctx.script_name made into one: lower-cased, every run of characters
//   other than [a-z0-9] turned into one '-', trimmed of '-', led by "job-"
//   when it does not start with a letter ("job" when nothing is left), at
//   most 63 characters.
// - spec.kind = batch, spec.user = ctx.user, spec.command =
//   BatchInvocationArgv(batch).
// - batch: -o, else "slurm-%A_%a.out" for an array and "slurm-%j.out"
//   otherwise; -e or ""; the partition or ""; account = spec.project;
//   job_name = spec.name; submit_dir = ctx.submit_dir;
//   gpus_per_node only when --gpus-per-node/--gres was given (its count,
//   also when --exclusive raises G).
// - --parsable is not used here (it changes what the CLI prints).
// - Last, the spec is read back through the spec parser (`ParseJobSpec` of
//   `JobSpecToJson`), the server's judge, so that limits checked only there
//   (a time limit over a year, a grace over a day, an invalid ctx.user, too
//   large a command and environment) are errors here too, reported under
//   the options' names: `sbatch: -t/--time: must be at most ...`.
//
// Warnings name the option without the "sbatch: " prefix:
// `-N/--nodes 2-4: loom allocates exactly 2 nodes`.
absl::StatusOr<SbatchJob> BuildSbatchJob(const SbatchOptions& o,
                                         const SbatchContext& ctx);

}  // namespace loom
