#pragma once

// The restart policy of a job (docs/job-spec.md, `restart` and `requeue`):
// what happens after a run ends without finishing. One function, used by the
// server (`Controller`) and the simulator (`loom sim --fail-mtbf`), so that
// what-if studies follow the rules the cluster applies.

#include <string>

#include "absl/time/time.h"
#include "loom/core/job_spec.h"

namespace loom {

// Why a run ended without finishing.
enum class RunEnd {
  kFailed,    // a task failed, was lost, or its node went down
  kRequeued,  // loom stopped it: preempted, or moved off an unhealthy node
};

struct RetryDecision {
  bool again = false;   // queue the job again after `wait`
  absl::Duration wait;  // the backoff
  std::string why_not;  // when !again and a limit was reached: which
};

// `restart` governs failures, `requeue` (checkpoint-and-requeue) loom's own
// stops; each counts separately (`restarts_used`, `requeues`). A `max` of -1
// has no limit; 0 never retries.
RetryDecision DecideRetry(const RestartSpec& restart,
                          const RestartSpec& requeue, RunEnd end,
                          int restarts_used, int requeues);

}  // namespace loom
