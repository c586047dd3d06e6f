#include "loom/core/retry.h"

#include "absl/strings/str_cat.h"

namespace loom {

RetryDecision DecideRetry(const RestartSpec& restart,
                          const RestartSpec& requeue, RunEnd end,
                          int restarts_used, int requeues) {
  const bool failed = end == RunEnd::kFailed;
  const RestartSpec& policy = failed ? restart : requeue;
  const int used = failed ? restarts_used : requeues;
  RetryDecision d;
  if (policy.max < 0 || used < policy.max) {
    d.again = true;
    d.wait = policy.backoff;
    return d;
  }
  // No restart policy at all needs no explanation; a used-up one does.
  if (policy.max > 0 || !failed) {
    d.why_not = absl::StrCat(failed ? "restart.max" : "requeue.max", " (",
                             policy.max, ") reached");
  }
  return d;
}

}  // namespace loom
