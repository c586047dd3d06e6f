#include "loom/agent/agent_log.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace loom {
namespace {

std::string RfcTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

std::string Quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  out.push_back('"');
  return out;
}

}  // namespace

void AgentLog::operator()(std::string_view level, std::string_view node,
                          const std::string& message) const {
  std::string line =
      absl::StrCat(RfcTime(absl::Now()), " level=", std::string(level));
  if (!node.empty()) absl::StrAppend(&line, " node=", std::string(node));
  absl::StrAppend(&line, " msg=", Quote(message));
  if (sink_) {
    sink_(line);
    return;
  }
  absl::MutexLock lock(&mu_);
  std::fprintf(stderr, "%s\n", line.c_str());
}

}  // namespace loom
