#pragma once

#include "loom/sched/grouped_queue.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// `backfill`: EASY backfilling over arrival order. The first job that does
// not fit gets a reservation at the earliest time enough nodes are expected
// to be free (running jobs end at their time limits); later jobs start early
// only where they cannot delay it (see `BackfillPass`). Assumes users give
// time limits; jobs without one backfill only outside the reserved nodes.
class EasyBackfillPolicy : public QueuePolicy {
 public:
  std::string_view name() const override { return "backfill"; }
  bool UsesReservations() const override { return true; }
  void Enqueue(const SchedJob& job) override;
  void Remove(const SchedJob& job) override;
  void Schedule(SchedulingContext& ctx) override;
  std::optional<PendingReason> SkippedReason(const SchedJob& job,
                                             uint64_t pass) const override;

 private:
  static GroupedQueue::GroupKey KeyOf(const SchedJob& job) {
    return {0, 0, job.request.shape, job.selector};
  }
  GroupedQueue queue_;
};

}  // namespace loom
