#pragma once

// Accounting, as Slurm's sacct and sreport (docs/cli.md): `loom sacct`
// lists jobs with their times and GPU-hours (`GET /v1/accounting/jobs`), `loom
// report usage` sums GPU-hours per project and/or user (`GET /v1/usage`).
// The formatters are pure, over the server's replies as docs/api.md writes
// them; missing or null fields print as "-" (an empty field in CSV).

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "loom/cli/job_commands.h"
#include "loom/cli/verb.h"
#include "nlohmann/json.hpp"

namespace loom {

// The loom job states that `text`, sacct's -s list, names: comma-separated
// loom states (held, pending, running, stopping, succeeded, failed,
// cancelled) or Slurm's codes and names (CD/COMPLETED: succeeded, F/FAILED:
// failed, CA/CANCELLED: cancelled, R/RUNNING: running, PD/PENDING: pending),
// in any case. In the order given, each once. InvalidArgument naming the
// first unknown state, or for an empty list.
absl::StatusOr<std::vector<std::string>> ParseSacctStates(
    std::string_view text);

// A loom state as sacct's STATE column writes it: Slurm's name where Slurm
// has the state (succeeded: COMPLETED, failed: FAILED, cancelled:
// CANCELLED, running: RUNNING, pending: PENDING), else loom's upper-cased
// (HELD, STOPPING). "" for "".
std::string SacctStateName(std::string_view loom_state);

// A run time as Slurm writes it, [D-]HH:MM:SS: "00:05:00", "1-02:03:04".
// Fractions of a second are dropped; a negative time is 0.
std::string FormatSlurmElapsed(double seconds);

// The `loom sacct` table of a `GET /v1/accounting/jobs` reply ({"jobs": [...]}
// or a bare list): JOBID NAME USER PROJECT STATE SUBMIT START END ELAPSED GPUS
// GPU-HOURS EXITCODE NODES, times in UTC ("2026-12-03T10:00:01"), NODES as a
// Slurm host list ("h200-[0-3]").
std::string FormatSacctTable(const nlohmann::json& reply);

// The same jobs as CSV (`FormatCsv`): the same columns, but the times as the
// server wrote them (RFC 3339) and ELAPSED_SECONDS and GPU_SECONDS in place of
// ELAPSED and GPU-HOURS, as plain numbers.
std::string FormatSacctCsv(const nlohmann::json& reply);

// The `loom report usage` table of a `GET /v1/usage` reply: PERIOD (unless
// `per` is all; as long as the period: "2026-12-03T10:00", "2026-12-03",
// "2026-12"), then the reply's `by` columns (PROJECT, USER), then GPU-HOURS,
// and a last line TOTAL.
std::string FormatUsageTable(const nlohmann::json& reply);

// The same rows as CSV: PERIOD (RFC 3339; unless `per` is all), the `by`
// columns and GPU_SECONDS; no total line.
std::string FormatUsageCsv(const nlohmann::json& reply);

namespace cli {

// Registers `sacct` and `report` (with its subcommand `usage`) on `app`.
void AddAccountingVerbs(CLI::App& app, JobCommandFlags* f);

// Runs `v` when it is an accounting verb: its exit code, else nullopt.
std::optional<int> RunAccountingVerb(const Verb& v);

}  // namespace cli
}  // namespace loom
