#pragma once

#include <tuple>

#include "absl/container/btree_set.h"
#include "loom/sched/grouped_queue.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// `fair` (loom's default). Order: priority class (higher first), then the
// project's fair share (decayed GPU-seconds divided by the project's weight,
// lower first, so a project that used less than its share goes ahead), then
// age. On top of that order runs EASY backfilling (`BackfillPass`): the
// first job that cannot start holds a reservation and later jobs may only
// fill around it. To keep large gangs from starving behind a stream of jobs
// from lighter projects, a job that has waited longer than
// `starvation_age` is offered first, ahead of fair-share order, and so takes
// the reservation if it cannot start. Usage is static within a pass (as in
// Slurm, which recomputes fair share periodically, not per job).
class FairSharePolicy : public QueuePolicy {
 public:
  explicit FairSharePolicy(absl::Duration starvation_age)
      : starvation_age_(starvation_age) {}

  std::string_view name() const override { return "fair"; }
  bool UsesReservations() const override { return true; }
  void Enqueue(const SchedJob& job) override;
  void Remove(const SchedJob& job) override;
  void Started(const SchedJob& job) override;
  void Stopped(const SchedJob& job) override;
  void Schedule(SchedulingContext& ctx) override;
  std::optional<PendingReason> SkippedReason(const SchedJob& job,
                                             uint64_t pass) const override;

 private:
  static GroupedQueue::GroupKey KeyOf(const SchedJob& job) {
    return {-job.request.priority, job.project, job.request.shape,
            job.selector};
  }

  static constexpr size_t kMaxVictimCandidates = 64;
  // Running preemptible jobs looked at per preemption attempt.
  static constexpr size_t kMaxVictimScan = 4096;

  const absl::Duration starvation_age_;
  GroupedQueue queue_;
  // Every pending job by (submit, id): finds the oldest in O(1).
  absl::btree_set<std::pair<absl::Time, JobId>> by_age_;
  // Running preemptible jobs, the preferred victims first: lowest priority,
  // then the most recently started (the least work to lose).
  static std::tuple<int, absl::Duration, JobId> VictimKey(const SchedJob& j) {
    return {j.request.priority, absl::UnixEpoch() - j.start_time, j.request.id};
  }
  absl::btree_set<std::tuple<int, absl::Duration, JobId>> victims_;
};

}  // namespace loom
