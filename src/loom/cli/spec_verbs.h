#pragma once

// The cluster as code (docs/cli.md, docs/cluster-as-code.md): `loom plan -f
// cluster.yaml` shows what applying the spec would change and its effect on
// work (exit 0: no change, 2: changes, 1: an error, as `terraform plan
// -detailed-exitcode`); `loom apply -f cluster.yaml [--revision N]` applies
// it as a new revision; `loom history` lists the revisions; `loom rollback
// [--to N]` applies an earlier revision's spec again.

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The text of a plan (or of an apply's reply): the changes, one per line,
// then their effects on work and a summary line.
std::string FormatClusterPlan(const nlohmann::json& plan);

// The `loom history` table: REVISION AUTHOR TIME CHANGES.
std::string FormatClusterHistory(const nlohmann::json& history);

namespace cli {

void AddSpecVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is one of these verbs: its exit code, else nullopt.
std::optional<int> RunSpecVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
