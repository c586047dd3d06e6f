#include "loom/gateway/access_log.h"

#include <charconv>

#include "absl/strings/str_cat.h"

namespace loom::gateway {
namespace {

bool ParseLogInt(std::string_view text, int64_t* out) {
  // HAProxy prefixes timers with '+' under "option logasap".
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return !text.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

absl::StatusOr<AccessLogEntry> ParseAccessLogLine(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) {
    line.remove_suffix(1);
  }
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "access log line '", std::string(line), "': ", std::string(why)));
  };
  constexpr std::string_view kTag = "loom-access ";
  if (line.substr(0, kTag.size()) != kTag) return bad("not a loom-access line");
  AccessLogEntry e;
  bool have_backend = false, have_status = false, have_active = false;
  std::string_view rest = line.substr(kTag.size());
  while (!rest.empty()) {
    const size_t space = rest.find(' ');
    const std::string_view field = rest.substr(0, space);
    rest = space == std::string_view::npos ? std::string_view()
                                           : rest.substr(space + 1);
    if (field.empty()) continue;
    const size_t eq = field.find('=');
    if (eq == std::string_view::npos) {
      return bad(absl::StrCat("field '", std::string(field), "' has no '='"));
    }
    const std::string_view key = field.substr(0, eq);
    const std::string_view value = field.substr(eq + 1);
    int64_t* number = nullptr;
    int64_t status = 0;
    if (key == "be") {
      e.backend = std::string(value);
      have_backend = true;
    } else if (key == "srv") {
      e.server = std::string(value);
    } else if (key == "ts") {
      e.termination = std::string(value);
    } else if (key == "st") {
      number = &status;
      have_status = true;
    } else if (key == "ta") {
      number = &e.active_ms;
      have_active = true;
    } else if (key == "tt") {
      number = &e.total_ms;
    } else if (key == "tq") {
      number = &e.queue_ms;
    } else if (key == "tc") {
      number = &e.connect_ms;
    } else if (key == "tr") {
      number = &e.response_ms;
    } else if (key == "by") {
      number = &e.bytes;
    }
    if (number != nullptr && !ParseLogInt(value, number)) {
      return bad(absl::StrCat("'", std::string(key), "' is not a number"));
    }
    if (key == "st") e.status = static_cast<int>(status);
  }
  if (!have_backend || !have_status || !have_active) {
    return bad("it lacks be, st or ta");
  }
  return e;
}

}  // namespace loom::gateway
