#pragma once

// Node health checks of `loom agent` (docs/fault-tolerance.md, "Health"):
// the data disk, an operator-supplied command, and the GPUs (missing against
// the count found at start, NVML errors, uncorrected ECC errors). Each check
// returns the problems it found as sentences an operator can act on; the
// agent sends them with its heartbeats and the server drains a node that has
// any.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "loom/agent/gpu_probe.h"

namespace loom {

// Problems of the data directory: not a directory, not writable (a probe
// file is written and removed), or fewer than `min_free_bytes` free for an
// unprivileged writer. Empty when healthy.
std::vector<std::string> CheckDataDir(const std::string& dir,
                                      int64_t min_free_bytes);

// Runs `command` with `/bin/sh -c` (stdin from /dev/null, stdout and stderr
// captured, in its own process group) and waits at most `timeout`; on
// timeout the group is killed. OK when it exits 0; otherwise
// FailedPrecondition with the exit code (or signal, or "timed out") and the
// first non-empty line of its output (at most 200 characters), the way
// Slurm's HealthCheckProgram and NHC report a failed check.
absl::Status RunHealthCommand(const std::string& command,
                              absl::Duration timeout);

// Problems of real GPUs: `probe` fails (an NVML error), sees fewer than
// `expected` GPUs, or a GPU reports uncorrected ECC errors since the driver
// loaded. Empty when healthy.
std::vector<std::string> CheckGpus(GpuProbe& probe, int expected);

}  // namespace loom
