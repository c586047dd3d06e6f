#include "loom/agent/maintenance_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/task_files.h"
#include "loom/common/utf8.h"

namespace loom {
namespace {

using json = nlohmann::json;

bool MaintenanceIdChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
         c == '_' || c == ':' || c == '-';
}

// `t` as in the file, or null for InfinitePast.
json MaintenanceTimeJson(absl::Time t) {
  return t == absl::InfinitePast() ? json() : json(FormatMaintenanceTime(t));
}

bool ParseMaintenanceTime(const json& v, absl::Time* out) {
  if (v.is_null()) {
    *out = absl::InfinitePast();
    return true;
  }
  if (!v.is_string()) return false;
  std::string error;
  return absl::ParseTime(absl::RFC3339_full, v.get<std::string>(), out, &error);
}

}  // namespace

bool ValidMaintenanceId(std::string_view id) {
  return !id.empty() && id.size() <= kMaxMaintenanceIdLength &&
         std::all_of(id.begin(), id.end(), MaintenanceIdChar);
}

std::string MaintenanceDir(const std::string& node_root) {
  return absl::StrCat(node_root, "/maintenance");
}

std::string MaintenanceCurrentPath(const std::string& node_root) {
  return absl::StrCat(node_root, "/maintenance/current");
}

std::string MaintenanceLogPath(const std::string& node_root,
                               const std::string& id) {
  return absl::StrCat(node_root, "/maintenance/", id, ".log");
}

std::string MaintenanceResultPath(const std::string& node_root,
                                  const std::string& id) {
  return absl::StrCat(node_root, "/maintenance/", id, ".result");
}

std::string FormatMaintenanceTime(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", t, absl::UTCTimeZone());
}

json MaintenanceStatusJson(const MaintenanceStatus& status) {
  return {
      {"id", status.id},
      {"state", status.state},
      {"exit_code", status.exit_code ? json(*status.exit_code) : json(nullptr)},
      {"started", MaintenanceTimeJson(status.started)},
      {"ended", MaintenanceTimeJson(status.ended)},
      {"output", status.output}};
}

std::string MaintenanceRecordToJson(const MaintenanceRecord& r) {
  const json j = {
      {"version", MaintenanceRecord::kVersion},
      {"id", r.id},
      {"command", r.command},
      {"pid", static_cast<int64_t>(r.pid)},
      {"start_ticks", r.start_ticks},
      {"started", MaintenanceTimeJson(r.started)},
      {"state", r.state},
      {"exit_code", r.exit_code ? json(*r.exit_code) : json(nullptr)},
      {"ended", MaintenanceTimeJson(r.ended)}};
  return Dump(j, 2) + "\n";
}

absl::StatusOr<MaintenanceRecord> MaintenanceRecordFromJson(
    std::string_view text) {
  const json j = json::parse(text, nullptr, false);
  auto bad = [](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a maintenance record: ", why));
  };
  if (!j.is_object()) return bad("not a JSON object");
  if (j.value("version", 0) != MaintenanceRecord::kVersion) {
    return bad("unknown version");
  }
  MaintenanceRecord r;
  if (!j.contains("id") || !j["id"].is_string() ||
      !ValidMaintenanceId(j["id"].get<std::string>())) {
    return bad("no valid id");
  }
  r.id = j["id"].get<std::string>();
  if (j.contains("command") && j["command"].is_string()) {
    r.command = j["command"].get<std::string>();
  }
  const std::optional<int64_t> pid =
      j.contains("pid") ? AsInt(j["pid"]) : std::nullopt;
  if (!pid || *pid < 0 || *pid > INT32_MAX) return bad("no valid pid");
  r.pid = static_cast<pid_t>(*pid);
  if (j.contains("start_ticks") && j["start_ticks"].is_number_unsigned()) {
    r.start_ticks = j["start_ticks"].get<uint64_t>();
  }
  if (!ParseMaintenanceTime(j.value("started", json()), &r.started) ||
      !ParseMaintenanceTime(j.value("ended", json()), &r.ended)) {
    return bad("a time is not RFC 3339");
  }
  r.state = j.value("state", "");
  if (r.state != "" && r.state != "exited" && r.state != "lost") {
    return bad(absl::StrCat("unknown state '", r.state, "'"));
  }
  if (j.contains("exit_code") && !j["exit_code"].is_null()) {
    const std::optional<int64_t> code = AsInt(j["exit_code"]);
    if (!code || *code < 0 || *code > 255) return bad("no valid exit code");
    r.exit_code = static_cast<int>(*code);
  }
  return r;
}

absl::StatusOr<int> ReadMaintenanceResult(const std::string& path,
                                          absl::Time* written) {
  absl::StatusOr<std::string> text = agent_internal::ReadWholeFile(path);
  if (!text.ok()) return text.status();
  int code = -1;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &code) || code < 0 ||
      code > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " holds no exit code"));
  }
  struct stat st {};
  *written = ::stat(path.c_str(), &st) == 0 ? absl::TimeFromTimespec(st.st_mtim)
                                            : absl::Now();
  return code;
}

std::string MaintenanceValidUtf8Tail(std::string_view raw, size_t max_bytes) {
  constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  // Characters cut by the start of the window.
  size_t i = 0;
  while (i < raw.size() && i < 3 &&
         (static_cast<unsigned char>(raw[i]) & 0xC0) == 0x80) {
    ++i;
  }
  std::string out;
  out.reserve(raw.size() - i);
  while (i < raw.size()) {
    const size_t n = Utf8CharLength(raw, i);
    if (n == 0) {
      out.append(kReplacement);
      ++i;
    } else {
      out.append(raw.substr(i, n));
      i += n;
    }
  }
  // Replacements may have made it longer: drop whole characters in front.
  size_t start = 0;
  while (out.size() - start > max_bytes) {
    const size_t n = Utf8CharLength(out, start);
    start += n == 0 ? 1 : n;
  }
  return out.substr(start);
}

std::string MaintenanceOutputTail(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  std::string raw;
  if (::fstat(fd, &st) == 0) {
    const off_t size = st.st_size;
    const off_t from =
        size > static_cast<off_t>(max_bytes) ? size - max_bytes : 0;
    raw.resize(static_cast<size_t>(size - from));
    size_t got = 0;
    while (got < raw.size()) {
      const ssize_t n = ::pread(fd, raw.data() + got, raw.size() - got,
                                from + static_cast<off_t>(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += static_cast<size_t>(n);
    }
    raw.resize(got);
  }
  ::close(fd);
  return MaintenanceValidUtf8Tail(raw, max_bytes);
}

}  // namespace loom
