#include "loom/sched/grouped_queue.h"

namespace loom {

void GroupedQueue::Insert(const GroupKey& key, const SchedJob& job) {
  auto [it, inserted] = index_.emplace(key, static_cast<int>(groups_.size()));
  if (inserted) {
    Group g;
    g.key = key;
    groups_.push_back(std::move(g));
  }
  Group& g = groups_[it->second];
  if (g.jobs
          .insert(
              {job.request.submit_time, job.request.id, job.request.time_limit})
          .second) {
    ++size_;
    if (job.request.time_limit != absl::InfiniteDuration()) {
      g.by_limit.insert(
          {job.request.time_limit, job.request.submit_time, job.request.id});
    }
  }
}

void GroupedQueue::Erase(const GroupKey& key, const SchedJob& job) {
  Group* g = Find(key);
  if (g == nullptr) return;
  size_ -= g->jobs.erase(
      {job.request.submit_time, job.request.id, job.request.time_limit});
  g->by_limit.erase(
      {job.request.time_limit, job.request.submit_time, job.request.id});
}

GroupedQueue::Group* GroupedQueue::Find(const GroupKey& key) {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &groups_[it->second];
}

const GroupedQueue::Group* GroupedQueue::Find(const GroupKey& key) const {
  auto it = index_.find(key);
  return it == index_.end() ? nullptr : &groups_[it->second];
}

}  // namespace loom
