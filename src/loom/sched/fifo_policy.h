#pragma once

#include "absl/container/btree_set.h"
#include "loom/sched/queue_policy.h"

namespace loom {

// `fifo`: strict arrival order with head-of-line blocking. Jobs start in
// submit order; the first job that does not fit stops the pass, and every
// job behind it waits for it. Simple and fair in a narrow sense; wastes
// capacity whenever the head is large. A requeued job keeps its place.
class FifoPolicy : public QueuePolicy {
 public:
  std::string_view name() const override { return "fifo"; }
  void Enqueue(const SchedJob& job) override;
  void Remove(const SchedJob& job) override;
  void Schedule(SchedulingContext& ctx) override;

 private:
  absl::btree_set<std::pair<absl::Time, JobId>> queue_;
};

}  // namespace loom
