#pragma once

// How the job verbs write jobs: the `loom queue` table and the `loom show`
// description.

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

// How far a placement spans: "one node (h200-0)", "one leaf switch
// (leaf0)", "one spine switch (spine1), 3 leaves", or "" without a
// placement.
std::string DescribeSwitchSpan(const nlohmann::json& placement);

}  // namespace loom
