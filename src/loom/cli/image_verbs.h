#pragma once

// The verbs about container images on nodes (docs/cli.md, docs/images.md):
// `loom images [--node N]` lists what each node holds and pulls; `loom
// image pull REF [--pool P | --nodes N1,N2]` pulls an image ahead of a run,
// waiting (unless --no-wait) until every node has it or failed.

#include <optional>

#include "CLI/CLI.hpp"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom images` table: NODE IMAGE DIGEST SIZE STATE, a row per image a
// node holds and per pull in progress or failed.
std::string FormatImageTable(const nlohmann::json& images);

namespace cli {

void AddImageVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is an image verb: its exit code, else nullopt.
std::optional<int> RunImageVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
