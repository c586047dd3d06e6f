#include "loom/cli/time_arg.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/common/units.h"

namespace loom::cli {
namespace {

constexpr char kTimeArgForms[] =
    "give RFC 3339 (2026-12-03T10:00:00Z, 2026-12-03T12:00:00.5+02:00), a "
    "UTC date or time (2026-12-03, 2026-12-03T10:00, 2026-12-03T10:00:30), "
    "now, or now-DURATION / now+DURATION (now-7d, now-1h30m)";

absl::Status TimeArgError(std::string_view text) {
  if (text.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("empty time: ", kTimeArgForms));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("'", std::string(text), "' is not a time: ", kTimeArgForms));
}

// A time in one of the absl formats, or false.
bool TimeArgParseAs(const char* format, const std::string& text,
                    absl::Time* t) {
  std::string error;
  return absl::ParseTime(format, text, absl::UTCTimeZone(), t, &error);
}

}  // namespace

absl::StatusOr<absl::Time> ParseTimeArg(std::string_view text, absl::Time now) {
  const std::string s(
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size())));
  if (s.empty()) return TimeArgError(s);
  if (absl::StartsWithIgnoreCase(s, "now")) {
    const std::string rest(
        absl::StripLeadingAsciiWhitespace(absl::string_view(s).substr(3)));
    if (rest.empty()) return now;
    if (rest[0] != '-' && rest[0] != '+') return TimeArgError(s);
    absl::StatusOr<absl::Duration> d =
        ParseDuration(std::string_view(rest).substr(1));
    if (!d.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", s, "' is not a time: ", d.status().message()));
    }
    return rest[0] == '-' ? now - *d : now + *d;
  }
  // Every form starts with a date: this keeps absl from reading odd years
  // ("+2026", "99999").
  if (s.size() < 10 || !absl::ascii_isdigit(s[0]) || s[4] != '-') {
    return TimeArgError(s);
  }
  absl::Time t;
  for (const char* format :
       {"%Y-%m-%d%ET%H:%M:%E*S%Ez",  // RFC 3339 (absl::RFC3339_full)
        "%Y-%m-%d%ET%H:%M%Ez",       // the same without seconds
        "%Y-%m-%d%ET%H:%M:%E*S", "%Y-%m-%d%ET%H:%M", "%Y-%m-%d"}) {
    if (TimeArgParseAs(format, s, &t)) return t;
  }
  return TimeArgError(s);
}

std::string FormatQueryTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

absl::Time UtcDayStart(absl::Time t) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  return absl::FromCivil(absl::ToCivilDay(t, utc), utc);
}

absl::Time UtcMonthStart(absl::Time t) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  return absl::FromCivil(absl::ToCivilMonth(t, utc), utc);
}

}  // namespace loom::cli
