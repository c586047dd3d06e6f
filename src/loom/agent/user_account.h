#pragma once

// The node's user accounts, for running each task as the user who submitted
// its job (docs/agent.md, "Users").

#include <sys/types.h>

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/task_launcher.h"

namespace loom {

// An account of the node's user database.
struct UserAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;     // the primary group
  std::string home;  // may be empty
};

// Finds a user by name. `NotFound` when the node has no such user; other
// errors (`Unavailable`) when the database could not be read. Must be
// thread-safe: launches call it concurrently.
using UserLookup =
    std::function<absl::StatusOr<UserAccount>(const std::string& name)>;

// The passwd database through NSS (`getpwnam_r`). Thread-safe.
absl::StatusOr<UserAccount> LookUpSystemUser(const std::string& name);

// Makes `spec` run as `account`: its uid and primary gid (the launcher adds
// the supplementary groups), `HOME` (the home directory, "/" when it has
// none), `USER` and `LOGNAME` unless `spec.env` sets them, and, when
// `spec.working_dir` is empty, the home directory as the working directory ("/"
// when the home directory does not exist).
void RunSpecAs(const UserAccount& account, TaskSpec& spec);

}  // namespace loom
