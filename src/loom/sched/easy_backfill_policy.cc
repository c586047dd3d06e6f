#include "loom/sched/easy_backfill_policy.h"

#include "loom/sched/backfill.h"

namespace loom {

void EasyBackfillPolicy::Enqueue(const SchedJob& job) {
  queue_.Insert(KeyOf(job), job);
}

void EasyBackfillPolicy::Remove(const SchedJob& job) {
  queue_.Erase(KeyOf(job), job);
}

void EasyBackfillPolicy::Schedule(SchedulingContext& ctx) {
  BackfillPass pass(ctx);
  queue_.Visit([](const GroupedQueue::Group&) { return 0.0; },
               [&](const GroupedQueue::Entry& e, GroupedQueue::Group& g) {
                 return pass.Visit(e, g);
               });
  pass.FillBeforeReservation(queue_, [](const GroupedQueue::Entry&) {});
}

std::optional<PendingReason> EasyBackfillPolicy::SkippedReason(
    const SchedJob& job, uint64_t pass) const {
  const GroupedQueue::Group* g = queue_.Find(KeyOf(job));
  if (g == nullptr || g->skipped_pass != pass) return std::nullopt;
  return g->skipped_reason;
}

}  // namespace loom
