#pragma once

// The verbs about nodes: nodes, cordon, uncordon and drain (docs/cli.md).

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom nodes` table: NAME STATE GPUS ALLOC MODEL ADDRESS JOBS REASON,
// plus POOL LEAF CPUS MEMORY HEARTBEAT before REASON when `wide`.
std::string FormatNodeTable(const nlohmann::json& nodes, bool wide,
                            absl::Time now);

namespace cli {

// Registers the node verbs on `app`, in the order `loom --help` lists them.
void AddNodeVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is a node verb: its exit code, else nullopt.
std::optional<int> RunNodeVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
