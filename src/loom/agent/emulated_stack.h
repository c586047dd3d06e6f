#pragma once

// The software stack an emulated node reports (`--emulate-driver`,
// `--emulate-cuda`; docs/agent.md, "Labels and stack"): a literal version,
// or `@FILE`, a file whose content (trimmed) is the version. A file is read
// at start and again whenever the node's stack is (after a maintenance
// command, maintenance_runner.h), so that a test's maintenance command can
// "upgrade the driver" of an emulated node by writing a new version into it.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/agent/gpu_probe.h"

namespace loom {

// OK when `text` can be a version: 1 to 64 letters, digits, '.', '-', '_'
// and '+'. `InvalidArgument` naming `flag` otherwise.
absl::Status CheckEmulatedVersion(const std::string& flag,
                                  const std::string& text);

// The version in the file `path` (its content, surrounding whitespace
// trimmed), checked like a literal one. `InvalidArgument` naming `flag` and
// the file when it cannot be read or is no version.
absl::StatusOr<std::string> ReadEmulatedVersionFile(const std::string& flag,
                                                    const std::string& path);

// The value of `flag` ("--emulate-driver"): a literal version, or "@FILE".
// Sets `*version`, and `*file` to FILE ("" for a literal). Errors as above.
absl::Status ResolveEmulatedVersionFlag(const std::string& flag,
                                        const std::string& value,
                                        std::string* version,
                                        std::string* file);

// The emulated node's stack read again: a version that came from a file
// (`GpuEmulation::driver_file`, `cuda_file`) is read from it again; a
// literal one is `emulation`'s. A file that cannot be read or holds no
// version keeps the `previous` value, and a sentence for the log saying so
// goes to `*warnings`.
GpuSoftware RereadEmulatedSoftware(const GpuEmulation& emulation,
                                   const GpuSoftware& previous,
                                   std::vector<std::string>* warnings);

}  // namespace loom
