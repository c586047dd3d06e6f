#pragma once

// The files a `ShimTaskLauncher` keeps per task in its state directory (their
// names, their formats and the parsing of them), and the /proc probes used
// to tell whether a recorded process still runs. See docs/agent-tasks.md for
// the formats.
//
//   <task_id>.json  the task record, written by the agent (atomically)
//   <task_id>.pid   "<pid> <start> <shim_pid> <shim_start>", written by the
//                   shim as soon as the task process exists
//   <task_id>.exit  "exited <code> <unix_seconds>" or
//                   "signaled <signal> <unix_seconds>", written by the shim
//                   when the task ends

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/cgroup.h"

namespace loom::agent_internal {

// --- Async-signal-safe helpers (used between fork and exec/_exit too). ---

// Writes the decimal form of `value` to `out` (at least 21 bytes, not
// NUL-terminated) and returns the number of characters.
size_t FormatDecimal(int64_t value, char* out);

// Parses the contents of /proc/<pid>/stat: the state letter (field 3) and the
// start time in clock ticks since boot (field 22). The command name (field 2)
// may contain spaces and parentheses; it ends at the last ')'.
bool ParseProcStat(const char* buf, size_t len, char* state,
                   uint64_t* start_ticks);

// Reads /proc/<pid>/stat into `buf`; returns the length or -1.
ssize_t ReadProcStat(pid_t pid, char* buf, size_t size);

// --- Ordinary helpers (agent side). ---

enum class ProcessStatus {
  kAlive,   // the pid exists, is not a zombie and started at the given time
  kZombie,  // it ended and waits to be reaped
  kGone,    // no such pid, or the pid now belongs to another process
};

// The start time of `pid`, if it exists.
std::optional<uint64_t> ProcStartTicks(pid_t pid);

// Whether the process that was `pid` when it started at `start_ticks` still
// runs. A pid with a different start time is a reused pid: kGone.
ProcessStatus ProbeProcess(pid_t pid, uint64_t start_ticks);

struct ExitRecord {
  bool signaled = false;
  int value = 0;  // exit code, or signal number when `signaled`
  absl::Time ended_at = absl::InfinitePast();
};

// Parses "exited 3 1732900000" / "signaled 9 1732900000" (the time is
// optional). `InvalidArgument` on anything else.
absl::StatusOr<ExitRecord> ParseExitLine(std::string_view text);

struct PidRecord {
  pid_t pid = 0;
  uint64_t start_ticks = 0;
  pid_t shim_pid = 0;
  uint64_t shim_start_ticks = 0;
};

absl::StatusOr<PidRecord> ParsePidLine(std::string_view text);

// The task record (<task_id>.json).
struct TaskFileRecord {
  static constexpr int kVersion = 1;

  std::string task_id;
  // "starting": written before fork; pids may be missing (see the .pid
  // file). "running": complete.
  std::string phase = "starting";
  pid_t pid = 0;
  pid_t pgid = 0;
  pid_t shim_pid = 0;
  uint64_t start_ticks = 0;
  uint64_t shim_start_ticks = 0;
  std::vector<std::string> argv;
  std::string working_dir;
  std::string stdout_path;
  std::string stderr_path;
  absl::Time launched_at = absl::InfinitePast();
  CgroupPlacement cgroup;
  // The task's cgroup v2 group (task_group.h); empty: none, only its
  // process group.
  std::string group_dir;
};

std::string TaskRecordToJson(const TaskFileRecord& record);
absl::StatusOr<TaskFileRecord> TaskRecordFromJson(std::string_view text);

// The file's contents; `NotFound` when it does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// True when `path` names a regular file (following symlinks).
bool IsRegularFile(const std::string& path);

// --- Where the files are. ---

// The longest task id (`ValidTaskId`).
inline constexpr size_t kMaxTaskIdLength = 200;

// Whether `id` may name a task: 1 to `kMaxTaskIdLength` of [A-Za-z0-9._-],
// and not "." or "..". A valid id is a safe file name in the state directory.
bool ValidTaskId(const std::string& id);

// `<state_dir>/<task_id><suffix>`: the task's record (".json"), pid file
// (".pid") or exit file (".exit"), or the temporary file of one of them
// (".json.tmp", ...). `task_id` must be valid.
std::string TaskFilePath(const std::string& state_dir,
                         const std::string& task_id, const std::string& suffix);

// How a process ended, from its wait status, for messages: "exited 3",
// "was killed by signal 9".
std::string DescribeWaitStatus(int status);

}  // namespace loom::agent_internal
