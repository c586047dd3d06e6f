#pragma once

// The node's user accounts, for running each task as the user who submitted
// its job (docs/agent.md, "Users").

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/task_launcher.h"
#include "loom/common/user_account.h"

namespace loom {

// Finds a user by name. `NotFound` when the node has no such user; other
// errors (`Unavailable`) when the database could not be read. Must be
// thread-safe: launches call it concurrently.
using UserLookup =
    std::function<absl::StatusOr<UserAccount>(const std::string& name)>;

// Makes `spec` run as `account`: its uid and primary gid (the launcher adds
// the supplementary groups), `HOME` (the home directory, "/" when it has
// none), `USER` and `LOGNAME` unless `spec.env` sets them, and, when
// `spec.working_dir` is empty, the home directory as the working directory ("/"
// when the home directory does not exist).
void RunSpecAs(const UserAccount& account, TaskSpec& spec);

}  // namespace loom
