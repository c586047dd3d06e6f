#pragma once

// The verbs about inference services (docs/cli.md, docs/services.md):
// `loom service apply -f FILE`, `list`, `show NAME`, `scale NAME N`,
// `delete NAME` and `logs NAME [--replica N] [-f]`.

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/time/time.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom service list` table of a `GET /v1/services` answer: NAME USER
// PROJECT PORT READY DESIRED REVISION STATUS. DESIRED is the desired count,
// with the range "(MIN-MAX)" of an autoscaled service.
std::string FormatServiceTable(const nlohmann::json& services);

// The `loom service show` description of a service: its fields, then a
// replicas table (JOB NODE ADDRESS PHASE REVISION SINCE REASON) and its
// events.
std::string FormatServiceDetails(const nlohmann::json& service, absl::Time now);

// What `loom service apply` did, from the service before (null: there was
// none) and the server's answer: "created", "updated" (a new generation)
// or "unchanged".
std::string ApplyOutcome(const nlohmann::json* before,
                         const nlohmann::json& after);

namespace cli {

// Registers `loom service` and its subcommands on `app`.
void AddServiceVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is `service`: its exit code, else nullopt.
std::optional<int> RunServiceVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
