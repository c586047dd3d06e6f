#include "loom/sched/backfill.h"

#include <algorithm>

namespace loom {

using Step = GroupedQueue::Step;

Step BackfillPass::Visit(const GroupedQueue::Entry& entry,
                         GroupedQueue::Group& group) {
  if (!ctx_.state().HasRoom()) {
    // Nothing can start, but a job ahead of any reservation may still
    // preempt.
    if (!reserved_ && preempt_ && preemptions_ < kMaxPreemptions) {
      ++preemptions_;
      if (preempt_(entry.id)) return Step::kNext;
    }
    // Say whether the GPUs are busy or there are no usable nodes at all.
    PendingReason full;
    full.code = PendingReason::Code::kNoSchedulableNodes;
    for (int m = 0; m < ctx_.state().num_models(); ++m) {
      if (ctx_.state().SchedulableGpus(m) > 0) {
        full.code = PendingReason::Code::kNoFreeGpus;
      }
    }
    ctx_.SetDefaultReason(full);
    return Step::kStop;
  }

  PendingReason why;
  if (!reserved_) {
    // No reservation yet: this job is the head.
    if (ctx_.TryStart(entry.id, nullptr, &why)) return Step::kStarted;
    if (preempt_ && preemptions_ < kMaxPreemptions) {
      ++preemptions_;
      if (preempt_(entry.id)) return Step::kNext;
    }
    reservation_ = ctx_.Reserve(entry.id);
    reserved_ = true;
    // Jobs of the same shape behind the head cannot fit either, unless hot
    // spares kept it out: preemptible jobs of its shape may use them.
    if (why.spare_nodes > 0) return Step::kNext;
    SkipGroup(group, why);
    return Step::kSkipGroup;
  }
  if (!reservation_.valid || EndsBeforeReservation(entry)) {
    if (ctx_.TryStart(entry.id, nullptr, &why)) return Step::kStarted;
    if (why.spare_nodes > 0) return Step::kNext;
    // It does not fit anywhere: neither does the rest of its group.
    SkipGroup(group, why);
    return Step::kSkipGroup;
  }
  if (ctx_.TryStart(entry.id, &reservation_.nodes, &why)) {
    return Step::kStarted;
  }
  PendingReason delay;
  delay.code = PendingReason::Code::kWouldDelayReservation;
  delay.other = reservation_.job;
  ctx_.SetReason(entry.id, delay);
  if (why.spare_nodes > 0) {
    // Kept off hot spares, where preemptible jobs of its group may go.
    if (std::find(blocked_.begin(), blocked_.end(), &group) == blocked_.end()) {
      blocked_.push_back(&group);
    }
    return Step::kNext;
  }
  SkipGroup(group, delay);
  // Later jobs of this group whose time limit ends before the reservation
  // may still start: `FillBeforeReservation` finds them without walking
  // the group.
  blocked_.push_back(&group);
  return Step::kSkipGroup;
}

}  // namespace loom
