#pragma once

// The files a node's maintenance commands leave (docs/agent.md,
// "Maintenance"), their formats, and the status object built from them.
// All under `<node root>/maintenance/` (mode 0700; files 0600):
//
//   current        the node's latest command, written atomically before it
//                  starts, once it runs (pid, start time) and when it ended:
//                  {"version": 1, "id", "command", "pid", "start_ticks",
//                   "started", "state": "" | "exited" | "lost",
//                   "exit_code", "ended"}
//   <id>.log       the command's stdout and stderr (appended)
//   <id>.result    its exit code ("3\n"), written by the wrapper shell that
//                  ran it (through <id>.result.tmp and a rename), so that it
//                  is there even when the agent was not

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

inline constexpr size_t kMaxMaintenanceIdLength = 128;
inline constexpr size_t kMaxMaintenanceCommandBytes = 64 * 1024;
// The end of the log that a status carries.
inline constexpr size_t kMaintenanceOutputBytes = 2048;

// 1 to `kMaxMaintenanceIdLength` of [A-Za-z0-9._:-].
bool ValidMaintenanceId(std::string_view id);

// `<node_root>/maintenance` and the files in it; `id` must be valid.
std::string MaintenanceDir(const std::string& node_root);
std::string MaintenanceCurrentPath(const std::string& node_root);
std::string MaintenanceLogPath(const std::string& node_root,
                               const std::string& id);
std::string MaintenanceResultPath(const std::string& node_root,
                                  const std::string& id);

// What a node's maintenance command is, in replies and reports: see
// `MaintenanceStatusJson`.
struct MaintenanceStatus {
  std::string id;
  std::string state;             // "running", "exited" or "lost"
  std::optional<int> exit_code;  // with "exited"
  absl::Time started = absl::InfinitePast();
  absl::Time ended = absl::InfinitePast();  // InfinitePast: not ended
  std::string output;                       // the end of the log, valid UTF-8
};

// {"id", "state", "exit_code": int or null, "started": RFC3339,
//  "ended": RFC3339 or null, "output"}.
nlohmann::json MaintenanceStatusJson(const MaintenanceStatus& status);

// "2026-11-29T19:40:00.123Z".
std::string FormatMaintenanceTime(absl::Time t);

// The `current` file.
struct MaintenanceRecord {
  static constexpr int kVersion = 1;

  std::string id;
  std::string command;
  // 0 until the wrapper shell was started.
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  absl::Time started = absl::InfinitePast();
  // "" while it runs (or was about to start); "exited" or "lost" once the
  // agent saw it end.
  std::string state;
  std::optional<int> exit_code;
  absl::Time ended = absl::InfinitePast();
};

std::string MaintenanceRecordToJson(const MaintenanceRecord& record);
// `InvalidArgument` for anything but a record this agent wrote.
absl::StatusOr<MaintenanceRecord> MaintenanceRecordFromJson(
    std::string_view text);

// The exit code in the result file `path` (0..255), and its modification
// time in `*written`. `NotFound` when there is none yet; `InvalidArgument`
// when it holds no exit code.
absl::StatusOr<int> ReadMaintenanceResult(const std::string& path,
                                          absl::Time* written);

// The last `max_bytes` (at most) of the file `path`, as valid UTF-8: a
// character cut at the start is dropped, invalid bytes become U+FFFD. ""
// when the file cannot be read.
std::string MaintenanceOutputTail(const std::string& path,
                                  size_t max_bytes = kMaintenanceOutputBytes);

// Whole valid UTF-8 of the bytes `raw` (see `MaintenanceOutputTail`), at
// most `max_bytes`, keeping the end.
std::string MaintenanceValidUtf8Tail(std::string_view raw, size_t max_bytes);

}  // namespace loom
