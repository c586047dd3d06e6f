#pragma once

// The client verbs of `loom`: submit, run, release, queue, show, logs,
// cancel, checkpoint, nodes, cordon, uncordon, drain, top, chaos, projects,
// whoami, token, maintain, sacct, report, service. Each talks to the server
// through `ApiClient` (docs/api.md); docs/cli.md documents them for users. This
// is where they are registered and run; the verbs themselves live by resource
// in job_verbs.h, node_verbs.h, cluster_verbs.h, token_verbs.h,
// accounting_verbs.h, service_verbs.h and the others, over the shared parts in
// verb.h (running a verb and making its requests), verb_flags.h, reply_fields.h
// and output_format.h.
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
#include "absl/time/time.h"
#include "loom/cli/run_spec.h"
#include "loom/client/server_config.h"

namespace loom {

// `loom maintain` (maintain_verbs.h): start a rolling maintenance, or
// status|pause|resume|abort one. Numbers and durations are kept as typed so
// that the verb can name the flag when one is bad; "" is not given.
struct MaintainFlags {
  std::string action;  // "" (start), status, pause, resume, abort
  std::string id;      // the action's ID; "": the newest maintenance
  std::string pool;
  std::vector<std::string> nodes;
  std::string batch;
  std::string max_unavailable;
  std::string command;  // --run
  std::string drain_timeout;
  std::string ready_timeout;
  std::string on_failure;
  bool wait = false;   // start --wait
  bool watch = false;  // status -w
};

// `loom sacct` and `loom report usage` (accounting_verbs.h). Times and
// states are kept as typed so that the verb can name the flag when one is
// bad; "" is not given. Their -u/-A are `JobCommandFlags::user`/`project`,
// sacct's -j is `job_refs`.
struct AccountingFlags {
  std::string states;  // sacct -s: loom's or Slurm's names, comma-separated
  std::string since;   // -S
  std::string until;   // -E
  int limit = 0;       // sacct --limit (0: none)
  bool allocations = false;  // sacct -X: accepted, no effect (no steps)
  std::string report;        // report's subcommand: "usage"
  std::string by;            // report usage --by
  std::string per = "all";   // report usage --per
};

// `loom service` (service_verbs.h): apply, list, show, scale, delete, logs.
// `logs` takes `JobCommandFlags::follow` and `stderr_stream` as `loom logs`.
struct ServiceFlags {
  std::string action;  // the subcommand that was parsed
  std::string file;    // apply -f
  std::string name;    // show, scale, delete, logs
  // As typed, so that the verb can name a bad one: scale N, logs --replica
  // (an index into the service's replicas; "": 0).
  std::string replicas;
  std::string replica;
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
  std::string dependency;  // --dependency (-d)
  bool kill_on_invalid_dep = false;
  std::string array;  // --array (-a)
  // run
  RunFlags run;
  // cancel, release (several), show and logs (the first)
  std::vector<int64_t> jobs;
  // As given: job IDs or array elements ("12_7"), made `jobs` before the
  // verb runs (an element's ID asked of the server).
  std::vector<std::string> job_refs;
  // scontrol: its words ("show", "hostnames", LIST)
  std::vector<std::string> scontrol_words;
  bool all = false;  // release --all, queue --all
  // queue
  std::string state;
  std::string project;
  std::string user;
  // run --wait -l, attach -l: output lines led by their rank
  bool label = false;
  // logs
  bool follow = false;
  int task = 0;
  int log_run = -1;  // logs --run
  int process = 0;
  // checkpoint
  int64_t step = -1;  // -1: not given
  bool stderr_stream = false;
  // cordon, uncordon, drain; images --node
  std::string node;
  // nodes --drifted
  bool drifted = false;
  // image pull REF [--pool P | --nodes N1,N2] [--no-wait] [--timeout]
  std::string image_action;
  std::string image_ref;
  std::string image_pool;
  std::vector<std::string> image_nodes;
  bool no_wait = false;
  std::string timeout = "30m";
  // dataset add NAME SOURCE [--description D] | list | rm NAME
  std::string dataset_action;
  std::vector<std::string> dataset_args;
  std::string description;
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

  // plan, apply, rollback: the live revision planned against (-1: not
  // given), rollback --to (0: the one before the live one)
  int64_t spec_revision = -1;
  int64_t rollback_to = 0;

  // maintain
  MaintainFlags maintain;

  // sacct, report usage
  AccountingFlags accounting;

  // service
  ServiceFlags service;

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
// The process's environment, in `environ` order.
std::vector<std::pair<std::string, std::string>> ProcessEnvironment();
// The process's working directory ("/" when it cannot be read).
std::string ProcessWorkingDir();

struct CommandContext {
  GetEnvFn getenv = GetProcessEnv;
  // The whole environment, for `sbatch --export=ALL`.
  std::function<std::vector<std::pair<std::string, std::string>>()>
      environment = ProcessEnvironment;
  // The working directory (`sbatch`'s SLURM_SUBMIT_DIR).
  std::function<std::string()> working_dir = ProcessWorkingDir;
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

}  // namespace loom
