#pragma once

// The verbs about the cluster as a whole: top (the cluster at a glance),
// chaos (fault injection) and projects (docs/cli.md).

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom top` screen from `GET /v1/nodes` and `GET /v1/jobs` answers:
// totals (GPUs, nodes by state, jobs), a map of every node grouped by leaf
// switch (one character per node: how many of its GPUs are busy, or its
// state), the waiting jobs with their reasons and the largest running jobs
// (at most `rows` each). Lines fit `width` columns.
std::string FormatTop(const nlohmann::json& nodes, const nlohmann::json& jobs,
                      const std::string& server, int width, int rows,
                      absl::Time now);

// The `loom projects` table.
std::string FormatProjectTable(const nlohmann::json& projects);

namespace cli {

// Registers top, chaos and projects on `app`, in the order `loom --help`
// lists them.
void AddClusterVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is one of them: its exit code, else nullopt.
std::optional<int> RunClusterVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
