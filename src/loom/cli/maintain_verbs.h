#pragma once

// Rolling maintenance (docs/cli.md): `loom maintain --pool P | --nodes
// N1,N2 --batch K --run 'CMD' [--wait]` asks the server to maintain the
// nodes a few at a time (cordon, move the jobs off, run CMD through the
// node's agent, wait until it is back, healthy and on its pool's stack,
// uncordon); `loom maintain status [ID] [-w]` shows or follows one, and
// `loom maintain pause|resume|abort [ID]` steers it. ID defaults to the
// newest maintenance.
//
// The formatters are pure (the time and zone are parameters) so that the
// tests pin their text.

#include <optional>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The body of `POST /v1/maintenance` for the start flags, checked where
// that is cheap: exactly one of --pool and --nodes, --run and --batch
// given, whole numbers >= 1, durations. The error names the flag.
absl::StatusOr<nlohmann::json> MaintenanceRequest(const MaintainFlags& f);

// "maintenance 3 started: 8 nodes of pool h200 in 4 batches of 2 (at most
// 2 out at once)", from the server's answer to the start.
std::string FormatMaintenanceStarted(const nlohmann::json& m);

// One line (no newline): "maintenance 3 running, batch 2 of 4: 2 done, 2 in
// progress, 4 pending, 0 failed; REASON".
std::string FormatMaintenanceHeader(const nlohmann::json& m);

// `loom maintain status`: the header, what runs where, then the table NODE
// BATCH PHASE SINCE MESSAGE in batch order, then the last output of the
// nodes that failed. SINCE is relative to `now`.
std::string FormatMaintenanceStatus(const nlohmann::json& m, absl::Time now);

// What changed from the snapshot `before` to `after` of one maintenance, as
// `-w` prints it: a line per batch that started or ended, per node whose
// phase changed ("12:00:03 batch 1 h200-3 draining: moving 1 job off",
// with the last lines of its output when it failed; the nodes skipped by an
// abort in one line), per change of the maintenance's state, and at its end
// (`MaintenanceOver`); each led by `now` in `tz` (HH:MM:SS) and ending in
// '\n'. "" when nothing a person follows changed.
std::string FormatMaintenanceProgress(const nlohmann::json& before,
                                      const nlohmann::json& after,
                                      absl::Time now, absl::TimeZone tz);

// Whether maintenance `m` is over: done, failed or aborted, and `ended`
// (none of its nodes still draining, running or checking). A failed one
// (stopped by a failure) may still be resumed; -w stops at it all the same.
bool MaintenanceOver(const nlohmann::json& m);

namespace cli {

// Registers `maintain` and its subcommands status, pause, resume, abort.
void AddMaintainVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is `maintain`: its exit code, else nullopt.
std::optional<int> RunMaintainVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
