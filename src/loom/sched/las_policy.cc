#include "loom/sched/las_policy.h"

#include <algorithm>

namespace loom {
namespace {
// Bounds the work one pass spends on preemption.
constexpr int kMaxPreemptionAttempts = 4;
constexpr size_t kMaxVictimCandidates = 64;
}  // namespace

LasPolicy::LasPolicy(std::vector<double> thresholds)
    : thresholds_(std::move(thresholds)), running_(thresholds_.size() + 1) {}

int LasPolicy::QueueOf(double attained) const {
  return static_cast<int>(
      std::upper_bound(thresholds_.begin(), thresholds_.end(), attained) -
      thresholds_.begin());
}

void LasPolicy::Enqueue(const SchedJob& job) {
  pending_.Insert(KeyOf(job), job);
}

void LasPolicy::Remove(const SchedJob& job) { pending_.Erase(KeyOf(job), job); }

void LasPolicy::PushDemotion(const SchedJob& job, int queue) {
  if (queue >= static_cast<int>(thresholds_.size())) return;
  const double left = thresholds_[queue] - job.attained_gpu_seconds;
  const int gpus = std::max(1, job.request.shape.TotalGpus());
  absl::Time when = job.start_time + absl::Seconds(std::max(0.0, left) / gpus);
  demotions_.push({when, job.request.id, job.runs});
}

void LasPolicy::Started(const SchedJob& job) {
  // Only preemptible jobs can be victims, so only they are tracked.
  if (!job.request.preemptible) return;
  const int q = QueueOf(job.attained_gpu_seconds);
  running_[q].insert({job.start_time, job.request.id});
  running_queue_[job.request.id] = q;
  PushDemotion(job, q);
}

void LasPolicy::Stopped(const SchedJob& job) {
  auto it = running_queue_.find(job.request.id);
  if (it == running_queue_.end()) return;
  running_[it->second].erase({job.start_time, job.request.id});
  running_queue_.erase(it);
}

void LasPolicy::Demote(SchedulingContext& ctx) {
  while (!demotions_.empty() && demotions_.top().when <= ctx.now()) {
    Demotion d = demotions_.top();
    demotions_.pop();
    auto it = running_queue_.find(d.job);
    if (it == running_queue_.end()) continue;
    const SchedJob& job = ctx.job(d.job);
    if (job.runs != d.runs) continue;
    const int q = QueueOf(job.AttainedAt(ctx.now()));
    if (q == it->second) {
      // Rounding left it just short of the threshold: look again a second
      // later.
      demotions_.push({ctx.now() + absl::Seconds(1), d.job, d.runs});
      continue;
    }
    running_[it->second].erase({job.start_time, d.job});
    running_[q].insert({job.start_time, d.job});
    it->second = q;
    PushDemotion(job, q);
  }
}

bool LasPolicy::HasRunningBelow(int queue) const {
  for (size_t q = queue + 1; q < running_.size(); ++q) {
    if (!running_[q].empty()) return true;
  }
  return false;
}

void LasPolicy::Schedule(SchedulingContext& ctx) {
  Demote(ctx);
  int attempts = 0;
  using Step = GroupedQueue::Step;
  pending_.Visit(
      [](const GroupedQueue::Group&) { return 0.0; },
      [&](const GroupedQueue::Entry& e, GroupedQueue::Group& g) {
        const int q = g.key.cls;
        const bool victims_exist = HasRunningBelow(q);
        if (!ctx.state().HasRoom() && !victims_exist) {
          PendingReason full;
          full.code = PendingReason::Code::kHigherQueuesFirst;
          full.level = q;
          ctx.SetDefaultReason(full);
          return Step::kStop;
        }
        PendingReason why;
        if (ctx.TryStart(e.id, nullptr, &why)) return Step::kStarted;
        if (victims_exist && attempts < kMaxPreemptionAttempts) {
          ++attempts;
          std::vector<JobId> candidates;
          for (int v = static_cast<int>(running_.size()) - 1;
               v > q && candidates.size() < kMaxVictimCandidates; --v) {
            for (const auto& [start, id] : running_[v]) {
              if (ctx.job(id).phase != JobPhase::kRunning) continue;
              candidates.push_back(id);
              if (candidates.size() >= kMaxVictimCandidates) break;
            }
          }
          if (!candidates.empty() && ctx.PreemptFor(e.id, candidates)) {
            return Step::kNext;
          }
        }
        // Later jobs of this shape and queue cannot start either (unless
        // hot spares kept this one out: preemptible ones may use them).
        if (why.spare_nodes > 0) return Step::kNext;
        g.skipped_reason = why;
        g.skipped_pass = ctx.pass();
        return Step::kSkipGroup;
      });
}

std::optional<PendingReason> LasPolicy::SkippedReason(const SchedJob& job,
                                                      uint64_t pass) const {
  const GroupedQueue::Group* g = pending_.Find(KeyOf(job));
  if (g == nullptr || g->skipped_pass != pass) return std::nullopt;
  return g->skipped_reason;
}

}  // namespace loom
