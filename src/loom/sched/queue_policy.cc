#include "loom/sched/queue_policy.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/sched/easy_backfill_policy.h"
#include "loom/sched/fair_share_policy.h"
#include "loom/sched/fifo_policy.h"
#include "loom/sched/las_policy.h"

namespace loom {

std::vector<std::string> QueuePolicyNames() {
  return {"fifo", "backfill", "las", "fair"};
}

absl::StatusOr<std::unique_ptr<QueuePolicy>> MakeQueuePolicy(
    std::string_view name, const PolicyOptions& options) {
  if (name == "fifo") return std::make_unique<FifoPolicy>();
  if (name == "backfill") return std::make_unique<EasyBackfillPolicy>();
  if (name == "fair") {
    return std::make_unique<FairSharePolicy>(options.starvation_age);
  }
  if (name == "las") {
    for (size_t i = 0; i < options.las_thresholds.size(); ++i) {
      if (options.las_thresholds[i] <= 0 ||
          (i > 0 &&
           options.las_thresholds[i] <= options.las_thresholds[i - 1])) {
        return absl::InvalidArgumentError(
            "las thresholds must be positive and increasing");
      }
    }
    return std::make_unique<LasPolicy>(options.las_thresholds);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown policy '", std::string(name), "' (choose from ",
                   absl::StrJoin(QueuePolicyNames(), ", "), ")"));
}

}  // namespace loom
