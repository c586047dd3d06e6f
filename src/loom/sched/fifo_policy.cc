#include "loom/sched/fifo_policy.h"

namespace loom {

void FifoPolicy::Enqueue(const SchedJob& job) {
  queue_.insert({job.request.submit_time, job.request.id});
}

void FifoPolicy::Remove(const SchedJob& job) {
  queue_.erase({job.request.submit_time, job.request.id});
}

void FifoPolicy::Schedule(SchedulingContext& ctx) {
  for (auto it = queue_.begin(); it != queue_.end();) {
    const JobId id = it->second;
    if (ctx.TryStart(id, nullptr)) {
      it = queue_.erase(it);
      continue;
    }
    PendingReason behind;
    behind.code = PendingReason::Code::kBehindHead;
    behind.other = id;
    ctx.SetDefaultReason(behind);
    return;
  }
}

}  // namespace loom
