#include "loom/sched/fair_share_policy.h"

#include <algorithm>
#include <tuple>

#include "loom/sched/backfill.h"

namespace loom {

void FairSharePolicy::Enqueue(const SchedJob& job) {
  queue_.Insert(KeyOf(job), job);
  by_age_.insert({job.request.submit_time, job.request.id});
}

void FairSharePolicy::Remove(const SchedJob& job) {
  queue_.Erase(KeyOf(job), job);
  by_age_.erase({job.request.submit_time, job.request.id});
}

void FairSharePolicy::Started(const SchedJob& job) {
  if (job.request.preemptible) victims_.insert(VictimKey(job));
}

void FairSharePolicy::Stopped(const SchedJob& job) {
  if (job.request.preemptible) victims_.erase(VictimKey(job));
}

void FairSharePolicy::Schedule(SchedulingContext& ctx) {
  BackfillPass pass(ctx);
  // A job that cannot start may preempt running preemptible jobs of a lower
  // priority class (a service replica: of its own class too), and a job within
  // its project's quota may preempt preemptible jobs of projects above theirs
  // (reclaiming what they borrowed), whatever their priority (DESIGN.md section
  // 4). The preferred victims lose the least work: the fewest GPU-seconds since
  // their last checkpoint, then the lowest priority, then the newest.
  pass.set_preempt([&](JobId id) {
    const SchedJob& head = ctx.job(id);
    const int priority = head.request.priority;
    // A service replica takes preemptible work of its own class too.
    const int64_t reach = int64_t{priority} + (head.request.service ? 1 : 0);
    const int quota = ctx.QuotaGpus(head.project);
    const bool reclaims =
        quota > 0 &&
        ctx.RunningGpus(head.project) + head.request.shape.TotalGpus() <= quota;
    std::vector<std::tuple<double, int, absl::Duration, JobId>> ranked;
    size_t scanned = 0;
    for (const auto& [victim_priority, age, victim] : victims_) {
      if ((!reclaims && victim_priority >= reach) ||
          ++scanned > kMaxVictimScan) {
        break;
      }
      const SchedJob& v = ctx.job(victim);
      if (v.phase != JobPhase::kRunning) continue;
      const bool borrower =
          v.project != head.project &&
          ctx.QuotaGpus(v.project) < ctx.RunningGpus(v.project);
      // The class of its own only for victims that are not replicas
      // themselves: preemptible replicas of one class never take turns.
      const bool reachable = victim_priority < priority ||
                             (victim_priority < reach && !v.request.service);
      if (reachable || (reclaims && borrower)) {
        ranked.emplace_back(v.WorkAtRisk(ctx.now()), victim_priority, age,
                            victim);
      }
    }
    const size_t keep = std::min(ranked.size(), kMaxVictimCandidates);
    std::partial_sort(ranked.begin(), ranked.begin() + keep, ranked.end());
    std::vector<JobId> candidates;
    candidates.reserve(keep);
    for (size_t i = 0; i < keep; ++i)
      candidates.push_back(std::get<3>(ranked[i]));
    return ctx.PreemptFor(id, candidates);
  });
  // A starving job goes first, so that it holds the reservation.
  if (!by_age_.empty()) {
    const JobId oldest = by_age_.begin()->second;
    const SchedJob& job = ctx.job(oldest);
    if (ctx.now() - job.request.submit_time >= starvation_age_) {
      GroupedQueue::Group* group = queue_.Find(KeyOf(job));
      GroupedQueue::Entry entry{job.request.submit_time, oldest,
                                job.request.time_limit};
      if (pass.Visit(entry, *group) == GroupedQueue::Step::kStarted) {
        Remove(job);
      }
    }
  }
  queue_.Visit(
      [&](const GroupedQueue::Group& g) {
        return ctx.NormalizedUsage(g.key.project);
      },
      [&](const GroupedQueue::Entry& e, GroupedQueue::Group& g) {
        if (pass.has_reservation() && pass.reservation().job == e.id) {
          return GroupedQueue::Step::kNext;
        }
        GroupedQueue::Step step = pass.Visit(e, g);
        if (step == GroupedQueue::Step::kStarted) {
          by_age_.erase({e.submit, e.id});
        }
        return step;
      });
  pass.FillBeforeReservation(queue_, [&](const GroupedQueue::Entry& e) {
    by_age_.erase({e.submit, e.id});
  });
}

std::optional<PendingReason> FairSharePolicy::SkippedReason(
    const SchedJob& job, uint64_t pass) const {
  const GroupedQueue::Group* g = queue_.Find(KeyOf(job));
  if (g == nullptr || g->skipped_pass != pass) return std::nullopt;
  return g->skipped_reason;
}

}  // namespace loom
