// Datasets in a replay: node caches, one cold fetch per leaf, LRU eviction,
// prefetch for a reserved gang (loom/sim/data_cache.h).

#include "loom/sim/data_cache.h"

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/sim/simulator.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

using testing::MakeCluster;

constexpr double kGB = 1e9;

std::vector<SimJob> DataJobs(const Cluster& c, const std::string& csv,
                             WorkloadOptions o = {}) {
  absl::StatusOr<Trace> t = ParseTrace(csv, "test.csv", TraceFormat::kCanonical,
                                       /*strict=*/true);
  EXPECT_TRUE(t.ok()) << t.status();
  return BuildWorkload(*t, c, o).jobs;
}

// Job i reads dataset `datasets[i]` (-1: none).
void Read(std::vector<SimJob>* jobs, const std::vector<int>& datasets) {
  ASSERT_EQ(jobs->size(), datasets.size());
  for (size_t i = 0; i < jobs->size(); ++i) {
    (*jobs)[i].dataset = datasets[i];
    (*jobs)[i].request.datasets.clear();
    if (datasets[i] >= 0) {
      (*jobs)[i].request.datasets = {DatasetName(datasets[i])};
    }
  }
}

// 100 GB datasets; cold store 10 GB/s (a fetch takes 10 s), links 50 GB/s
// (a peer copy takes 2 s).
SimOptions DataSim(int datasets, const std::string& policy = "fifo") {
  SimOptions o;
  o.policy = policy;
  o.data.datasets = datasets;
  o.data.sizes.assign(datasets, static_cast<int64_t>(100 * kGB));
  o.data.cold_store_bps = 10 * kGB;
  o.data.node_link_bps = 50 * kGB;
  return o;
}

TEST(SimData, SecondJobOnTheNodeHitsTheCache) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto jobs = DataJobs(c,
                       "job_id,submit_time,duration,num_gpus\n"
                       "a,0,100,8\n"
                       "b,200,100,8\n");
  Read(&jobs, {0, 0});
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, DataSim(1));
  ASSERT_TRUE(r.ok()) << r.status();
  const DataStats& d = r->data;
  ASSERT_TRUE(d.enabled);
  EXPECT_EQ(d.starts, 2);
  EXPECT_EQ(d.hit_starts, 1);
  EXPECT_DOUBLE_EQ(d.cold_bytes, 100 * kGB);
  EXPECT_DOUBLE_EQ(d.hit_rate_bytes(), 0.5);
  EXPECT_DOUBLE_EQ(d.delay_mean_s, 5);  // 10 s for a, 0 for b
  // The fill is part of a's start: it ends 10 s later.
  EXPECT_DOUBLE_EQ(r->jct_mean_s, (110 + 100) / 2.0);
}

TEST(SimData, LeastRecentlyUsedEvictedAtTheBudget) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  auto jobs = DataJobs(c,
                       "job_id,submit_time,duration,num_gpus\n"
                       "a1,0,50,8\n"
                       "b1,200,50,8\n"
                       "a2,400,50,8\n"
                       "c1,600,50,8\n"
                       "b2,800,50,8\n"
                       "a3,1000,50,8\n");
  Read(&jobs, {0, 1, 0, 2, 1, 0});
  SimOptions o = DataSim(3);
  o.data.node_cache_bytes = static_cast<int64_t>(250 * kGB);  // two fit
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok()) << r.status();
  const DataStats& d = r->data;
  // a2 hits; c1 evicts b (used at 200, a at 400), b2 evicts a, a3 evicts c.
  EXPECT_EQ(d.hit_starts, 1);
  EXPECT_EQ(d.evictions, 3);
  EXPECT_DOUBLE_EQ(d.cold_bytes, 5 * 100 * kGB);
  // Unlimited: only the first read of each dataset misses.
  o.data.node_cache_bytes = 0;
  r = RunSimulation(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->data.hit_starts, 3);
  EXPECT_EQ(r->data.evictions, 0);
  EXPECT_DOUBLE_EQ(r->data.cold_bytes, 3 * 100 * kGB);
}

TEST(SimData, OneColdFetchPerLeaf) {
  // Two leaves of 4 nodes; a 64-GPU job on all 8 nodes.
  Cluster c = MakeCluster({{8, 0}}, 4, 2);
  auto jobs = DataJobs(c,
                       "job_id,submit_time,duration,num_gpus\n"
                       "big,0,100,64\n"
                       "again,500,100,64\n");
  Read(&jobs, {0, 0});
  absl::StatusOr<SimResult> r = RunSimulation(c, jobs, DataSim(1));
  ASSERT_TRUE(r.ok()) << r.status();
  const DataStats& d = r->data;
  EXPECT_DOUBLE_EQ(d.cold_bytes, 2 * 100 * kGB);  // not 8 x
  // Leaf 0 fetches in [0, 10], leaf 1 waits for the store: [10, 20]; the
  // other three nodes of a leaf copy from peers in two doubling rounds
  // (1 -> 2 -> 4 holders) of 2 s: the last is ready at 24.
  EXPECT_DOUBLE_EQ(d.delay_p95_s, 24 * 0.95);  // delays {24, 0}
  EXPECT_EQ(d.hit_starts, 1);
  EXPECT_DOUBLE_EQ(d.hit_rate_bytes(), 0.5);
}

TEST(SimData, PrefetchShortensAReservedGangsStart) {
  // Two nodes; `hold` takes one until t=1000. The gang (both nodes) gets
  // the reservation at t=10; with prefetch its data is in place by then.
  Cluster c = MakeCluster({{2, 0}}, 2, 8);
  WorkloadOptions wo;
  wo.time_limits = *ParseTimeLimitMode("exact");
  auto jobs = DataJobs(c,
                       "job_id,submit_time,duration,num_gpus\n"
                       "hold,0,1000,8\n"
                       "gang,10,100,16\n",
                       wo);
  Read(&jobs, {-1, 0});
  SimOptions with = DataSim(1, "backfill");
  SimOptions without = with;
  without.data.prefetch = false;
  absl::StatusOr<SimResult> a = RunSimulation(c, jobs, with);
  absl::StatusOr<SimResult> b = RunSimulation(c, jobs, without);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(a->data.starts, 1);
  EXPECT_EQ(a->data.hit_starts, 1);
  EXPECT_DOUBLE_EQ(a->data.delay_mean_s, 0);
  EXPECT_EQ(a->data.prefetches, 2);
  EXPECT_DOUBLE_EQ(a->data.prefetch_bytes, 200 * kGB);
  EXPECT_DOUBLE_EQ(a->data.cold_bytes, 100 * kGB);
  // Without prefetch: a cold fetch (10 s) and a peer copy (2 s) at t=1000.
  EXPECT_EQ(b->data.hit_starts, 0);
  EXPECT_DOUBLE_EQ(b->data.delay_mean_s, 12);
  EXPECT_EQ(b->data.prefetches, 0);
  EXPECT_LT(a->jct_p99_s, b->jct_p99_s);
}

TEST(SimData, LocalityPlacesTheJobOnTheDataNode) {
  // Four nodes in one leaf: pad0 holds node 0 throughout, pad1 node 1 until
  // t=300, a (dataset 0) runs on node 2 until t=102. At t=500 nodes 1, 2
  // and 3 are idle: b (dataset 0) takes node 1 without locality (a miss)
  // and node 2 with it (a hit).
  Cluster c = MakeCluster({{4, 0}}, 4, 8);
  auto jobs = DataJobs(c,
                       "job_id,submit_time,duration,num_gpus\n"
                       "pad0,0,10000,8\n"
                       "pad1,1,299,8\n"
                       "a,2,100,8\n"
                       "b,500,100,8\n");
  Read(&jobs, {-1, -1, 0, 0});
  SimOptions on = DataSim(1);
  SimOptions off = on;
  off.data.locality = false;
  absl::StatusOr<SimResult> a = RunSimulation(c, jobs, on);
  absl::StatusOr<SimResult> b = RunSimulation(c, jobs, off);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->data.hit_starts, 1);
  EXPECT_DOUBLE_EQ(a->data.cold_bytes, 100 * kGB);
  // Without locality node 1 copies it from node 2 (same leaf): 2 s, and
  // no second cold fetch.
  EXPECT_EQ(b->data.hit_starts, 0);
  EXPECT_DOUBLE_EQ(b->data.cold_bytes, 100 * kGB);
  EXPECT_DOUBLE_EQ(b->data.delay_mean_s, (10 + 2) / 2.0);
}

TEST(SimData, AssignDatasetsIsZipfAndDeterministic) {
  Cluster c = MakeCluster({{1, 0}}, 2, 8);
  std::string csv = "job_id,submit_time,duration,num_gpus\n";
  for (int i = 0; i < 2000; ++i) {
    csv += "j" + std::to_string(i) + "," + std::to_string(i) + ",10,1\n";
  }
  auto jobs = DataJobs(c, csv);
  DataOptions o;
  o.datasets = 10;
  AssignDatasets(1, &o, &jobs);
  ASSERT_EQ(o.sizes.size(), 10u);
  std::vector<int> count(10, 0);
  for (const SimJob& j : jobs) {
    ASSERT_GE(j.dataset, 0);
    ++count[j.dataset];
    EXPECT_EQ(j.request.datasets,
              std::vector<std::string>{DatasetName(j.dataset)});
  }
  // Zipf(1) over 10: the first takes about 34%, the second half as much.
  EXPECT_NEAR(count[0] / 2000.0, 0.341, 0.04);
  EXPECT_NEAR(count[1] / 2000.0, 0.171, 0.03);
  for (int64_t s : o.sizes) {
    EXPECT_GE(s, o.size_min);
    EXPECT_LE(s, o.size_max);
  }
  auto again = DataJobs(c, csv);
  DataOptions o2;
  o2.datasets = 10;
  AssignDatasets(1, &o2, &again);
  EXPECT_EQ(o2.sizes, o.sizes);
  for (size_t i = 0; i < jobs.size(); ++i) {
    EXPECT_EQ(again[i].dataset, jobs[i].dataset);
  }
  EXPECT_TRUE(ParseSizeRange("10Gi:1Ti").ok());
  EXPECT_FALSE(ParseSizeRange("1Ti:10Gi").ok());
  EXPECT_FALSE(ParseSizeRange("10Gi").ok());
}

}  // namespace
}  // namespace loom
