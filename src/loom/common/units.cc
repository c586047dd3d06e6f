#include "loom/common/units.h"

#include <cctype>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"

namespace loom {
namespace {

// Splits `text` into a leading decimal number and the rest. Returns false
// when no number is present.
bool SplitNumber(std::string_view text, double* value, std::string_view* rest) {
  size_t i = 0;
  bool digits = false;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    ++i;
    digits = true;
  }
  if (i < text.size() && text[i] == '.') {
    ++i;
    while (i < text.size() &&
           std::isdigit(static_cast<unsigned char>(text[i]))) {
      ++i;
      digits = true;
    }
  }
  if (!digits) return false;
  *value = std::strtod(std::string(text.substr(0, i)).c_str(), nullptr);
  *rest = text.substr(i);
  return true;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front())))
    s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back())))
    s.remove_suffix(1);
  return s;
}

}  // namespace

absl::StatusOr<int64_t> ParseBytes(std::string_view text) {
  std::string_view s = Trim(text);
  double value = 0;
  std::string_view suffix;
  if (!SplitNumber(s, &value, &suffix)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(text), "' is not a byte quantity (e.g. 80Gi, 2Ti)"));
  }
  double mult = 1;
  if (suffix.empty()) {
    mult = 1;
  } else if (suffix == "Ki") {
    mult = 1024.0;
  } else if (suffix == "Mi") {
    mult = 1024.0 * 1024;
  } else if (suffix == "Gi") {
    mult = 1024.0 * 1024 * 1024;
  } else if (suffix == "Ti") {
    mult = 1024.0 * 1024 * 1024 * 1024;
  } else if (suffix == "Pi") {
    mult = 1024.0 * 1024 * 1024 * 1024 * 1024;
  } else if (suffix == "k" || suffix == "K") {
    mult = 1e3;
  } else if (suffix == "M") {
    mult = 1e6;
  } else if (suffix == "G") {
    mult = 1e9;
  } else if (suffix == "T") {
    mult = 1e12;
  } else if (suffix == "P") {
    mult = 1e15;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(text), "' has an unknown unit '", std::string(suffix),
        "' (use Ki, Mi, Gi, Ti, Pi or k, M, G, T, P)"));
  }
  double bytes = value * mult;
  if (!(bytes < 9.0e18)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text), "' is too large"));
  }
  // A number without a unit is bytes, so it must be whole ("0.5" used to
  // become 1 byte); with a unit the result is rounded to the byte, but a
  // quantity that is not zero must not round to nothing.
  if (suffix.empty() && bytes != std::floor(bytes)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", std::string(text),
        "' is not a whole number of bytes (a number without a unit is bytes; "
        "write a unit, e.g. 512Mi or 1.5Gi)"));
  }
  const int64_t rounded = static_cast<int64_t>(std::llround(bytes));
  if (rounded == 0 && bytes > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text), "' is less than one byte"));
  }
  return rounded;
}

absl::StatusOr<absl::Duration> ParseDuration(std::string_view text) {
  std::string_view s = Trim(text);
  if (s.empty()) {
    return absl::InvalidArgumentError("empty duration");
  }
  absl::Duration total = absl::ZeroDuration();
  // Units from the largest to the smallest, each at most once ("1h30m";
  // "1h1h" used to be 2h): the rank of the last one.
  int last_rank = 100;
  bool first = true;
  while (!s.empty()) {
    double value = 0;
    std::string_view rest;
    if (!SplitNumber(s, &value, &rest)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text),
                       "' is not a duration (e.g. 30s, 15m, 12h, 2d)"));
    }
    size_t unit_len = 0;
    while (unit_len < rest.size() &&
           std::isalpha(static_cast<unsigned char>(rest[unit_len]))) {
      ++unit_len;
    }
    std::string_view unit = rest.substr(0, unit_len);
    double seconds;
    int rank = 0;
    if (unit.empty() && !first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", std::string(text),
          "' has a number without a unit after the first term (write "
          "e.g. 1h30m, not 1h30)"));
    }
    if (unit.empty() || unit == "s") {
      seconds = value;
      rank = 2;
    } else if (unit == "ms") {
      seconds = value / 1000;
      rank = 1;
    } else if (unit == "m") {
      seconds = value * 60;
      rank = 3;
    } else if (unit == "h") {
      seconds = value * 3600;
      rank = 4;
    } else if (unit == "d") {
      seconds = value * 86400;
      rank = 5;
    } else if (unit == "w") {
      seconds = value * 7 * 86400;
      rank = 6;
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text), "' has an unknown unit '",
                       std::string(unit), "' (use ms, s, m, h, d or w)"));
    }
    if (rank == last_rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text), "' gives the unit '",
                       std::string(unit), "' twice"));
    }
    if (rank > last_rank) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", std::string(text),
          "' has its units out of order (from the largest to the smallest, "
          "e.g. 1h30m)"));
    }
    last_rank = rank;
    first = false;
    if (!(seconds < 1e15)) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text), "' is too long"));
    }
    total += absl::Seconds(seconds);
    s = rest.substr(unit_len);
    if (unit.empty() && !s.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", std::string(text), "' is not a duration"));
    }
  }
  return total;
}

std::string FormatBytes(int64_t bytes) {
  static constexpr const char* kUnits[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (u < 5 && std::fabs(v) >= 1024) {
    v /= 1024;
    ++u;
  }
  if (v == std::floor(v)) return fmt::format("{:.0f}{}", v, kUnits[u]);
  return fmt::format("{:.1f}{}", v, kUnits[u]);
}

namespace {

// The decimal unit for `bytes`: its name and its size.
std::pair<const char*, double> DecimalUnitFor(int64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "kB", "MB", "GB", "TB", "PB"};
  double scale = 1;
  int u = 0;
  while (u < 5 && static_cast<double>(bytes) >= scale * 1000) {
    scale *= 1000;
    ++u;
  }
  return {kUnits[u], scale};
}

// One decimal below 100 of a unit, none above (and none for bytes).
std::string DecimalAmount(int64_t bytes, double scale, double unit_total) {
  const double v = static_cast<double>(bytes) / scale;
  return scale == 1 || unit_total >= 100 ? fmt::format("{:.0f}", v)
                                         : fmt::format("{:.1f}", v);
}

}  // namespace

std::string FormatBytesOf(int64_t done, int64_t total) {
  const auto [unit, scale] = DecimalUnitFor(total);
  const double t = static_cast<double>(total) / scale;
  return fmt::format("{} of {} {}", DecimalAmount(done, scale, t),
                     DecimalAmount(total, scale, t), unit);
}

std::string FormatBytesDecimal(int64_t bytes) {
  const auto [unit, scale] = DecimalUnitFor(bytes);
  return fmt::format(
      "{} {}", DecimalAmount(bytes, scale, static_cast<double>(bytes) / scale),
      unit);
}

std::string FormatDurationShort(absl::Duration d) {
  if (d == absl::InfiniteDuration()) return "inf";
  double s = absl::ToDoubleSeconds(d);
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.1f}m", s / 60);
  if (s < 86400) return fmt::format("{:.1f}h", s / 3600);
  return fmt::format("{:.1f}d", s / 86400);
}

}  // namespace loom
