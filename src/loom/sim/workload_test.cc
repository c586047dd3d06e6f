#include "loom/sim/workload.h"

#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

Trace MakeTrace(
    std::vector<std::tuple<double, double, int, std::string>> rows) {
  Trace t;
  int line = 2;
  for (auto& [submit, duration, gpus, model] : rows) {
    TraceJob j;
    j.id = std::to_string(line);
    j.submit_s = submit;
    j.duration_s = duration;
    j.num_gpus = gpus;
    j.gpu_model = model;
    j.line = line++;
    t.jobs.push_back(j);
  }
  return t;
}

TEST(Workload, ShapesModelsAndScale) {
  Cluster c = *ClusterPreset("small");
  Trace t = MakeTrace({{0, 100, 1, ""},
                       {10, 100, 16, "h200"},
                       {20, 100, 12, "a100"},
                       {30, 100, 4, "v100"}});
  WorkloadOptions o;
  o.arrival_scale = 0.5;
  Workload w = BuildWorkload(t, c, o);
  ASSERT_EQ(w.jobs.size(), 3u);
  ASSERT_EQ(w.issues.size(), 1u);
  EXPECT_EQ(w.issues[0].line, 5);
  EXPECT_NE(w.issues[0].reason.find("v100"), std::string::npos);
  EXPECT_EQ(w.jobs[0].request.shape.tasks, 1);
  EXPECT_EQ(w.jobs[0].request.shape.gpu_model, kAnyGpuModel);
  EXPECT_EQ(w.jobs[1].request.shape.tasks, 2);
  EXPECT_EQ(w.jobs[1].request.shape.gpus_per_task, 8);
  EXPECT_EQ(w.jobs[2].request.shape.tasks, 2);  // 12 = 2 x 6
  EXPECT_EQ(w.jobs[2].request.shape.gpus_per_task, 6);
  EXPECT_DOUBLE_EQ(w.jobs[1].submit_s, 5);
  for (size_t i = 0; i < w.jobs.size(); ++i) {
    EXPECT_EQ(w.jobs[i].request.id, static_cast<JobId>(i + 1));
    EXPECT_EQ(w.jobs[i].request.time_limit, absl::InfiniteDuration());
  }
}

TEST(Workload, TimeLimits) {
  Cluster c = *ClusterPreset("small");
  Trace t = MakeTrace({{0, 100, 8, "h200"}, {0, 100, 8, ""}});
  WorkloadOptions o;
  o.time_limits = *ParseTimeLimitMode("exact");
  Workload w = BuildWorkload(t, c, o);
  EXPECT_EQ(w.jobs[0].request.time_limit, absl::Seconds(100));
  // `any` may land on an A100 (speed 0.4): the limit covers that.
  EXPECT_EQ(w.jobs[1].request.time_limit, absl::Seconds(250));
  o.time_limits = *ParseTimeLimitMode("overestimate:3");
  w = BuildWorkload(t, c, o);
  EXPECT_GE(w.jobs[0].request.time_limit, absl::Seconds(100));
  EXPECT_LE(w.jobs[0].request.time_limit, absl::Seconds(300));
  EXPECT_FALSE(ParseTimeLimitMode("overestimate:0.5").ok());
  EXPECT_FALSE(ParseTimeLimitMode("sometimes").ok());
}

TEST(Workload, OfferedLoad) {
  Cluster c = *ClusterPreset("small");  // 224 GPUs
  // The 4096-GPU job can never run on 224 GPUs: it offers no load.
  Trace t =
      MakeTrace({{0, 1000, 8, ""}, {50, 1000, 4096, ""}, {100, 1000, 16, ""}});

  Workload w = BuildWorkload(t, c, WorkloadOptions{});
  OfferedLoad l = ComputeOfferedLoad(w.jobs, c);
  EXPECT_DOUBLE_EQ(l.window_start_s, 0);
  EXPECT_DOUBLE_EQ(l.window_end_s, 100);
  EXPECT_DOUBLE_EQ(l.mean_demand_gpus, 8);  // only job 1 over [0, 100)
  EXPECT_DOUBLE_EQ(l.peak_demand_gpus, 24);
  EXPECT_DOUBLE_EQ(l.peak_load, 24.0 / 224);
}

TEST(Workload, GangSpecs) {
  absl::StatusOr<GangSpec> g = ParseGangSpec("1536:168:8");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->nodes, 1536);
  EXPECT_DOUBLE_EQ(g->hours, 168);
  EXPECT_EQ(g->spares, 8);
  g = ParseGangSpec("4:0.5");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->spares, 0);
  for (const char* bad :
       {"", "4", "0:1", "4:0", "4:1:17", "4:1:-1", "x:1", "4.5:1", "4:1:2:3"}) {
    EXPECT_FALSE(ParseGangSpec(bad).ok()) << bad;
  }
}

TEST(Workload, AddGangGoesFirstOnWholeNodes) {
  Cluster c = *ClusterPreset("small");  // 18 H200 + 10 A100 nodes
  Workload w = BuildWorkload(MakeTrace({{5, 100, 1, ""}, {9, 100, 8, ""}}), c,
                             WorkloadOptions{});
  ASSERT_TRUE(AddGang({16, 2, 2}, c, &w).ok());
  ASSERT_EQ(w.jobs.size(), 3u);
  const SimJob& gang = w.jobs[0];
  EXPECT_TRUE(gang.gang);
  EXPECT_EQ(gang.request.id, 1);
  EXPECT_EQ(w.jobs[2].request.id, 3);
  EXPECT_DOUBLE_EQ(gang.submit_s, 5);
  EXPECT_EQ(gang.request.shape.tasks, 16);
  EXPECT_EQ(gang.request.shape.gpus_per_task, 8);
  EXPECT_EQ(gang.request.shape.gpu_model, c.FindGpuModel("h200"));
  EXPECT_FALSE(gang.request.preemptible);
  EXPECT_EQ(gang.request.spares, 2);
  EXPECT_DOUBLE_EQ(gang.duration_s, 2 * 3600);
  EXPECT_FALSE(AddGang({19, 2, 0}, c, &w).ok());  // 18 H200 nodes
}

}  // namespace
}  // namespace loom
