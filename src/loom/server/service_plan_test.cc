// The service reconciler's decisions (service_plan.cc): scale, rolling
// update within surge and unavailability, a stalled rollout, the one-GPU
// case, drains that end, deletion.

#include "loom/server/service_plan.h"

#include <algorithm>
#include <vector>

#include "gtest/gtest.h"

namespace loom {
namespace {

using ReplicaPhase = ReplicaView::Phase;

absl::Time At(double s) {
  return absl::FromUnixMillis(static_cast<int64_t>(1'000'000 + s * 1000));
}

ServiceRecord Service(int desired) {
  ServiceRecord s;
  s.name = "embed";
  s.revision = "new";
  s.desired = desired;
  s.spec.replicas = {desired, desired, false};
  return s;  // update: surge 1, unavailable 0
}

ReplicaView R(JobId id, bool current, ReplicaPhase phase, double since = 0) {
  ReplicaView r;
  r.job = id;
  r.current = current;
  r.phase = phase;
  r.since = At(since);
  r.in_backend =
      phase == ReplicaPhase::kReady || phase == ReplicaPhase::kDraining;
  return r;
}

bool Has(const std::vector<JobId>& v, JobId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

TEST(PlanService, StartsWhatIsMissingAndSettles) {
  ServicePlan p = PlanService(Service(3), {}, true, At(1));
  EXPECT_EQ(p.create, 3);
  EXPECT_EQ(p.status, "0 of 3 replica(s) serving");
  p = PlanService(
      Service(3),
      {R(1, true, ReplicaPhase::kReady), R(2, true, ReplicaPhase::kReady),
       R(3, true, ReplicaPhase::kReady)},
      true, At(1));
  EXPECT_EQ(p.create, 0);
  EXPECT_TRUE(p.drain.empty());
  EXPECT_TRUE(p.settled);
  EXPECT_EQ(p.status, "3 of 3 replica(s) serving");
}

TEST(PlanService, ScalesDownNotServingAndYoungestFirst) {
  ServicePlan p = PlanService(
      Service(1),
      {R(1, true, ReplicaPhase::kReady), R(2, true, ReplicaPhase::kReady),
       R(3, true, ReplicaPhase::kStarting)},
      true, At(1));
  ASSERT_EQ(p.drain.size(), 2u);
  EXPECT_TRUE(Has(p.drain, 3));  // not serving
  EXPECT_TRUE(Has(p.drain, 2));  // the younger of the serving ones
}

TEST(PlanService, RollingUpdateKeepsEveryReplicaServing) {
  ServiceRecord s = Service(3);
  // Three old ones serve: one new one surges.
  std::vector<ReplicaView> r = {R(1, false, ReplicaPhase::kReady),
                                R(2, false, ReplicaPhase::kReady),
                                R(3, false, ReplicaPhase::kReady)};
  ServicePlan p = PlanService(s, r, true, At(1));
  EXPECT_EQ(p.create, 1);
  EXPECT_TRUE(p.drain.empty());
  EXPECT_NE(p.status.find("rolling out revision new: 0 of 3 new replica(s) "
                          "serving, 3 old still serving"),
            std::string::npos)
      << p.status;
  // The new one starts: nothing more until it serves.
  r.push_back(R(4, true, ReplicaPhase::kStarting, 1));
  p = PlanService(s, r, true, At(5));
  EXPECT_EQ(p.create, 0);
  EXPECT_TRUE(p.drain.empty());
  EXPECT_NE(p.status.find("waiting: replica job 4 not ready for 4s"),
            std::string::npos)
      << p.status;
  // Ready but not in the balancer yet: still nothing.
  r.back().phase = ReplicaPhase::kReady;
  r.back().in_backend = false;
  p = PlanService(s, r, true, At(6));
  EXPECT_TRUE(p.drain.empty());
  // Serving: one old one drains, and the next new one starts.
  r.back().in_backend = true;
  p = PlanService(s, r, true, At(7));
  ASSERT_EQ(p.drain.size(), 1u);
  EXPECT_FALSE(Has(p.drain, 4));
  EXPECT_EQ(p.create, 1);
}

TEST(PlanService, ANewRevisionThatNeverGetsReadyStopsTheRollout) {
  std::vector<ReplicaView> r = {R(1, false, ReplicaPhase::kReady),
                                R(2, false, ReplicaPhase::kReady),
                                R(3, false, ReplicaPhase::kReady),
                                R(4, true, ReplicaPhase::kStarting, 0)};
  ServicePlan p = PlanService(Service(3), r, true, At(120));
  EXPECT_EQ(p.create, 0);
  EXPECT_TRUE(p.drain.empty());  // the old ones keep serving
  EXPECT_NE(p.status.find("3 old still serving; waiting: replica job 4 not "
                          "ready for 2.0m"),
            std::string::npos)
      << p.status;
}

TEST(PlanService, AStalledRolloutKeepsTheOldReplicasCount) {
  // The new revision never gets ready; an old replica fails and waits to
  // run again (pending), another turns unready: both stay, and nothing of
  // the new revision is started in their place.
  std::vector<ReplicaView> r = {R(1, false, ReplicaPhase::kPending, 100),
                                R(2, false, ReplicaPhase::kStarting, 100),
                                R(3, false, ReplicaPhase::kReady),
                                R(4, true, ReplicaPhase::kStarting, 0)};
  ServicePlan p = PlanService(Service(3), r, true, At(120));
  EXPECT_TRUE(p.drain.empty()) << p.drain.size();
  EXPECT_EQ(p.create, 0);
  // Once new replicas serve, old ones that do not serve go first.
  r[3] = R(4, true, ReplicaPhase::kReady);
  r.push_back(R(5, true, ReplicaPhase::kReady));
  p = PlanService(Service(3), r, true, At(130));
  EXPECT_TRUE(Has(p.drain, 1));
  EXPECT_TRUE(Has(p.drain, 2));
  EXPECT_FALSE(Has(p.drain, 3));  // still needed: 2 new of 3 serve
  EXPECT_EQ(p.create, 1);
}

TEST(PlanService, OneReplicaOnOneGpuStopsTheOldOneFirst) {
  // No room to surge: the new replica cannot be placed.
  ReplicaView stuck = R(2, true, ReplicaPhase::kPending, 1);
  stuck.unschedulable = true;
  stuck.pending_reason = "waiting for 1 free GPU";
  ServicePlan p = PlanService(
      Service(1), {R(1, false, ReplicaPhase::kReady), stuck}, true, At(2));
  EXPECT_EQ(p.drain, std::vector<JobId>{1});
  // Only one at a time: while one drains, no other.
  ServicePlan again = PlanService(Service(1),
                                  {R(1, false, ReplicaPhase::kDraining, 2),
                                   stuck, R(3, false, ReplicaPhase::kReady)},
                                  true, At(3));
  EXPECT_FALSE(Has(again.drain, 3));
  // Nor while one stops; and once one is gone for a replica that still
  // cannot be placed, the others stay: a rollout costs one replica at most.
  ServicePlan stopping = PlanService(
      Service(2),
      {R(1, false, ReplicaPhase::kStopping, 2), stuck,
       R(3, false, ReplicaPhase::kReady), R(4, false, ReplicaPhase::kReady)},
      true, At(3));
  EXPECT_TRUE(stopping.drain.empty());
  ServicePlan short_one = PlanService(
      Service(2), {stuck, R(3, false, ReplicaPhase::kReady)}, true, At(4));
  EXPECT_TRUE(short_one.drain.empty());
}

TEST(PlanService, DrainsEndWhenTheBalancerHasNoSessionLeft) {
  ReplicaView busy = R(1, false, ReplicaPhase::kDraining, 0);
  busy.sessions = 2;
  ReplicaView idle = R(2, false, ReplicaPhase::kDraining, 0);
  idle.sessions = 0;
  ReplicaView gone = R(3, false, ReplicaPhase::kDraining, 0);
  gone.in_backend = false;
  ServicePlan p = PlanService(Service(0), {busy, idle, gone}, true, At(5));
  EXPECT_FALSE(Has(p.stop, 1));
  EXPECT_TRUE(Has(p.stop, 2));
  EXPECT_TRUE(Has(p.stop, 3));
  // After the longest drain, or without a gateway, at once.
  EXPECT_TRUE(Has(PlanService(Service(0), {busy}, true, At(31)).stop, 1));
  EXPECT_TRUE(Has(PlanService(Service(0), {busy}, false, At(5)).stop, 1));
}

TEST(PlanService, ABackoffHoldsRestartsBack) {
  ServiceRecord s = Service(2);
  s.failures = 3;
  s.next_start = At(10);
  ServicePlan p =
      PlanService(s, {R(1, true, ReplicaPhase::kReady)}, true, At(6));
  EXPECT_EQ(p.create, 0);
  EXPECT_NE(p.status.find("3 replica failure(s) in a row: the next starts "
                          "in 4s"),
            std::string::npos)
      << p.status;
  EXPECT_EQ(
      PlanService(s, {R(1, true, ReplicaPhase::kReady)}, true, At(10)).create,
      1);
}

TEST(PlanService, DeletionDrainsEverything) {
  ServiceRecord s = Service(2);
  s.deleting = true;
  ServicePlan p = PlanService(
      s,
      {R(1, true, ReplicaPhase::kReady), R(2, false, ReplicaPhase::kPending)},
      true, At(1));
  EXPECT_EQ(p.create, 0);
  EXPECT_TRUE(Has(p.drain, 1));
  EXPECT_TRUE(Has(p.drain, 2));
}

}  // namespace
}  // namespace loom
