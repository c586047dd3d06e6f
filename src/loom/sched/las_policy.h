#pragma once

#include <queue>
#include <vector>

#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "loom/sched/grouped_queue.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// `las`: discretised two-dimensional least attained service, after Tiresias
// (Gu et al., NSDI'19). A job's attained service is the GPU-seconds it has
// received (GPUs x time run). Thresholds split jobs into a few queues; queue 0
// holds jobs that received the least. Jobs run in queue order, FIFO within a
// queue, with no knowledge of durations. When a job of a higher queue (lower
// number) cannot start, running preemptible jobs that have fallen to a lower
// queue are preempted to make room, lowest queue first and most recently
// started first within a queue; the victims go back to the queue with the
// service they received and resume later (paying a restart cost in the
// simulator). Jobs are never preempted by jobs of their own queue.
class LasPolicy : public QueuePolicy {
 public:
  // `thresholds`: ascending attained-service limits in GPU-seconds; N
  // thresholds make N + 1 queues.
  explicit LasPolicy(std::vector<double> thresholds);

  std::string_view name() const override { return "las"; }
  void Enqueue(const SchedJob& job) override;
  void Remove(const SchedJob& job) override;
  void Started(const SchedJob& job) override;
  void Stopped(const SchedJob& job) override;
  void Schedule(SchedulingContext& ctx) override;
  std::optional<PendingReason> SkippedReason(const SchedJob& job,
                                             uint64_t pass) const override;

  int QueueOf(double attained_gpu_seconds) const;

 private:
  GroupedQueue::GroupKey KeyOf(const SchedJob& job) const {
    return {QueueOf(job.attained_gpu_seconds), 0, job.request.shape,
            job.selector};
  }
  // Moves running jobs whose service crossed a threshold to the next queue.
  void Demote(SchedulingContext& ctx);
  void PushDemotion(const SchedJob& job, int queue);
  bool HasRunningBelow(int queue) const;

  struct Demotion {
    absl::Time when;
    JobId job;
    int runs;  // the run it belongs to; stale entries are dropped
    friend bool operator>(const Demotion& a, const Demotion& b) {
      return std::tie(a.when, a.job) > std::tie(b.when, b.job);
    }
  };

  const std::vector<double> thresholds_;
  GroupedQueue pending_;
  // Running preemptible jobs per queue, most recently started first.
  std::vector<absl::btree_set<std::pair<absl::Time, JobId>,
                              std::greater<std::pair<absl::Time, JobId>>>>
      running_;
  absl::flat_hash_map<JobId, int> running_queue_;
  std::priority_queue<Demotion, std::vector<Demotion>, std::greater<Demotion>>
      demotions_;
};

}  // namespace loom
