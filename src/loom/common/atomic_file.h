#ifndef LOOM_COMMON_ATOMIC_FILE_H_
#define LOOM_COMMON_ATOMIC_FILE_H_

// Files written whole or not at all, for state that must survive a crash
// (the agent's task records and units) and for secrets (tokens,
// credentials, keys: docs/security.md).

#include <sys/types.h>

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace loom {

// Writes `contents` to `path` through `path`.tmp: written, given `mode`
// (also when a left-over temporary file had another), synced, renamed over
// `path`, and the rename synced through the directory. Readers see the old
// file or the new one, never a part. The error's code follows errno; its
// message names the path, the step and the reason.
absl::Status WriteFileAtomically(const std::string& path,
                                 std::string_view contents, mode_t mode = 0644);

// `WriteFileAtomically` readable by the owner only (mode 0600).
absl::Status WriteSecretFile(const std::string& path, std::string_view text);

}  // namespace loom

#endif  // LOOM_COMMON_ATOMIC_FILE_H_
