#include "loom/server/job_limits.h"

namespace loom {

void UserJobCounter::Add(const std::string& user, JobId id) {
  jobs_[user].insert(id);
}

void UserJobCounter::Remove(const std::string& user, JobId id) {
  auto it = jobs_.find(user);
  if (it == jobs_.end()) return;
  it->second.erase(id);
  if (it->second.empty()) jobs_.erase(it);
}

bool UserJobCounter::AtLimit(const std::string& user, int64_t limit,
                             const std::function<bool(JobId)>& ended) {
  if (limit <= 0) return false;
  auto it = jobs_.find(user);
  if (it == jobs_.end()) return false;
  absl::flat_hash_set<JobId>& ids = it->second;
  if (static_cast<int64_t>(ids.size()) < limit) return false;
  for (auto id = ids.begin(); id != ids.end();) {
    if (ended(*id)) {
      ids.erase(id++);
    } else {
      ++id;
    }
  }
  return static_cast<int64_t>(ids.size()) >= limit;
}

bool CheckpointThrottle::ShouldWrite(JobId job, absl::Time now) {
  auto [it, inserted] = jobs_.try_emplace(job, Entry{now, false});
  if (inserted) return true;
  Entry& e = it->second;
  if (now - e.last_write >= interval_) {
    e = {now, false};
    return true;
  }
  e.held = true;
  return false;
}

std::vector<JobId> CheckpointThrottle::TakeDue(absl::Time now) {
  std::vector<JobId> due;
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    Entry& e = it->second;
    if (now - e.last_write < interval_) {
      ++it;
    } else if (e.held) {
      due.push_back(it->first);
      e = {now, false};
      ++it;
    } else {
      jobs_.erase(it++);
    }
  }
  return due;
}

}  // namespace loom
