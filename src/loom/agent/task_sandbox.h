#pragma once

// The launcher's part of a container task (`TaskSandbox`, task_launcher.h):
// what it checks in the spec and makes on the host before the fork. The
// mounts themselves are made by the task's child (spawn.cc), in its own
// mount namespace.

#include <string>

#include "absl/status/status.h"
#include "loom/agent/task_launcher.h"

namespace loom::agent_internal {

// `InvalidArgument` unless every path of `sandbox` is absolute and free of
// NUL bytes, and every mount names a target and a file system type.
absl::Status ValidateSandbox(const std::string& task_id,
                             const TaskSandbox& sandbox);

// Writes the sandbox's files (mode 0600, their directories made), makes its
// directories (given to their owners when made here) and its mounts'
// targets. `PermissionDenied` unless the agent runs as root (mounts and a
// runtime that switches users need it); otherwise the errno of what failed,
// naming the path. What it made stays on failure: it lies under the task's
// own directories, which the caller removes with the task.
absl::Status PrepareSandbox(const std::string& task_id,
                            const TaskSandbox& sandbox);

}  // namespace loom::agent_internal
