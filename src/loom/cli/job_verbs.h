#pragma once

// The verbs about jobs: submit, run, release, queue, show, logs, cancel and
// checkpoint (docs/cli.md).

#include <optional>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"

namespace loom::cli {

// Registers the job verbs on `app`, in the order `loom --help` lists them.
void AddJobVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is a job verb: its exit code, else nullopt.
std::optional<int> RunJobVerb(const Verb& v);

}  // namespace loom::cli
