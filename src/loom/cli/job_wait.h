#pragma once

// Following a job to its end on the terminal, as `srun` does (docs/cli.md):
// `loom run --wait` and `loom attach JOB` print the job's state changes on
// standard error and stream every task's and process's output live (`-l`:
// each line led by its rank), then exit with the job's exit code.

#include <cstdint>
#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "loom/client/api_client.h"
#include "nlohmann/json.hpp"

namespace loom::cli {

// "job 5 is running on h200-0,h200-1", "job 5 is pending: <reason>".
std::string StateLine(const nlohmann::json& job);

// Follows job `id` until it ends: its exit code (`WaitExitCode`). With
// `cancel_on_interrupt` (`run --wait`, as srun) the first Ctrl-C cancels the
// job and the wait goes on until it has ended (a second one leaves at once,
// the default action of SIGINT); else (`attach`) it leaves at once, the job
// running on: 130.
int FollowJob(const Verb& v, ApiClient& client, int64_t id,
              bool cancel_on_interrupt);

// `loom attach JOB [-l]`.
void AddAttachVerb(CLI::App& app, JobCommandFlags* f);
std::optional<int> RunAttachVerb(const Verb& v);

}  // namespace loom::cli
