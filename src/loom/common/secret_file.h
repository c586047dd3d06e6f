#ifndef LOOM_COMMON_SECRET_FILE_H_
#define LOOM_COMMON_SECRET_FILE_H_

#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace loom {

// Writes `text` to `path` readable by its owner only (mode 0600), whole or
// not at all: into `path`.tmp, synced, then renamed over `path`. For tokens,
// credentials and keys (docs/security.md). The error names the path and the
// reason.
absl::Status WriteSecretFile(const std::string& path, std::string_view text);

}  // namespace loom

#endif  // LOOM_COMMON_SECRET_FILE_H_
