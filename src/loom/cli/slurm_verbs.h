#pragma once

// Slurm's helper commands that batch scripts call (docs/cli.md, "loom
// scontrol"): `scontrol show hostnames [LIST]`, the usual way a script
// finds its head node.

#include <optional>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"

namespace loom::cli {

void AddSlurmVerbs(CLI::App& app, JobCommandFlags* f);
std::optional<int> RunSlurmVerb(const Verb& v);

}  // namespace loom::cli
