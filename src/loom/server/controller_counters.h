#pragma once

// What the controller counts since this server started, for `/metrics`
// (docs/metrics.md): not persisted, so a restarted server starts them again
// (Prometheus handles counter resets). Guarded by the controller's mutex.

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "loom/common/metrics_text.h"
#include "loom/server/job_recovery.h"

namespace loom {

struct ControllerCounters {
  int64_t decisions = 0;  // starts and preemptions
  int64_t preemptions = 0;
  int64_t purged = 0;  // jobs moved to accounting
  // Failures detected, by kind: node_down, task_failed, unhealthy.
  std::map<std::string, int64_t> failures;
  // Recovery: from a failure seen to every task of the next run running,
  // and its phases (job_recovery.h).
  Histogram recovery;
  std::array<Histogram, kRecoveryPhases.size()> recovery_phases;
  // From submission to start.
  Histogram queue_wait;
  // Container tasks' image pulls, as a phase of their start.
  Histogram image_pull;
  int64_t image_pulls_ok = 0;
  int64_t image_pulls_failed = 0;
};

}  // namespace loom
