#pragma once

// Slurm batch scripts: the `#SBATCH` directives of a script's text and the
// same options given to `sbatch` on its command line, parsed into plain
// values, merged (the command line wins), and the output/error filename
// patterns (`slurm-%j.out`) expanded. Pure functions: no I/O, no clock, no
// environment; the caller passes in what a pattern needs.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// A GPU count with an optional type, as `-G`, `--gpus-per-node`,
// `--gpus-per-task` (`[type:]N`) and `--gres` (`gpu[:type]:N`) write it.
struct SbatchGpus {
  std::string type;  // empty: any type
  int count = 0;

  bool operator==(const SbatchGpus&) const = default;
};

// `--signal=[B:]SIG[@TIME]`.
struct SbatchSignal {
  bool batch_shell_only = false;  // `B:`: only the batch shell is signalled
  int number = 0;                 // the signal's number (SIGUSR1 is 10)
  int seconds_before_end = 60;    // `@TIME`; Slurm's default is 60

  bool operator==(const SbatchSignal&) const = default;
};

// `--export`: ALL, NONE, or a list of NAME[=VALUE] (which may start with
// ALL or NONE). A list without ALL exports only the named variables.
struct SbatchExport {
  bool all = false;  // the submitting environment is passed on
  // The named variables; no value: its value at submission.
  std::vector<std::pair<std::string, std::optional<std::string>>> variables;

  bool operator==(const SbatchExport&) const = default;
};

// The options loom understands. A field is empty when the option was not
// given, so that `Merge` can tell "not given" from a default.
struct SbatchOptions {
  std::optional<std::string> job_name;        // -J, --job-name
  std::optional<int> nodes;                   // -N, --nodes (the minimum)
  std::optional<int> nodes_max;               // -N MIN-MAX
  std::optional<int> ntasks;                  // -n, --ntasks
  std::optional<int> ntasks_per_node;         // --ntasks-per-node
  std::optional<SbatchGpus> gpus;             // -G, --gpus (job total)
  std::optional<SbatchGpus> gpus_per_node;    // --gpus-per-node, --gres=gpu
  std::optional<SbatchGpus> gpus_per_task;    // --gpus-per-task
  std::optional<int> cpus_per_task;           // -c, --cpus-per-task
  std::optional<int64_t> mem_bytes;           // --mem (0: all of a node's)
  std::optional<int64_t> time_limit_seconds;  // -t, --time (0: no limit)
  std::optional<std::string> partition;       // -p, --partition
  std::optional<std::string> account;         // -A, --account
  std::optional<std::string> qos;             // --qos
  std::optional<std::string> array;           // -a, --array, unparsed
  std::optional<std::string> dependency;      // -d, --dependency, unparsed
  std::optional<std::string> output;          // -o, --output, a pattern
  std::optional<std::string> error;           // -e, --error, a pattern
  std::optional<bool> requeue;                // --requeue / --no-requeue
  std::optional<SbatchSignal> signal;         // --signal
  std::optional<std::string> chdir;           // -D, --chdir
  std::optional<SbatchExport> export_env;     // --export
  std::optional<bool> hold;                   // -H, --hold
  std::optional<bool> exclusive;              // --exclusive (no argument)
  std::optional<std::string> constraint;      // -C, --constraint, unparsed
  std::optional<bool> kill_on_invalid_dep;    // --kill-on-invalid-dep=yes|no
  std::optional<bool> parsable;               // --parsable (no argument)

  bool operator==(const SbatchOptions&) const = default;
};

// Options accepted and ignored with a warning, because ignoring them changes
// nothing about where or how the job runs: --mail-type, --mail-user,
// --comment, --open-mode. Each takes a value (`--opt=value` or the next
// word) that is not checked. Everything else unknown is an error (--nice is
// not here: it would silently lose a priority change).
inline constexpr std::string_view kSbatchIgnoredOptions[] = {
    "mail-type", "mail-user", "comment", "open-mode"};

// A parsed batch script.
struct SbatchScript {
  SbatchOptions options;
  // Human-readable, each naming its line: ignored options, and `#SBATCH`
  // lines after the first command (which Slurm ignores too).
  std::vector<std::string> warnings;
};

// Parses the `#SBATCH` directives of a script's text.
//
// As in Slurm, directives are the lines that start with `#SBATCH` followed
// by whitespace, before the first line that is neither blank nor a comment
// (`#...`, which includes the shebang). Later `#SBATCH` lines are ignored
// with a warning. A directive's text is split into words as a shell would
// for plain quoting ('single', "double", backslash outside single quotes);
// an unquoted `#` that starts a word begins a comment. A line may hold
// several options (`#SBATCH -N 2 -n 8`), each in the forms
// `--opt=value`, `--opt value`, `-Xvalue` or `-X value`. Long options must
// be spelled in full (no getopt abbreviations).
//
// Errors are `InvalidArgument` naming the line (1-based), the option and the
// text: `line 4: --gpus-per-node: "x" is not a number`, `line 3: unknown
// option "--frobnicate"`. The last of a repeated option wins.
absl::StatusOr<SbatchScript> ParseSbatchScript(std::string_view text);

// The result of `ParseSbatchArgs`.
struct SbatchCommandLine {
  SbatchOptions options;
  // The script and its arguments: everything from the first word that is
  // not an option (or after `--`). Empty when none was given.
  std::vector<std::string> script_and_args;
  std::vector<std::string> warnings;  // ignored options
};

// Parses `sbatch`'s command line (without the program name) with the same
// options and rules as `ParseSbatchScript`; errors name the argument
// instead of a line: `argument 2: --nodes: "x" is not a number`.
absl::StatusOr<SbatchCommandLine> ParseSbatchArgs(
    const std::vector<std::string>& argv);

// Each option of `command_line` that was given replaces that of
// `directives`, as in Slurm.
SbatchOptions Merge(const SbatchOptions& directives,
                    const SbatchOptions& command_line);

// Parses Slurm's time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S (all
// non-negative decimal numbers), or UNLIMITED / INFINITE (0, as is "0").
// Returns seconds, or `InvalidArgument` naming the text.
absl::StatusOr<int64_t> ParseSbatchTime(std::string_view text);

// Parses Slurm's `--mem`: a whole number with an optional K, M, G or T
// suffix (binary, case-insensitive; no suffix means M). Returns bytes, or
// `InvalidArgument` naming the text.
absl::StatusOr<int64_t> ParseSbatchMemory(std::string_view text);

// What `ExpandOutputPattern` substitutes.
struct OutputPatternValues {
  uint64_t job_id = 0;
  // For an array task: the array's job id (%A) and the task's index (%a).
  std::optional<uint64_t> array_job_id;
  std::optional<uint32_t> array_task_id;
  std::string job_name;    // %x
  std::string first_node;  // %N, the first node's short host name
  std::string user;        // %u
  int node_index = 0;      // %n, relative to the job
  int task_id = 0;         // %t
};

// Expands Slurm's filename patterns: %j (job id), %A (array job id; the job
// id when not an array), %a (array index; 4294967294 when not an array, as
// Slurm writes it), %x, %N, %u, %n, %t, and %% (a '%'). A number between
// '%' and the letter zero-pads numeric values to that width (`%4a`: 0007);
// it is ignored for text. As in Slurm, a pattern containing a backslash is
// not expanded at all, only its backslashes are removed. Anything else
// (%J, %s, %b, a trailing '%') is kept as written.
std::string ExpandOutputPattern(std::string_view pattern,
                                const OutputPatternValues& v);

}  // namespace loom
