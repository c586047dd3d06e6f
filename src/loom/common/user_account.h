#pragma once

// The host's user accounts (the passwd and group databases through NSS):
// whom a task runs as, and whose rights the server and the agent take when
// they read a path a user named (docs/security.md, "What runs as root on a
// node, and on which paths").

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// An account of the host's user database.
struct UserAccount {
  std::string name;
  uid_t uid = 0;
  gid_t gid = 0;     // the primary group
  std::string home;  // may be empty
  // Every group of the user (the primary one included), from the group
  // database (`getgrouplist`): what `setgroups` gets.
  std::vector<gid_t> groups;
};

// Finds a user by name. `NotFound` when the host has no such user;
// `Unavailable` when the database could not be read. Thread-safe.
absl::StatusOr<UserAccount> LookUpSystemUser(const std::string& name);

}  // namespace loom
