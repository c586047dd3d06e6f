#pragma once

// The flags the client verbs share, registered once here: --server and
// --token-file on every verb, -o on those that print a reply, and the
// check of a job ID argument.

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"

namespace loom::cli {

// Adds the verb `name` to `app` with --server and --token-file, and records
// it in `f->verbs`. Returns it, owned by `app`.
CLI::App* AddVerb(CLI::App& app, JobCommandFlags* f, const std::string& name,
                  const std::string& description);

// Adds --server and --token-file to `verb` (`AddVerb` does for a verb; a
// verb's own subcommands need them too).
void AddServerFlags(CLI::App* verb, JobCommandFlags* f);

// Adds -o/--output, taking one of `formats`, to `verb`.
void AddOutputFlag(CLI::App* verb, JobCommandFlags* f,
                   std::vector<std::string> formats);

// Accepts job IDs as `ParseJobId` does: canonical positive decimals.
CLI::Validator JobIdValidator();
// A job ID or an array element ("12_7").
CLI::Validator JobRefValidator();

}  // namespace loom::cli
