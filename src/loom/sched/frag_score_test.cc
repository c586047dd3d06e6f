// The FGD fragmentation measure (frag_score.h) and the `fgd` slice score
// (slice_placement.h): it differs from best fit where best fit strands
// capacity the workload cannot use, and keeps the cluster state's
// invariants.

#include "loom/sched/frag_score.h"

#include <random>

#include "gtest/gtest.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/test_util.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::MakeJob;
using testing::T;

constexpr int64_t kFgdGb = int64_t{1000} * 1000 * 1000;

NodeFree FreeNode(std::vector<int64_t> free, int64_t gpu_memory = 1000) {
  NodeFree n;
  n.gpus = static_cast<int>(free.size());
  n.gpu_memory = gpu_memory;
  n.sharing = true;
  n.schedulable = true;
  n.cpus_milli = 8000;
  n.memory_bytes = 64 * kFgdGb;
  for (size_t g = 0; g < free.size(); ++g) n.free[g] = free[g];
  return n;
}

TaskType ShareType(int64_t bytes) {
  TaskType t;
  t.gpus = 0;
  t.share_bytes = bytes;
  t.popularity = 1;
  return t;
}

TaskType WholeType(int gpus) {
  TaskType t;
  t.gpus = gpus;
  t.popularity = 1;
  return t;
}

TEST(FragScore, FreeCapacityATaskCannotUseIsFragmented) {
  const NodeFree n = FreeNode({1000, 300, 0});
  EXPECT_DOUBLE_EQ(FreeCapacity(n), 1.3);
  // A share of 400 fits on GPU 0; GPU 1's 300 is too little for it.
  EXPECT_DOUBLE_EQ(Fragmentation(n, ShareType(400)), 0.3);
  // A share of 200 fits on both.
  EXPECT_DOUBLE_EQ(Fragmentation(n, ShareType(200)), 0.0);
  // One whole GPU fits; the partial GPU is lost to it.
  EXPECT_DOUBLE_EQ(Fragmentation(n, WholeType(1)), 0.3);
  // Two whole GPUs do not fit: all the free capacity is lost to them.
  EXPECT_DOUBLE_EQ(Fragmentation(n, WholeType(2)), 1.3);
  // Nor does a task of another model, or one that wants more CPU.
  TaskType other = ShareType(100);
  other.gpu_model = 3;
  EXPECT_DOUBLE_EQ(Fragmentation(n, other), 1.3);
  TaskType cpu = ShareType(100);
  cpu.cpus_milli = 9000;
  EXPECT_DOUBLE_EQ(Fragmentation(n, cpu), 1.3);
  // Expected fragmentation weights the types by popularity.
  TargetWorkload w = MakeTargetWorkload(
      {ShareType(400), ShareType(400), ShareType(400), WholeType(2)});
  ASSERT_EQ(w.types.size(), 2u);
  EXPECT_DOUBLE_EQ(w.types[0].popularity, 0.75);
  EXPECT_DOUBLE_EQ(ExpectedFragmentation(n, w), 0.75 * 0.3 + 0.25 * 1.3);
  NodeFree down = n;
  down.schedulable = false;
  EXPECT_DOUBLE_EQ(ExpectedFragmentation(down, w), 0.0);
}

// One node of 8 GPUs of 141 GB that shares them.
Cluster FgdShareCluster(int nodes) {
  Cluster c = MakeCluster({{nodes, 0}}, 4, 4);
  c.pools[0].gpu_memory_bytes = 141 * kFgdGb;
  c.pools[0].sharing = true;
  return c;
}

JobRequest ShareJob(JobId id, int64_t bytes) {
  JobRequest j = MakeJob(id, 1, 1);
  j.shape.slice.share_bytes = bytes;
  return j;
}

std::unique_ptr<Scheduler> MakeFgd(const Cluster& c, SliceScore score,
                                   const TargetWorkload& w) {
  SchedulerOptions o;
  o.slice_score = score;
  o.target_workload = w;
  return std::make_unique<Scheduler>(c, *MakeQueuePolicy("fifo", {}), o);
}

TEST(FragScore, FgdKeepsRoomForTheCommonShareWhereBestFitStrandsIt) {
  const Cluster c = FgdShareCluster(1);
  // The workload is all shares of 40 GB.
  const TargetWorkload w = MakeTargetWorkload({ShareType(40 * kFgdGb)});
  int gpu[2] = {-1, -1};
  int first[2] = {-1, -1};
  for (SliceScore score : {SliceScore::kBestFit, SliceScore::kFgd}) {
    auto s = MakeFgd(c, score, w);
    ASSERT_TRUE(s->Submit(MakeJob(1, 1, 6), T(0)).ok());  // 2 GPUs free
    ASSERT_TRUE(s->Submit(ShareJob(2, 100 * kFgdGb), T(0)).ok());
    s->Schedule(T(0));
    ASSERT_EQ(s->Find(2)->phase, JobPhase::kRunning);
    // 41 GB are left on job 2's GPU: room for one more 40 GB share. A
    // share of 30 GB there (best fit) leaves 11 GB nobody can use; on the
    // other GPU (fgd) it leaves 111 GB and the 41 GB both usable.
    ASSERT_TRUE(s->Submit(ShareJob(3, 30 * kFgdGb), T(1)).ok());
    s->Schedule(T(1));
    ASSERT_EQ(s->Find(3)->phase, JobPhase::kRunning);
    const int i = score == SliceScore::kFgd ? 1 : 0;
    first[i] = s->Find(2)->placement.tasks[0].slice_gpu;
    gpu[i] = s->Find(3)->placement.tasks[0].slice_gpu;
    EXPECT_TRUE(s->state().CheckInvariants().ok())
        << s->state().CheckInvariants();
    double frag = 0;
    frag += ExpectedFragmentation(NodeFreeOf(s->state(), 0), w);
    EXPECT_NEAR(frag, score == SliceScore::kFgd ? 0.0 : 11.0 / 141, 1e-9)
        << SliceScoreName(score);
  }
  EXPECT_EQ(gpu[0], first[0]) << "best fit: beside job 2";
  EXPECT_NE(gpu[1], first[1]) << "fgd: on the other GPU";
}

TEST(FragScore, FgdOnARandomMixKeepsInvariantsAndFindsWhatBestFitFinds) {
  const Cluster c = FgdShareCluster(6);
  const TargetWorkload w =
      MakeTargetWorkload({ShareType(20 * kFgdGb), ShareType(70 * kFgdGb),
                          WholeType(1), WholeType(4)});
  auto fgd = MakeFgd(c, SliceScore::kFgd, w);
  std::mt19937_64 rng(7);
  std::vector<JobId> running;
  JobId next = 1;
  for (int step = 0; step < 400; ++step) {
    const absl::Time now = T(step);
    if (!running.empty() && rng() % 3 == 0) {
      const size_t k = rng() % running.size();
      ASSERT_TRUE(fgd->Finish(running[k], now).ok());
      running.erase(running.begin() + static_cast<long>(k));
    }
    const int kind = static_cast<int>(rng() % 4);
    JobRequest j = kind == 0   ? MakeJob(next, 1, 1 + rng() % 4)
                   : kind == 1 ? ShareJob(next, 70 * kFgdGb)
                               : ShareJob(next, (5 + rng() % 40) * kFgdGb);
    ASSERT_TRUE(fgd->Submit(j, now).ok());
    ++next;
    for (JobId id : fgd->Schedule(now).started) running.push_back(id);
    ASSERT_TRUE(fgd->state().CheckInvariants().ok())
        << "step " << step << ": " << fgd->state().CheckInvariants();
  }
  EXPECT_GT(running.size(), 10u);
}

}  // namespace
}  // namespace loom
