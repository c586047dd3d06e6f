#pragma once

#include <functional>
#include <vector>

#include "loom/sched/grouped_queue.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// The EASY backfilling rule, shared by the `backfill` and `fair` policies.
// Jobs are offered in the policy's order. The first job that cannot start
// gets a reservation (`SchedulingContext::Reserve`); after that a job may
// start early only if it cannot delay the reservation: it has a time limit
// that ends before the reserved start, or it fits on nodes the reservation
// does not need. Jobs without a time limit therefore only backfill onto
// nodes outside the reservation. A job kept off hot spares (its pending
// reason counts `spare_nodes`) does not skip the rest of its group: the
// preemptible jobs among them may run there.
class BackfillPass {
 public:
  explicit BackfillPass(SchedulingContext& ctx) : ctx_(ctx) {}

  // Called for the head job when it cannot start, before it takes the
  // reservation: returns true when it made room by preemption (or is
  // waiting for victims to stop); the job then waits without a reservation.
  // At most `kMaxPreemptions` calls per pass.
  using PreemptFn = std::function<bool(JobId)>;
  void set_preempt(PreemptFn fn) { preempt_ = std::move(fn); }
  static constexpr int kMaxPreemptions = 4;

  // Offers the job at `entry` of `group` and says how the grouped queue
  // should go on: a group whose shape no longer fits is skipped for the rest
  // of the pass; the pass ends when no GPU is free.
  GroupedQueue::Step Visit(const GroupedQueue::Entry& entry,
                           GroupedQueue::Group& group);

  // After the merged walk: offers the jobs of groups that were blocked by
  // the reservation and whose time limit ends before it, shortest first.
  // `on_started(entry)` is called for each job that starts.
  template <typename StartedFn>
  void FillBeforeReservation(GroupedQueue& queue, StartedFn&& on_started);

  bool has_reservation() const { return reservation_.valid; }
  const Reservation& reservation() const { return reservation_; }

 private:
  bool EndsBeforeReservation(const GroupedQueue::Entry& entry) const {
    return entry.time_limit != absl::InfiniteDuration() &&
           reservation_.start != absl::InfiniteFuture() &&
           ctx_.now() + entry.time_limit <= reservation_.start;
  }
  void SkipGroup(GroupedQueue::Group& group, const PendingReason& why) {
    group.skipped_reason = why;
    group.skipped_pass = ctx_.pass();
  }

  SchedulingContext& ctx_;
  PreemptFn preempt_;
  int preemptions_ = 0;
  bool reserved_ = false;
  Reservation reservation_;
  // Groups whose next job could only have started on reserved nodes.
  std::vector<GroupedQueue::Group*> blocked_;
};

template <typename StartedFn>
void BackfillPass::FillBeforeReservation(GroupedQueue& queue,
                                         StartedFn&& on_started) {
  if (!reservation_.valid || reservation_.start == absl::InfiniteFuture()) {
    return;
  }
  const absl::Duration bound = reservation_.start - ctx_.now();
  for (GroupedQueue::Group* group : blocked_) {
    queue.VisitByLimit(*group, bound, [&](const GroupedQueue::Entry& e) {
      if (ctx_.state().TotalFreeGpus() == 0) return GroupedQueue::Step::kStop;
      PendingReason why;
      if (ctx_.TryStart(e.id, nullptr, &why)) {
        on_started(e);
        return GroupedQueue::Step::kStarted;
      }
      // The same shape fails for the rest of the group (unless hot spares,
      // which preemptible jobs may use, kept this one out).
      return why.spare_nodes > 0 ? GroupedQueue::Step::kNext
                                 : GroupedQueue::Step::kSkipGroup;
    });
  }
}

}  // namespace loom
