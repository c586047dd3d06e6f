#include "loom/trace/trace_cells.h"

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/trace/csv.h"

namespace loom::trace_cells {

using csv::Av;
using csv::ParseNumber;
using csv::Quote;
using csv::TrimSpace;

// The parsers below read one cell. Each returns true on success; on failure
// it sets `*error` to `<column>: <reason>` and returns false.

// Parses a number of seconds in [0, kMaxSeconds], or in (0, kMaxSeconds]
// when `positive`.
bool ParseSeconds(absl::string_view column, std::string_view cell,
                  bool positive, double* out, std::string* error) {
  double value = 0;
  if (!ParseNumber(column, cell, &value, error)) return false;
  if (positive ? !(value > 0) : !(value >= 0)) {
    *error = absl::StrCat(column, ": must be ", positive ? "> 0" : ">= 0",
                          ", got ", Quote(TrimSpace(cell)));
    return false;
  }
  if (value > kMaxSeconds) {
    *error = absl::StrCat(column, ": must be at most 1e11 seconds, got ",
                          Quote(TrimSpace(cell)));
    return false;
  }
  *out = value;
  return true;
}

// Parses a whole GPU count in [min, kMaxGpus]. A float with no fraction
// (`8.0`) is accepted.
bool ParseGpuCount(absl::string_view column, std::string_view cell, int min,
                   int* out, std::string* error) {
  double value = 0;
  if (!ParseNumber(column, cell, &value, error)) return false;
  if (value < min || value > kMaxGpus || value != std::floor(value)) {
    *error = absl::StrCat(column, ": must be a whole number from ", min, " to ",
                          kMaxGpus, ", got ", Quote(TrimSpace(cell)));
    return false;
  }
  *out = static_cast<int>(value);
  return true;
}

namespace {

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's
// `days_from_civil`).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

bool IsLeapYear(int y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int DaysInMonth(int y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30,
                                  31, 31, 30, 31, 30, 31};
  return m == 2 && IsLeapYear(y) ? 29 : kDays[m - 1];
}

}  // namespace

// Parses a UTC time `YYYY-MM-DD HH:MM:SS` (a `T` may stand for the space)
// into seconds since the Unix epoch.
bool ParseTimestamp(absl::string_view column, std::string_view cell,
                    double* out, std::string* error) {
  const std::string_view s = TrimSpace(cell);
  const auto digits = [&s](size_t pos, size_t len, int* value) {
    int v = 0;
    for (size_t k = pos; k < pos + len; ++k) {
      if (s[k] < '0' || s[k] > '9') return false;
      v = v * 10 + (s[k] - '0');
    }
    *value = v;
    return true;
  };
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  const bool ok = s.size() == 19 && s[4] == '-' && s[7] == '-' &&
                  (s[10] == ' ' || s[10] == 'T') && s[13] == ':' &&
                  s[16] == ':' && digits(0, 4, &year) && digits(5, 2, &month) &&
                  digits(8, 2, &day) && digits(11, 2, &hour) &&
                  digits(14, 2, &minute) && digits(17, 2, &second) &&
                  month >= 1 && month <= 12 && day >= 1 &&
                  day <= DaysInMonth(year, month) && hour < 24 && minute < 60 &&
                  second < 60;
  if (!ok) {
    *error = absl::StrCat(
        column, ": not a timestamp YYYY-MM-DD HH:MM:SS: ", Quote(cell));
    return false;
  }
  *out = static_cast<double>(DaysFromCivil(year, month, day) * 86400 +
                             hour * 3600 + minute * 60 + second);
  return true;
}

// Parses an optional boolean: true/false/1/0/yes/no in any letter case; an
// empty cell leaves `*out` unset.
bool ParseOptionalBool(absl::string_view column, std::string_view cell,
                       std::optional<bool>* out, std::string* error) {
  const std::string_view s = TrimSpace(cell);
  if (s.empty()) return true;
  if (absl::EqualsIgnoreCase(Av(s), "true") ||
      absl::EqualsIgnoreCase(Av(s), "yes") || s == "1") {
    *out = true;
    return true;
  }
  if (absl::EqualsIgnoreCase(Av(s), "false") ||
      absl::EqualsIgnoreCase(Av(s), "no") || s == "0") {
    *out = false;
    return true;
  }
  *error = absl::StrCat(
      column, ": not a boolean (true/false/1/0/yes/no): ", Quote(cell));
  return false;
}

// Parses an optional time limit: seconds as a number, or a duration that
// `ParseDuration` accepts (`12h`, `1h30m`). It must be > 0. An empty cell
// leaves `*out` unset.
bool ParseOptionalTimeLimit(absl::string_view column, std::string_view cell,
                            std::optional<double>* out, std::string* error) {
  const std::string_view s = TrimSpace(cell);
  if (s.empty()) return true;
  double seconds = 0;
  const char* const end = s.data() + s.size();
  const auto [ptr, ec] = std::from_chars(s.data(), end, seconds);
  if (ec != std::errc() || ptr != end) {
    absl::StatusOr<absl::Duration> d = ParseDuration(s);
    if (!d.ok()) {
      *error = absl::StrCat(
          column, ": not a duration (e.g. 3600, 90m, 12h): ", Quote(cell));
      return false;
    }
    seconds = absl::ToDoubleSeconds(*d);
  }
  if (!std::isfinite(seconds) || !(seconds > 0) || seconds > kMaxSeconds) {
    *error = absl::StrCat(
        column, ": must be > 0 and at most 1e11 seconds, got ", Quote(cell));
    return false;
  }
  *out = seconds;
  return true;
}

// Reads a free-text cell (id, project, user, priority): trimmed, at most
// `kMaxTextBytes`, no control characters.
bool ParseText(absl::string_view column, std::string_view cell,
               std::string* out, std::string* error) {
  const std::string_view s = TrimSpace(cell);
  if (s.size() > kMaxTextBytes) {
    *error = absl::StrCat(column, ": longer than ", kMaxTextBytes,
                          " bytes: ", Quote(s));
    return false;
  }
  for (const char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x20 || u == 0x7f) {
      *error =
          absl::StrCat(column, ": contains a control character: ", Quote(s));
      return false;
    }
  }
  out->assign(s.data(), s.size());
  return true;
}

// Reads a GPU model: lower-cased; `any` and "" mean any model. Letters,
// digits, `.`, `_` and `-` only.
bool ParseGpuModel(absl::string_view column, std::string_view cell,
                   std::string* out, std::string* error) {
  const std::string_view s = TrimSpace(cell);
  const bool ok =
      s.size() <= kMaxTextBytes && std::all_of(s.begin(), s.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
               c == '_' || c == '-';
      });
  if (!ok) {
    *error = absl::StrCat(
        column,
        ": not a GPU model name (letters, digits, '.', '_', '-'): ", Quote(s));
    return false;
  }
  std::string model = absl::AsciiStrToLower(Av(s));
  if (model == "any") model.clear();
  *out = std::move(model);
  return true;
}

}  // namespace loom::trace_cells
