#pragma once

// The time points that `--since` and `--until` take (`loom sacct`, `loom
// report usage`; docs/cli.md), and the form the server's queries take them
// in. Pure functions: "now" is a parameter.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom::cli {

// Parses a time point given on the command line, one of:
//   - RFC 3339: "2026-12-03T10:00:00Z", with fractional seconds
//     ("...T10:00:00.250Z") or an offset ("...T12:00:00+02:00"), also
//     without seconds ("2026-12-03T10:00Z");
//   - a date, "2026-12-03": its midnight UTC;
//   - a date and time without an offset, "2026-12-03T10:00" or
//     "2026-12-03T10:00:30" (fractions allowed): in UTC;
//   - "now", "now-DURATION" or "now+DURATION", DURATION as `ParseDuration`
//     reads it ("90s", "12h", "7d", "1h30m", a bare number is seconds):
//     relative to `now`.
// Surrounding whitespace is ignored; "now" may be in any case. Returns
// InvalidArgument naming `text` and the accepted forms for anything else
// (an impossible date such as 2026-02-30 included).
absl::StatusOr<absl::Time> ParseTimeArg(std::string_view text, absl::Time now);

// `t` as the server's queries take it: RFC 3339 in UTC with milliseconds,
// "2026-12-03T10:00:00.000Z" (the form the server writes its times in).
std::string FormatQueryTime(absl::Time t);

// Midnight UTC of the day of `t`.
absl::Time UtcDayStart(absl::Time t);

// Midnight UTC of the first day of the month of `t`.
absl::Time UtcMonthStart(absl::Time t);

}  // namespace loom::cli
