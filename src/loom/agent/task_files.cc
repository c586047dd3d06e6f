#include "loom/agent/task_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <exception>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace loom::agent_internal {
namespace {

using Json = nlohmann::json;

}  // namespace

size_t FormatDecimal(int64_t value, char* out) {
  char tmp[21];
  size_t n = 0;
  // Work with the magnitude as unsigned so that INT64_MIN does not overflow.
  uint64_t magnitude = value < 0 ? 0 - static_cast<uint64_t>(value)
                                 : static_cast<uint64_t>(value);
  do {
    tmp[n++] = static_cast<char>('0' + magnitude % 10);
    magnitude /= 10;
  } while (magnitude != 0);
  size_t len = 0;
  if (value < 0) out[len++] = '-';
  while (n > 0) out[len++] = tmp[--n];
  return len;
}

bool ParseProcStat(const char* buf, size_t len, char* state,
                   uint64_t* start_ticks) {
  // Find the ')' that closes the command name: the last one in the line.
  size_t close = len;
  for (size_t i = len; i > 0; --i) {
    if (buf[i - 1] == ')') {
      close = i - 1;
      break;
    }
  }
  if (close == len || close + 3 >= len) return false;
  // Field 3 (state) follows ") ".
  size_t pos = close + 2;
  *state = buf[pos];
  // Fields are single-space separated from here; field 22 is 19 fields on.
  int field = 3;
  while (pos < len && field < 22) {
    if (buf[pos] == ' ') ++field;
    ++pos;
  }
  if (field != 22 || pos >= len) return false;
  uint64_t value = 0;
  bool any = false;
  while (pos < len && buf[pos] >= '0' && buf[pos] <= '9') {
    value = value * 10 + static_cast<uint64_t>(buf[pos] - '0');
    any = true;
    ++pos;
  }
  if (!any) return false;
  *start_ticks = value;
  return true;
}

ssize_t ReadProcStat(pid_t pid, char* buf, size_t size) {
  char path[48] = "/proc/";
  size_t n = 6;
  n += FormatDecimal(pid, path + n);
  const char kSuffix[] = "/stat";
  for (size_t i = 0; i < sizeof(kSuffix); ++i) path[n + i] = kSuffix[i];
  int fd;
  do {
    fd = ::open(path, O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return -1;
  size_t total = 0;
  while (total < size) {
    ssize_t r = ::read(fd, buf + total, size - total);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    total += static_cast<size_t>(r);
  }
  ::close(fd);
  return total == 0 ? -1 : static_cast<ssize_t>(total);
}

std::optional<uint64_t> ProcStartTicks(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  char buf[2048];
  ssize_t len = ReadProcStat(pid, buf, sizeof(buf));
  char state;
  uint64_t start;
  if (len <= 0 ||
      !ParseProcStat(buf, static_cast<size_t>(len), &state, &start)) {
    return std::nullopt;
  }
  return start;
}

ProcessStatus ProbeProcess(pid_t pid, uint64_t start_ticks) {
  if (pid <= 0) return ProcessStatus::kGone;
  char buf[2048];
  ssize_t len = ReadProcStat(pid, buf, sizeof(buf));
  char state;
  uint64_t start;
  if (len <= 0 ||
      !ParseProcStat(buf, static_cast<size_t>(len), &state, &start)) {
    return ProcessStatus::kGone;
  }
  if (start != start_ticks) return ProcessStatus::kGone;
  if (state == 'Z' || state == 'X' || state == 'x')
    return ProcessStatus::kZombie;
  return ProcessStatus::kAlive;
}

absl::StatusOr<ExitRecord> ParseExitLine(std::string_view text) {
  std::vector<std::string> words =
      absl::StrSplit(absl::string_view(text.data(), text.size()),
                     absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  ExitRecord record;
  if ((words.size() == 2 || words.size() == 3) &&
      (words[0] == "exited" || words[0] == "signaled") &&
      absl::SimpleAtoi(words[1], &record.value) && record.value >= 0) {
    record.signaled = words[0] == "signaled";
    int64_t seconds = 0;
    if (words.size() == 3) {
      if (!absl::SimpleAtoi(words[2], &seconds)) {
        return absl::InvalidArgumentError(
            absl::StrCat("bad exit time in \"", std::string(text), "\""));
      }
      record.ended_at = absl::FromUnixSeconds(seconds);
    }
    return record;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("expected \"exited N\" or \"signaled N\", got \"",
                   std::string(absl::StripAsciiWhitespace(
                       absl::string_view(text.data(), text.size()))),
                   "\""));
}

absl::StatusOr<PidRecord> ParsePidLine(std::string_view text) {
  std::vector<std::string> words =
      absl::StrSplit(absl::string_view(text.data(), text.size()),
                     absl::ByAnyChar(" \t\n"), absl::SkipEmpty());
  PidRecord r;
  if (words.size() == 4 && absl::SimpleAtoi(words[0], &r.pid) &&
      absl::SimpleAtoi(words[1], &r.start_ticks) &&
      absl::SimpleAtoi(words[2], &r.shim_pid) &&
      absl::SimpleAtoi(words[3], &r.shim_start_ticks) && r.pid > 0 &&
      r.shim_pid > 0) {
    return r;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("bad pid record \"", std::string(text), "\""));
}

std::string TaskRecordToJson(const TaskFileRecord& r) {
  Json j;
  j["version"] = TaskFileRecord::kVersion;
  j["task_id"] = r.task_id;
  j["phase"] = r.phase;
  j["pid"] = r.pid;
  j["pgid"] = r.pgid;
  j["shim_pid"] = r.shim_pid;
  j["start_time_ticks"] = r.start_ticks;
  j["shim_start_time_ticks"] = r.shim_start_ticks;
  j["argv"] = r.argv;
  j["working_dir"] = r.working_dir;
  j["stdout_path"] = r.stdout_path;
  j["stderr_path"] = r.stderr_path;
  if (r.launched_at != absl::InfinitePast()) {
    j["launched_at"] = absl::ToUnixMillis(r.launched_at) / 1000.0;
  }
  j["cgroup"] = {{"procs_files", r.cgroup.procs_files},
                 {"dirs", r.cgroup.dirs},
                 {"limits_applied", r.cgroup.limits_applied},
                 {"note", r.cgroup.note}};
  if (!r.group_dir.empty()) j["group_dir"] = r.group_dir;
  return j.dump(2) + "\n";
}

absl::StatusOr<TaskFileRecord> TaskRecordFromJson(std::string_view text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  try {
    TaskFileRecord r;
    const int version = j.value("version", 0);
    if (version != TaskFileRecord::kVersion) {
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported version ", version));
    }
    r.task_id = j.at("task_id").get<std::string>();
    r.phase = j.value("phase", std::string("starting"));
    r.pid = j.value("pid", 0);
    r.pgid = j.value("pgid", 0);
    r.shim_pid = j.value("shim_pid", 0);
    r.start_ticks = j.value("start_time_ticks", uint64_t{0});
    r.shim_start_ticks = j.value("shim_start_time_ticks", uint64_t{0});
    r.argv = j.value("argv", std::vector<std::string>{});
    r.working_dir = j.value("working_dir", std::string());
    r.stdout_path = j.value("stdout_path", std::string());
    r.stderr_path = j.value("stderr_path", std::string());
    if (j.contains("launched_at")) {
      r.launched_at = absl::FromUnixMillis(static_cast<int64_t>(
          std::llround(j.at("launched_at").get<double>() * 1000.0)));
    }
    r.group_dir = j.value("group_dir", std::string());
    if (j.contains("cgroup")) {
      const Json& c = j.at("cgroup");
      r.cgroup.procs_files = c.value("procs_files", std::vector<std::string>{});
      r.cgroup.dirs = c.value("dirs", std::vector<std::string>{});
      r.cgroup.limits_applied = c.value("limits_applied", true);
      r.cgroup.note = c.value("note", std::string());
    }
    return r;
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(e.what());
  }
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", path));
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::ErrnoToStatus(err, absl::StrCat("read ", path));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool ValidTaskId(const std::string& id) {
  if (id.empty() || id.size() > kMaxTaskIdLength || id == "." || id == "..") {
    return false;
  }
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

std::string TaskFilePath(const std::string& state_dir,
                         const std::string& task_id,
                         const std::string& suffix) {
  return absl::StrCat(state_dir, "/", task_id, suffix);
}

std::string DescribeWaitStatus(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("was killed by signal ", WTERMSIG(status));
  }
  return absl::StrCat("ended with wait status ", status);
}

}  // namespace loom::agent_internal
