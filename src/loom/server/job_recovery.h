#pragma once

// The phases of a job's recovery (docs/fault-tolerance.md, "Recovery
// phases"): from a run lost (a node of it died, or one of its tasks
// failed) to the next run's first progress. Plain data and pure functions.

#include <array>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

struct RecoveryTimes {
  int run = 0;  // the restart count of the run that was lost
  std::string cause;
  // The last sign of life of what was lost: its node's last heartbeat, or
  // the report of the task's failure.
  absl::Time lost;
  absl::Time detected;                 // the server knew the run was lost
  std::optional<absl::Time> stopped;   // every task of that run ended
  std::optional<absl::Time> placed;    // the next run placed, launches sent
  std::optional<absl::Time> running;   // every task of it running
  std::optional<absl::Time> progress;  // its first output or checkpoint
};

// detection, gang_stop, placement, launch, first_progress: the phases in
// order, each from the end of the one before.
inline constexpr std::array<std::string_view, 5> kRecoveryPhases = {
    "detection", "gang_stop", "placement", "launch", "first_progress"};

// The phases' lengths in seconds, in `kRecoveryPhases` order; nullopt for
// a phase not over yet.
std::array<std::optional<double>, 5> RecoveryPhaseSeconds(
    const RecoveryTimes& r);

// Storage form (under the job record's "recovery"), and back:
// InvalidArgument for a malformed one.
nlohmann::json RecoveryToJson(const RecoveryTimes& r);
absl::StatusOr<RecoveryTimes> RecoveryFromJson(const nlohmann::json& j);
// The API's form: the times, each phase in seconds (null while not over)
// and `total_s` from the loss to the first progress.
nlohmann::json RecoveryApiJson(const RecoveryTimes& r);
// "detection 0.3s, gang stop 0.1s, placement 0.0s, launch 0.4s, first
// progress 3.2s; 4.0s in all".
std::string RecoverySummary(const RecoveryTimes& r);

}  // namespace loom
