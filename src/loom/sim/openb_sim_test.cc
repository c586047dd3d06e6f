// `loom sim` on the openb fixtures (testdata/traces/openb_pods_small.csv on
// testdata/clusters/openb_nodes_small.csv): the node list as the cluster,
// sharing pods as shares of 1000 MiB GPUs, and the GPU allocation and FGD
// fragmentation under best fit and fgd, pinned to the values measured when
// the score went in (docs/simulator.md).

#include "gtest/gtest.h"
#include "loom/sim/openb_cluster.h"
#include "loom/sim/simulator.h"
#include "loom/sim/workload.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

constexpr char kPods[] = "testdata/traces/openb_pods_small.csv";
constexpr char kNodes[] = "testdata/clusters/openb_nodes_small.csv";

struct Fixture {
  Cluster cluster;
  Workload workload;
};

Fixture LoadOpenb() {
  Fixture f;
  absl::StatusOr<Cluster> c = LoadSimCluster(kNodes);
  EXPECT_TRUE(c.ok()) << c.status();
  f.cluster = *c;
  absl::StatusOr<Trace> t = ReadTraceFile(kPods, TraceFormat::kAuto, true);
  EXPECT_TRUE(t.ok()) << t.status();
  f.workload = BuildWorkload(*t, f.cluster, WorkloadOptions{});
  return f;
}

SimResult RunOpenb(const Fixture& f, SliceScore score, bool no_departures) {
  SimOptions o;
  o.policy = "fifo";
  o.scheduler_options.slice_score = score;
  o.scheduler_options.target_workload = TargetWorkloadOf(f.workload.jobs);
  o.no_departures = no_departures;
  absl::StatusOr<SimResult> r = RunSimulation(f.cluster, f.workload.jobs, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return *r;
}

TEST(OpenbSim, NodeListBecomesASharingCluster) {
  const Fixture f = LoadOpenb();
  EXPECT_EQ(f.cluster.nodes.size(), 31u);
  EXPECT_EQ(f.cluster.TotalGpus(), 150);
  ASSERT_EQ(f.cluster.gpu_models.size(), 4u);  // p100, g2, t4, v100m16
  for (const GpuModel& m : f.cluster.gpu_models) {
    EXPECT_EQ(m.memory_bytes, int64_t{1000} << 20) << m.name;
  }
  for (const PoolSpec& p : f.cluster.pools) EXPECT_TRUE(p.sharing);
  // openb-pod-1118 asks 470 milli-GPU: a share of 470 MiB.
  int shares = 0;
  for (const SimJob& j : f.workload.jobs) {
    if (j.request.shape.slice.share_bytes > 0) ++shares;
    if (j.trace_id == "openb-pod-1118") {
      EXPECT_EQ(j.request.shape.slice.share_bytes, int64_t{470} << 20);
      EXPECT_EQ(j.request.shape.cpus_milli_per_task, 11908);
    }
  }
  EXPECT_EQ(shares, 50);
  EXPECT_TRUE(f.workload.issues.empty());
}

TEST(OpenbSim, ReplayFinishesEveryPodAtLowLoad) {
  const Fixture f = LoadOpenb();
  for (SliceScore s : {SliceScore::kBestFit, SliceScore::kFgd}) {
    const SimResult r = RunOpenb(f, s, false);
    EXPECT_EQ(r.finished, 157) << SliceScoreName(s);
    EXPECT_EQ(r.unfinished, 0);
    EXPECT_LT(r.gpu_allocation_mean, 0.2);
  }
}

TEST(OpenbSim, NoDeparturesFillsTheClusterOnceUnderEitherScore) {
  const Fixture f = LoadOpenb();
  const SimResult bf = RunOpenb(f, SliceScore::kBestFit, true);
  const SimResult fgd = RunOpenb(f, SliceScore::kFgd, true);
  for (const SimResult* r : {&bf, &fgd}) {
    EXPECT_EQ(r->finished, 0);
    EXPECT_EQ(r->unfinished + r->dropped, 157);
    EXPECT_NEAR(r->arrived_demand, 1.029, 0.001);
    EXPECT_LE(r->gpu_allocation_end, r->arrived_demand);
    // Fragmented capacity is free capacity.
    EXPECT_LE(r->frag_fgd_end_gpus, 150 * (1 - r->gpu_allocation_end) + 1e-9);
  }
  // Measured when the score went in (a change of placement shows here).
  EXPECT_EQ(bf.dropped, 15);
  EXPECT_EQ(fgd.dropped, 17);
  EXPECT_NEAR(bf.gpu_allocation_end, 0.935, 0.0005);
  EXPECT_NEAR(fgd.gpu_allocation_end, 0.925, 0.0005);
}

}  // namespace
}  // namespace loom
