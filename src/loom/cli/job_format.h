#pragma once

// How the job verbs write jobs: the `loom queue` table and the `loom show`
// description (its events section is shared with `loom service show`).

#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// The `loom queue` table of a `GET /v1/jobs` answer ({"jobs": [...]} or a
// bare list): JOBID NAME USER PROJECT STATE GPUS NODES TIME REASON, plus
// PRIORITY GPU_MODEL SUBMIT before REASON when `wide`.
std::string FormatJobTable(const nlohmann::json& jobs, bool wide,
                           absl::Time now);

// The `loom show` description of a job.
std::string FormatJobDetails(const nlohmann::json& job, absl::Time now);

// "Events:" and a TIME AGE MESSAGE table, indented, of a list of events
// ({time, message, count?, last_time?}, as the server writes a job's or a
// service's), or "" when there are none.
std::string FormatEventsSection(const nlohmann::json& events, absl::Time now);

// How far a placement spans: "one node (h200-0)", "one leaf switch
// (leaf0)", "one spine switch (spine1), 3 leaves", or "" without a
// placement.
std::string DescribeSwitchSpan(const nlohmann::json& placement);

}  // namespace loom
