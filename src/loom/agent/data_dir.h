#pragma once

// Modes of the agent's data directory (docs/agent.md, "Files"). What the
// agent keeps there (task records with argv, logs, its credential and its
// server's key) is readable by root and the agent only:
//
//   <data dir>/, nodes/<name>/   0711  tasks reach their checkpoint dir
//                                      through them; nothing is listable
//   tasks/, units/, logs/        0700  task records, units, task output
//   checkpoints/                 0711  see checkpoint_dir.h
//   datasets/                    0700  the dataset cache: tasks see their
//                                      versions through bind mounts only
//   every file the agent writes  0600  (a task's log file belongs to the
//                                      task's user: it writes through the
//                                      descriptor the agent opened)

#include <sys/types.h>

#include <string>

#include "absl/status/status.h"

namespace loom {

inline constexpr mode_t kAgentDirMode = 0711;
inline constexpr mode_t kPrivateDirMode = 0700;
inline constexpr mode_t kPrivateFileMode = 0600;

// Creates `path` (and missing parents, mode 0755 less the umask) and gives
// it exactly `mode`, also when it existed with another (an older agent's
// 0755 is tightened). `FailedPrecondition` when `path` is not a directory
// (a symbolic link included); the errno of the failing step otherwise.
absl::Status EnsureDirectory(const std::string& path, mode_t mode);

}  // namespace loom
