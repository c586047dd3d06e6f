#pragma once

// The verbs about datasets (docs/cli.md, docs/datasets.md): `loom dataset
// add NAME SOURCE [--description D]` names a source for job specs (`data:
// [{dataset: NAME}]`), `loom dataset rm NAME` forgets the name, and `loom
// dataset list` (or `loom datasets`) shows each dataset with what its
// tasks' fills took: hit rate, bytes from the cold store and from peers,
// mean fill time, and the nodes that hold its last version.

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom dataset list` table: NAME SOURCE VERSION NODES STARTS HIT%
// COLD PEER FILL, a row per dataset (named, or used by a job without a
// name: NAME "-").
std::string FormatDatasetTable(const nlohmann::json& datasets);

namespace cli {

void AddDatasetVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is a dataset verb: its exit code, else nullopt.
std::optional<int> RunDatasetVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
