#pragma once

// The verbs about API tokens: whoami (whose the token in use is) and token
// create, list and revoke (docs/security.md, docs/cli.md).

#include <optional>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"

namespace loom::cli {

// Registers whoami and token on `app`, in the order `loom --help` lists
// them.
void AddTokenVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is one of them: its exit code, else nullopt.
std::optional<int> RunTokenVerb(const Verb& v);

}  // namespace loom::cli
