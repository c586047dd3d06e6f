#pragma once

// Running Debian's `rclone` for datasets (docs/datasets.md): the one place
// that builds its command lines, so that the server's listing (the version)
// and an agent's listing (the check before a fill) ask the same question.
// The server lists sources to version them; agents list, copy and hash.

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/common/user_account.h"

namespace loom {

struct RcloneOptions {
  std::string rclone = "rclone";  // the executable
  std::string config;             // --config FILE; empty: rclone's default
  // Not null: rclone runs as this user (`RunForOutputAs`), to read a local
  // source with its user's rights, and with no config at all (the
  // operator's holds the remotes' credentials; a local path needs none).
  const UserAccount* as = nullptr;
};

// `rclone SUBCOMMAND --retries R --low-level-retries R --contimeout 5s
// [--config FILE]`: the start of every command line loom runs, with few
// retries so that a store that is down fails fast.
std::vector<std::string> RcloneArgv(const RcloneOptions& options,
                                    const std::string& subcommand, int retries);

// The hash types loom asks a remote for (`--hash-type`), in the order a
// listing's entry names them (`ParseRcloneLsjson` keeps the first).
inline constexpr const char* kRcloneHashTypes[] = {"md5", "sha1"};

// `rclone lsjson -R --files-only [--hash-type md5 --hash-type sha1] --
// SOURCE`: the JSON array rclone prints. Hashes are asked of remotes
// ("REMOTE:PATH": object stores give them for free), not of local paths
// (rclone would read every byte to compute them). Errors carry rclone's
// last lines (as `RunForOutput` gives them).
absl::StatusOr<std::string> RcloneListJson(const RcloneOptions& options,
                                           const std::string& source,
                                           absl::Duration timeout);

// `rclone hashsum TYPE --files-from-raw LIST DIR`: the hash (lower-case
// hex) of each of `paths` (relative to `dir`) that exists, by path. `LIST`
// is written beside `dir` and removed. InvalidArgument for a type rclone
// does not know.
absl::StatusOr<std::map<std::string, std::string>> RcloneHashsum(
    const RcloneOptions& options, const std::string& type,
    const std::string& dir, const std::vector<std::string>& paths,
    absl::Duration timeout);

}  // namespace loom
