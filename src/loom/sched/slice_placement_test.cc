// Parts of GPUs (slice_placement.h, docs/scheduling.md "GPU partitions"):
// MIG instances and shares placed best-fit, layouts changed only on idle
// GPUs, no slice given twice, and the whole-GPU invariants kept.

#include "loom/sched/slice_placement.h"

#include <map>
#include <random>
#include <set>

#include "gtest/gtest.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

constexpr int64_t kGi = int64_t{1} << 30;

// `nodes` H200 nodes of 8 GPUs (141 GB); the first `mig_gpus` of each in
// MIG mode with seven 1g.18gb instances.
Cluster MigCluster(int nodes, int mig_gpus, bool dynamic, bool sharing = true) {
  Cluster c = MakeCluster({{nodes, 0}}, 4, 4);
  PoolSpec& pool = c.pools[0];
  pool.gpu_memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
  pool.sharing = sharing;
  pool.mig.gpus = mig_gpus;
  pool.mig.dynamic = dynamic;
  for (int i = 0; i < 7; ++i) pool.mig.layout.push_back({0, i});
  return c;
}

std::unique_ptr<Scheduler> Make(const Cluster& c) {
  return std::make_unique<Scheduler>(
      c, *MakeQueuePolicy("fifo", PolicyOptions{}), SchedulerOptions{});
}

JobRequest Mig(JobId id, const std::string& profile, int tasks = 1) {
  JobRequest j = MakeJob(id, tasks, 1);
  j.shape.slice.mig = profile;
  return j;
}

JobRequest Share(JobId id, int64_t bytes, int tasks = 1) {
  JobRequest j = MakeJob(id, tasks, 1);
  j.shape.slice.share_bytes = bytes;
  return j;
}

const Placement& PlacementOf(const Scheduler& s, JobId id) {
  return s.Find(id)->placement;
}

TEST(SlicePlacement, SevenSlicesAndAWholeGpuShareOneNode) {
  Cluster c = MigCluster(1, 1, /*dynamic=*/false);
  auto s = Make(c);
  for (JobId id = 1; id <= 7; ++id) {
    ASSERT_EQ(s->Submit(Mig(id, "1g.18gb"), T(0))->kind,
              SubmitOutcome::Kind::kQueued);
  }
  ASSERT_TRUE(s->Submit(MakeJob(8, 1, 7), T(0)).ok());
  PassResult r = s->Schedule(T(1));
  EXPECT_EQ(r.started.size(), 8u);
  std::set<int> starts;
  for (JobId id = 1; id <= 7; ++id) {
    const TaskPlacement& t = PlacementOf(*s, id).tasks[0];
    EXPECT_EQ(t.slice_gpu, 0);
    EXPECT_EQ(t.gpu_mask, 0u);
    starts.insert(t.mig_start);
  }
  EXPECT_EQ(starts.size(), 7u) << "an instance given twice";
  EXPECT_EQ(PlacementOf(*s, 8).tasks[0].gpu_mask, 0xFEu);
  EXPECT_TRUE(s->state().CheckInvariants().ok())
      << s->state().CheckInvariants();
  // An eighth slice waits, and says why.
  ASSERT_TRUE(s->Submit(Mig(9, "1g.18gb"), T(1)).ok());
  s->Schedule(T(2));
  EXPECT_EQ(s->Find(9)->phase, JobPhase::kPending);
  EXPECT_NE(s->ExplainPending(9, T(2)).find("1g.18gb MIG instance"),
            std::string::npos)
      << s->ExplainPending(9, T(2));
  ASSERT_TRUE(s->Finish(3, T(3)).ok());
  s->Schedule(T(4));
  EXPECT_EQ(s->Find(9)->phase, JobPhase::kRunning);
  EXPECT_EQ(PlacementOf(*s, 9).tasks[0].mig_start, 2);
}

TEST(SlicePlacement, AnUnknownOrUndeclaredProfileIsInfeasible) {
  Cluster c = MigCluster(2, 1, /*dynamic=*/false);
  auto s = Make(c);
  auto out = s->Submit(Mig(1, "1g.10gb"), T(0));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible);
  EXPECT_NE(out->reason.find("has the MIG profile 1g.10gb"), std::string::npos)
      << out->reason;
  out = s->Submit(Mig(2, "3g.71gb"), T(0));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible) << out->reason;
  // Three slices need three MIG GPUs: the cluster has two.
  out = s->Submit(Mig(3, "1g.18gb", 3), T(0));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible) << out->reason;
  JobRequest both = Mig(4, "1g.18gb");
  both.shape.slice.share_bytes = kGi;
  EXPECT_FALSE(s->Submit(both, T(0)).ok());
  JobRequest two = Mig(5, "1g.18gb");
  two.shape.gpus_per_task = 2;
  EXPECT_FALSE(s->Submit(two, T(0)).ok());
}

TEST(SlicePlacement, AnIdleGpuIsRepartitionedForAnotherProfile) {
  Cluster c = MigCluster(1, 1, /*dynamic=*/true);
  auto s = Make(c);
  // All GPUs but the MIG one busy with a whole-GPU job.
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 7), T(0)).ok());
  ASSERT_TRUE(s->Submit(Mig(2, "1g.18gb"), T(0)).ok());
  s->Schedule(T(1));
  ASSERT_EQ(s->Find(2)->phase, JobPhase::kRunning);
  // 3g.71gb: no instance, and the MIG GPU is not idle: it waits.
  ASSERT_TRUE(s->Submit(Mig(3, "3g.71gb"), T(1)).ok());
  s->Schedule(T(2));
  EXPECT_EQ(s->Find(3)->phase, JobPhase::kPending);
  const std::vector<MigInstance> before = s->state().Part(0, 0).layout;
  EXPECT_EQ(before.size(), 7u);
  // Once the GPU is idle it is partitioned anew.
  ASSERT_TRUE(s->Finish(2, T(3)).ok());
  s->Schedule(T(4));
  ASSERT_EQ(s->Find(3)->phase, JobPhase::kRunning);
  const TaskPlacement& t = PlacementOf(*s, 3).tasks[0];
  EXPECT_EQ(t.slice_gpu, 0);
  const GpuPart& part = s->state().Part(0, 0);
  const std::vector<MigProfile>& profiles = s->state().MigProfilesOn(0);
  ASSERT_EQ(part.layout.size(), 2u);
  EXPECT_EQ(profiles[part.layout[0].profile].name, "3g.71gb");
  EXPECT_EQ(profiles[part.layout[1].profile].name, "3g.71gb");
  EXPECT_TRUE(s->state().CheckInvariants().ok());
}

TEST(SlicePlacement, AFreeWholeGpuBecomesMigOnlyInADynamicPool) {
  for (bool dynamic : {false, true}) {
    Cluster c = MigCluster(1, 0, dynamic);
    c.pools[0].mig.layout.clear();
    auto s = Make(c);
    auto out = s->Submit(Mig(1, "2g.35gb"), T(0));
    ASSERT_TRUE(out.ok());
    if (!dynamic) {
      EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible);
      continue;
    }
    ASSERT_TRUE(s->Submit(Mig(2, "2g.35gb"), T(0)).ok());
    s->Schedule(T(1));
    ASSERT_EQ(s->Find(1)->phase, JobPhase::kRunning);
    ASSERT_EQ(s->Find(2)->phase, JobPhase::kRunning);
    // Both on one GPU (three 2g.35gb fit), seven GPUs left whole.
    EXPECT_EQ(PlacementOf(*s, 1).tasks[0].slice_gpu,
              PlacementOf(*s, 2).tasks[0].slice_gpu);
    EXPECT_EQ(s->state().FreeGpus(0), 7);
    ASSERT_TRUE(s->Finish(1, T(2)).ok());
    ASSERT_TRUE(s->Finish(2, T(2)).ok());
    EXPECT_EQ(s->state().FreeGpus(0), 8) << "not whole again";
    EXPECT_EQ(s->state().PartMask(0), 0u);
    EXPECT_TRUE(s->state().CheckInvariants().ok());
  }
}

TEST(SlicePlacement, SharesFillOneGpuBestFitThenTakeAnother) {
  Cluster c = MigCluster(2, 0, false);
  auto s = Make(c);
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 6), T(0)).ok());  // node 0: 2 free
  s->Schedule(T(0));
  ASSERT_TRUE(s->Submit(Share(2, 40 * kGi), T(0)).ok());
  ASSERT_TRUE(s->Submit(Share(3, 60 * kGi), T(0)).ok());
  ASSERT_TRUE(s->Submit(Share(4, 110 * kGi), T(0)).ok());
  s->Schedule(T(1));
  for (JobId id : {2, 3, 4}) {
    ASSERT_EQ(s->Find(id)->phase, JobPhase::kRunning) << id;
    EXPECT_EQ(PlacementOf(*s, id).tasks[0].node, 0) << "the fuller node";
  }
  EXPECT_EQ(PlacementOf(*s, 2).tasks[0].slice_gpu,
            PlacementOf(*s, 3).tasks[0].slice_gpu);
  EXPECT_NE(PlacementOf(*s, 2).tasks[0].slice_gpu,
            PlacementOf(*s, 4).tasks[0].slice_gpu);
  EXPECT_EQ(s->state().FreeGpus(0), 0);
  EXPECT_EQ(s->state().FreeGpus(1), 8);
  // A GPU holds 131 GiB. Node 0 is full: 80 GiB more goes to node 1;
  // 20 GiB fits best beside the 110 GiB share.
  ASSERT_TRUE(s->Submit(Share(5, 80 * kGi), T(1)).ok());
  ASSERT_TRUE(s->Submit(Share(6, 20 * kGi), T(1)).ok());
  s->Schedule(T(2));
  EXPECT_EQ(PlacementOf(*s, 5).tasks[0].node, 1);
  EXPECT_EQ(PlacementOf(*s, 6).tasks[0].slice_gpu,
            PlacementOf(*s, 4).tasks[0].slice_gpu);
  EXPECT_TRUE(s->state().CheckInvariants().ok())
      << s->state().CheckInvariants();
  // A pool without sharing refuses shares.
  Cluster none = MigCluster(1, 0, false, /*sharing=*/false);
  auto t = Make(none);
  auto out = t->Submit(Share(1, kGi), T(0));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(out->kind, SubmitOutcome::Kind::kInfeasible);
}

TEST(SlicePlacement, ASharedGpuThatIsFullSaysWhy) {
  Cluster c = MigCluster(1, 0, false);
  auto s = Make(c);
  ASSERT_TRUE(s->Submit(MakeJob(1, 1, 7), T(0)).ok());
  ASSERT_TRUE(s->Submit(Share(2, 100 * kGi), T(0)).ok());
  s->Schedule(T(1));
  ASSERT_TRUE(s->Submit(Share(3, 50 * kGi), T(1)).ok());
  s->Schedule(T(2));
  EXPECT_EQ(s->Find(3)->phase, JobPhase::kPending);
  const std::string why = s->ExplainPending(3, T(2));
  EXPECT_NE(why.find("waiting for 50Gi of a shared"), std::string::npos) << why;
}

// Random submits and finishes of whole, MIG and shared jobs: after every
// step the state's invariants hold (no GPU, instance or memory given twice,
// valid layouts), and a GPU's MIG layout only changes while it has no task
// (or as it turns whole again).
TEST(SlicePlacement, RandomMixKeepsInvariantsAndChangesOnlyIdleLayouts) {
  Cluster c = MigCluster(6, 2, /*dynamic=*/true);
  c.pools[0].mig.layout = {{3, 0}, {2, 4}, {0, 6}};  // 3g + 2g + 1g.18gb
  for (const char* policy : {"fifo", "fair"}) {
    auto s = std::make_unique<Scheduler>(
        c, *MakeQueuePolicy(policy, PolicyOptions{}), SchedulerOptions{});
    std::mt19937 rng(7);
    const std::vector<std::string> profiles = {
        "1g.18gb", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb"};
    std::vector<JobId> running;
    JobId next = 1;
    for (int step = 0; step < 400; ++step) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      if (kind < 3 && !running.empty()) {
        const size_t i =
            std::uniform_int_distribution<size_t>(0, running.size() - 1)(rng);
        ASSERT_TRUE(s->Finish(running[i], T(step)).ok());
        running.erase(running.begin() + static_cast<long>(i));
      } else {
        JobRequest j;
        if (kind < 5) {
          j = MakeJob(next, 1,
                      1 << std::uniform_int_distribution<int>(0, 2)(rng));
        } else if (kind < 8) {
          j = Mig(next,
                  profiles[std::uniform_int_distribution<size_t>(
                      0, profiles.size() - 1)(rng)],
                  std::uniform_int_distribution<int>(1, 2)(rng));
        } else {
          j = Share(next,
                    std::uniform_int_distribution<int64_t>(1, 120)(rng) * kGi);
        }
        ++next;
        ASSERT_TRUE(s->Submit(j, T(step)).ok());
      }
      std::map<std::pair<int, int>, GpuPart> before;
      for (int n = 0; n < s->state().num_nodes(); ++n) {
        for (int g = 0; g < 8; ++g) before[{n, g}] = s->state().Part(n, g);
      }
      PassResult r = s->Schedule(T(step));
      for (JobId id : r.started) running.push_back(id);
      ASSERT_TRUE(s->state().CheckInvariants().ok())
          << policy << " step " << step << ": " << s->state().CheckInvariants();
      for (int n = 0; n < s->state().num_nodes(); ++n) {
        for (int g = 0; g < 8; ++g) {
          const GpuPart& was = before[{n, g}];
          const GpuPart& now = s->state().Part(n, g);
          if (was.mode == GpuMode::kMig && now.mode == GpuMode::kMig &&
              was.layout != now.layout) {
            EXPECT_EQ(was.tasks, 0)
                << "node " << n << " GPU " << g
                << " repartitioned under running tasks at step " << step;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace loom
