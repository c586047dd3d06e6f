#include "loom/server/service_plan.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"

namespace loom {
namespace {

using ReplicaPhase = ReplicaView::Phase;

bool Active(const ReplicaView& r) {
  return r.phase != ReplicaPhase::kDraining &&
         r.phase != ReplicaPhase::kStopping;
}

// Ready and, where a gateway runs, in its backend: it takes traffic.
bool Serving(const ReplicaView& r, bool gateway_live) {
  return r.phase == ReplicaPhase::kReady && (r.in_backend || !gateway_live);
}

// Whom to remove first among `pool`: not serving before serving, then the
// youngest (highest job id).
void SortForRemoval(std::vector<const ReplicaView*>* pool, bool gateway_live) {
  std::sort(pool->begin(), pool->end(),
            [gateway_live](const ReplicaView* a, const ReplicaView* b) {
              const bool sa = Serving(*a, gateway_live);
              const bool sb = Serving(*b, gateway_live);
              if (sa != sb) return !sa;
              return a->job > b->job;
            });
}

}  // namespace

ServicePlan PlanService(const ServiceRecord& s,
                        const std::vector<ReplicaView>& replicas,
                        bool gateway_live, absl::Time now) {
  ServicePlan plan;
  // Drained replicas stop once the gateway has no session left on them
  // (their requests in flight finished), once they are out of its
  // backend, without a gateway, or after `kMaxDrain`.
  for (const ReplicaView& r : replicas) {
    if (r.phase != ReplicaPhase::kDraining) continue;
    if (!gateway_live || !r.in_backend || r.sessions.value_or(1) == 0 ||
        now - r.since >= kMaxDrain) {
      plan.stop.push_back(r.job);
    }
  }
  std::vector<const ReplicaView*> current, old;
  for (const ReplicaView& r : replicas) {
    if (!Active(r)) continue;
    (r.current ? current : old).push_back(&r);
  }
  if (s.deleting) {
    for (const ReplicaView* r : current) plan.drain.push_back(r->job);
    for (const ReplicaView* r : old) plan.drain.push_back(r->job);
    plan.status = absl::StrCat("deleting: ", replicas.size(),
                               " replica(s) left to drain and stop");
    return plan;
  }
  const int desired = s.desired;
  const UpdateSpec::Limits limits = s.spec.update.LimitsFor(desired);
  // Too many current ones (scaled down): drain the extra.
  if (static_cast<int>(current.size()) > desired) {
    SortForRemoval(&current, gateway_live);
    for (int i = 0; i < static_cast<int>(current.size()) - desired; ++i) {
      plan.drain.push_back(current[i]->job);
    }
  }
  // Old replicas go while at least `desired - unavailable` replicas serve.
  int serving = 0;
  for (const auto* pool : {&current, &old}) {
    for (const ReplicaView* r : *pool) serving += Serving(*r, gateway_live);
  }
  for (const ReplicaView* r : current) {
    if (std::find(plan.drain.begin(), plan.drain.end(), r->job) !=
            plan.drain.end() &&
        Serving(*r, gateway_live)) {
      --serving;
    }
  }
  const int min_serving = desired - limits.unavailable;
  // The old revision keeps a replica for each desired one the new revision
  // does not serve yet (as Kubernetes keeps the old ReplicaSet's count
  // until new pods are available): an old replica that stops serving (it
  // fails and restarts, or turns unready) is kept while the rollout has not
  // caught up, rather than replaced by one of a revision that may never get
  // ready.
  int current_serving_now = 0;
  for (const ReplicaView* r : current) {
    if (Serving(*r, gateway_live) &&
        std::find(plan.drain.begin(), plan.drain.end(), r->job) ==
            plan.drain.end()) {
      ++current_serving_now;
    }
  }
  const int old_keep = std::max(0, desired - current_serving_now);
  SortForRemoval(&old, gateway_live);
  int old_left = static_cast<int>(old.size());
  for (const ReplicaView* r : old) {
    if (!Serving(*r, gateway_live)) {
      if (old_left <= old_keep) continue;
      plan.drain.push_back(r->job);
      --old_left;
    } else if (serving - 1 >= min_serving) {
      plan.drain.push_back(r->job);
      --serving;
      --old_left;
    }
  }
  // No room to surge: a new replica waits for resources an old one holds
  // (one replica on one free GPU). Stop one old replica, then start one,
  // rather than wait for ever: one at a time (none while one drains or
  // stops), and only while every desired replica serves, so that a new
  // revision that still cannot be placed costs one replica, not all.
  const bool draining =
      std::any_of(replicas.begin(), replicas.end(), [](const ReplicaView& r) {
        return r.phase == ReplicaPhase::kDraining ||
               r.phase == ReplicaPhase::kStopping;
      });
  const bool stuck =
      std::any_of(current.begin(), current.end(),
                  [](const ReplicaView* r) { return r->unschedulable; });
  if (old_left > 0 && old_left == static_cast<int>(old.size()) && stuck &&
      !draining && serving >= desired) {
    plan.drain.push_back(old.back()->job);
    --old_left;
  }

  // Start current replicas up to `desired`, at most `surge` above it in
  // all (counting those still active after this pass's drains), unless a
  // restart backoff holds them back.
  const int active = static_cast<int>(current.size() + old.size());
  const int drained = static_cast<int>(plan.drain.size());
  const bool backoff = s.next_start && *s.next_start > now;
  const int want = desired - static_cast<int>(current.size());
  if (want > 0 && !backoff) {
    plan.create = std::max(
        0, std::min(want, desired + limits.surge - (active - drained)));
  }
  // What to say.
  int current_serving = 0;
  const ReplicaView* waiting = nullptr;
  for (const ReplicaView* r : current) {
    if (Serving(*r, gateway_live)) {
      ++current_serving;
    } else if (waiting == nullptr || r->since < waiting->since) {
      waiting = r;
    }
  }
  std::string why;
  if (waiting != nullptr) {
    why = waiting->phase == ReplicaPhase::kPending
              ? absl::StrCat("replica job ", waiting->job, " pending",
                             waiting->pending_reason.empty()
                                 ? ""
                                 : absl::StrCat(": ", waiting->pending_reason))
              : absl::StrCat(
                    "replica job ", waiting->job, " not ready for ",
                    FormatDurationShort(now - waiting->since),
                    waiting->phase == ReplicaPhase::kReady
                        ? " (ready, not in the balancer yet)"
                    : waiting->not_ready_reason.empty()
                        ? ""
                        : absl::StrCat(" (", waiting->not_ready_reason, ")"));
  }
  if (backoff && want > 0) {
    why = absl::StrCat(why.empty() ? "" : why + "; ", s.failures,
                       " replica failure(s) in a row: the next starts in ",
                       FormatDurationShort(*s.next_start - now));
  }
  if (!old.empty()) {
    plan.status = absl::StrCat(
        "rolling out revision ", s.revision.substr(0, 12), ": ",
        current_serving, " of ", desired, " new replica(s) serving, ",
        old.size(), " old still serving",
        why.empty() ? "" : absl::StrCat("; waiting: ", why));
  } else {
    plan.status =
        absl::StrCat(current_serving, " of ", desired, " replica(s) serving",
                     why.empty() ? "" : absl::StrCat("; ", why));
  }
  plan.settled = old.empty() && current_serving == desired &&
                 plan.create == 0 && plan.drain.empty() && plan.stop.empty() &&
                 !draining;
  return plan;
}

}  // namespace loom
