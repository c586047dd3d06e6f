#pragma once

// Runs a program and collects its output, with a deadline: for the short
// external commands of the server and the agent (rclone).

#include <cstddef>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/common/user_account.h"

namespace loom {

// Runs `argv` (argv[0] looked up in PATH) in a process group of its own,
// with stdin from /dev/null, and returns its stdout; Unavailable with the
// last line of its stderr when it exits non-zero; DeadlineExceeded when it
// runs past `timeout` (its group is killed). At most `max_output` bytes of
// stdout are kept (more is ResourceExhausted). Thread-safe; only
// async-signal-safe calls between fork and exec.
absl::StatusOr<std::string> RunForOutput(const std::vector<std::string>& argv,
                                         absl::Duration timeout,
                                         size_t max_output);

// The same, run as `as` (its groups, gid and uid, switched in the child
// before exec; needs root) when `as` is not null: a program that reads a
// path a user named, with that user's rights. A switch that fails is
// Unavailable, naming the user.
absl::StatusOr<std::string> RunForOutputAs(const std::vector<std::string>& argv,
                                           absl::Duration timeout,
                                           size_t max_output,
                                           const UserAccount* as);

}  // namespace loom
