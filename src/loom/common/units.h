#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {

// Parses a byte quantity the way Kubernetes writes them: a non-negative
// number with an optional binary (`Ki`, `Mi`, `Gi`, `Ti`, `Pi`) or decimal
// (`k`, `M`, `G`, `T`, `P`) suffix. A bare number is bytes and must be whole;
// with a suffix the result is rounded to the byte and must not round to 0
// unless it is 0. Returns `InvalidArgument` with the offending text on
// anything else or on overflow.
absl::StatusOr<int64_t> ParseBytes(std::string_view text);

// Parses a duration: a non-negative number with an optional unit `ms`, `s`,
// `m`, `h`, `d` or `w` (a bare number is seconds), or several such terms
// (`1h30m`), each unit at most once and from the largest to the smallest
// (`1h1h`, `30m1h` and `1h30` are errors). Returns `InvalidArgument` naming
// the text on anything else.
absl::StatusOr<absl::Duration> ParseDuration(std::string_view text);

// Formats bytes with the largest binary suffix that keeps a whole number
// where possible (`141Gi`, `1.5Ti`).
std::string FormatBytes(int64_t bytes);

// Formats `done` of `total` bytes in decimal units chosen by `total`, as
// pull progress reads: "1.2 of 3.4 GB", "12 of 450 MB", "0 of 0 B".
std::string FormatBytesOf(int64_t done, int64_t total);
// Bytes in decimal units, as transfers are counted: "1.2 GB", "450 MB".
std::string FormatBytesDecimal(int64_t bytes);

// Formats a duration compactly for tables (`45s`, `12m`, `3.2h`, `4.1d`).
std::string FormatDurationShort(absl::Duration d);

constexpr int64_t kMiB = int64_t{1} << 20;
constexpr int64_t kGiB = int64_t{1} << 30;

}  // namespace loom
