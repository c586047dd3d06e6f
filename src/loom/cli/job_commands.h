#pragma once

// The client verbs of `loom`: submit, run, release, queue, show, logs,
// cancel, checkpoint, nodes, cordon, uncordon, drain, projects, chaos. Each
// talks to the server through `ApiClient` (docs/api.md); docs/cli.md documents
// them for users.
//
// Exit codes: 0 success; 1 the request failed at the server or on the
// network; 2 bad usage or a bad input file. `loom run --wait` exits with the
// job's exit code instead (see `WaitExitCode`), or 130 when interrupted.

#include <atomic>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/client/server_config.h"
#include "nlohmann/json.hpp"

namespace loom {

// Flags of `loom run`.
struct RunFlags {
  int gpus = 0;            // -g: GPUs in total
  int nodes = 0;           // --nodes: 0 = let the server choose the shape
  int procs_per_node = 0;  // --procs-per-node: 0 = not given
  std::string project;
  std::string gpu_model;
  std::string name;              // empty: from the command's basename
  std::string time_limit;        // a duration ("2h"), empty: none
  std::vector<std::string> env;  // -e NAME=VALUE
  bool hold = false;
  bool wait = false;
  std::vector<std::string> command;
};

// Flags of all the client verbs; only the fields of the verb that was parsed
// are meaningful.
struct JobCommandFlags {
  std::string server;      // --server URL[,URL]
  std::string token_file;  // --token-file
  std::string output;      // -o: "", json, yaml, wide
  // submit
  std::vector<std::string> files;  // -f, in order
  bool hold = false;
  // run
  RunFlags run;
  // cancel, release (several), show and logs (the first)
  std::vector<int64_t> jobs;
  bool all = false;  // release --all, queue --all
  // queue
  std::string state;
  std::string project;
  std::string user;
  // logs
  bool follow = false;
  int task = 0;
  int process = 0;
  // checkpoint
  int64_t step = -1;  // -1: not given
  bool stderr_stream = false;
  // cordon, uncordon, drain
  std::string node;
  // top
  bool once = false;
  std::string interval = "2s";
  // chaos ACTION TARGET [VALUE]
  std::string chaos_action;
  std::string chaos_target;
  std::string chaos_value;
  // token create|list|revoke [ID]
  std::string token_action;
  std::string token_id;
  std::string token_role = "user";
  std::string token_user;
  std::vector<std::string> token_projects;
  std::string token_ttl;
  bool token_join = false;
  bool token_once = false;  // the default for --join; accepted, no effect
  bool token_reusable = false;
  std::vector<std::string> token_nodes;
  std::string token_node;
  std::string token_description;

  // Filled by `AddJobCommands`: each verb's name and subcommand.
  std::vector<std::pair<std::string, CLI::App*>> verbs;
};

// Registers the client verbs on `app`. `flags` must outlive the parse and
// the run.
void AddJobCommands(CLI::App& app, JobCommandFlags* flags);

// Runs the client verb that `app.parse` selected, with the process's
// environment, stdout and stderr, and Ctrl-C handling for `run --wait`.
// Returns its exit code, or nullopt when no client verb was parsed.
std::optional<int> RunJobCommands(const JobCommandFlags& flags);

// What a verb needs from its surroundings; tests substitute each.
struct CommandContext {
  GetEnvFn getenv = GetProcessEnv;
  std::ostream* out = nullptr;  // required
  std::ostream* err = nullptr;  // required
  std::function<absl::Time()> now = absl::Now;
  // Set (by a signal handler) to make `run --wait` stop waiting; may be null.
  const std::atomic<bool>* interrupted = nullptr;
  absl::Duration poll_interval = absl::Seconds(1);  // `run --wait`
};

// Runs the verb `verb` (a name registered by `AddJobCommands`). Returns the
// exit code.
int RunJobCommand(std::string_view verb, const JobCommandFlags& flags,
                  const CommandContext& context);

// --- Pure parts, exposed for tests. ---

// The job spec JSON that `loom run` submits: `resources.gpus` = N (the
// server splits them into tasks with the node size of the cluster, as
// `ShapeFromTotalGpus` does), `resources.nodes` = K with `--nodes`, and
// `resources.processes_per_task` with `--procs-per-node`. Returns
// InvalidArgument naming the flag for values that are wrong on any cluster
// (-g < 1, N not divisible by K, a bad name, model or time limit); whether
// the shape fits the cluster's nodes is the server's question.
absl::StatusOr<nlohmann::json> BuildRunSpec(const RunFlags& flags);

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

// The `loom queue` table of a `GET /v1/jobs` answer ({"jobs": [...]} or a
// bare list): JOBID NAME USER PROJECT STATE GPUS NODES TIME REASON, plus
// PRIORITY GPU_MODEL SUBMIT before REASON when `wide`.
std::string FormatJobTable(const nlohmann::json& jobs, bool wide,
                           absl::Time now);

// The `loom nodes` table: NAME STATE GPUS ALLOC MODEL ADDRESS JOBS REASON,
// plus POOL LEAF CPUS MEMORY HEARTBEAT before REASON when `wide`.
std::string FormatNodeTable(const nlohmann::json& nodes, bool wide,
                            absl::Time now);

// The `loom top` screen from `GET /v1/nodes` and `GET /v1/jobs` answers:
// totals (GPUs, nodes by state, jobs), a map of every node grouped by leaf
// switch (one character per node: how many of its GPUs are busy, or its
// state), the waiting jobs with their reasons and the largest running jobs
// (at most `rows` each). Lines fit `width` columns.
std::string FormatTop(const nlohmann::json& nodes, const nlohmann::json& jobs,
                      const std::string& server, int width, int rows,
                      absl::Time now);

// The `loom projects` table.
std::string FormatProjectTable(const nlohmann::json& projects);

// The `loom show` description of a job.
std::string FormatJobDetails(const nlohmann::json& job, absl::Time now);

// How far a placement spans: "one node (h200-0)", "one leaf switch
// (leaf0)", "one spine switch (spine1), 3 leaves", or "" without a
// placement.
std::string DescribeSwitchSpan(const nlohmann::json& placement);

// JSON as a YAML document (yaml-cpp emitter); strings that YAML would read
// as another type are quoted.
std::string JsonToYaml(const nlohmann::json& j);

// "45s ago", "12m ago", "3h ago", "2d ago".
std::string FormatAgo(absl::Time t, absl::Time now);

// A run time: "45s", "12m05s", "3h04m", "2d03h".
std::string FormatElapsed(absl::Duration d);

// Lays out rows under a header, each column as wide as its widest cell, two
// spaces apart; the last column is not padded.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

}  // namespace loom
