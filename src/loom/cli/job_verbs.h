#pragma once

// The verbs about jobs: submit, run, release, queue, show, logs, cancel and
// checkpoint (docs/cli.md).

#include <cstdint>
#include <optional>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"

namespace loom::cli {

// Registers the job verbs on `app`, in the order `loom --help` lists them.
void AddJobVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is a job verb: its exit code, else nullopt.
std::optional<int> RunJobVerb(const Verb& v);

// What `loom logs JOB` does for job `id`: prints the output of the task,
// process and stream `v.flags` name (`task`, `process`, `stderr_stream`),
// following it with `follow`, on `v.out()`. Other verbs that print a job's
// output (`loom service logs`) call it too.
int PrintJobLogs(const Verb& v, int64_t id);

}  // namespace loom::cli
