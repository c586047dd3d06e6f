#pragma once

// A health probe of a service replica (docs/agent.md, "Service replicas"):
// the `readiness` and `liveness` objects of a launch body, an HTTP GET of
// the task's port. Plain data; the parse names the field at fault.

#include <cstddef>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/service_spec.h"
#include "nlohmann/json.hpp"

namespace loom {

inline constexpr size_t kMaxProbePathLength = 1024;

// The probe itself is core's (`loom/core/service_spec.h`): the same
// fields the service spec has, the path of an HTTP GET of the task's port,
// a probe every `period` (the first after `initial_delay`, counted from the
// task's start), each given `timeout` (at most `period`) to answer,
// `failures` failures in a row fail it.

// Parses the probe object `v` of the launch body's field `name`
// ("readiness", "liveness"). Missing numbers take their defaults (period
// 1000 ms, timeout the smaller of 1000 ms and the period, 3 failures, no
// initial delay); unknown keys are ignored. `InvalidArgument` naming the
// field ("readiness.period_ms: ...") otherwise, with `*field` set to it.
absl::StatusOr<ProbeSpec> ParseProbeSpec(const nlohmann::json& v,
                                         const std::string& name,
                                         std::string* field);

// The probe in the launch body's form (`ParseProbeSpec` reads it back).
nlohmann::json ProbeSpecJson(const ProbeSpec& probe);

}  // namespace loom
