#pragma once

// Reading one cell of a trace line (trace.h): numbers of seconds, GPU
// counts, UTC timestamps, booleans, time limits, free text and GPU model
// names, each within loom's limits. Internal to `trace`. Each parser
// returns true on success; on failure it sets `*error` to `<column>:
// <reason>` and returns false.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom::trace_cells {

// The largest GPU count a job may ask for.
inline constexpr int kMaxGpus = 100000;
// The largest number of seconds accepted for a submit time, a duration or a
// time limit (about 3,000 years): it keeps every value exactly representable
// as int64 microseconds downstream.
inline constexpr double kMaxSeconds = 1e11;
// The longest id, project, user, priority or GPU model accepted.
inline constexpr size_t kMaxTextBytes = 256;

// Parses a number of seconds in [0, kMaxSeconds], or in (0, kMaxSeconds]
// when `positive`.
bool ParseSeconds(absl::string_view column, std::string_view cell,
                  bool positive, double* out, std::string* error);

// Parses a whole GPU count in [min, kMaxGpus]. A float with no fraction
// (`8.0`) is accepted.
bool ParseGpuCount(absl::string_view column, std::string_view cell, int min,
                   int* out, std::string* error);

// Parses a UTC time `YYYY-MM-DD HH:MM:SS` (a `T` may stand for the space)
// into seconds since the Unix epoch.
bool ParseTimestamp(absl::string_view column, std::string_view cell,
                    double* out, std::string* error);

// Parses an optional boolean: true/false/1/0/yes/no in any letter case; an
// empty cell leaves `*out` unset.
bool ParseOptionalBool(absl::string_view column, std::string_view cell,
                       std::optional<bool>* out, std::string* error);

// Parses an optional time limit: seconds as a number, or a duration that
// `ParseDuration` accepts (`12h`, `1h30m`). It must be > 0. An empty cell
// leaves `*out` unset.
bool ParseOptionalTimeLimit(absl::string_view column, std::string_view cell,
                            std::optional<double>* out, std::string* error);

// Reads a free-text cell (id, project, user, priority): trimmed, at most
// `kMaxTextBytes`, no control characters.
bool ParseText(absl::string_view column, std::string_view cell,
               std::string* out, std::string* error);

// Reads a GPU model: lower-cased; `any` and "" mean any model. Letters,
// digits, `.`, `_` and `-` only.
bool ParseGpuModel(absl::string_view column, std::string_view cell,
                   std::string* out, std::string* error);

}  // namespace loom::trace_cells
