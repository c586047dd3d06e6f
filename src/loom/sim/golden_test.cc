// Golden simulator scenarios (as Flux's resource-query tests): a cluster, a
// trace and options go in; every reported number is compared with the file
// under testdata/golden/. After an intended change of behaviour, regenerate
// with `LOOM_UPDATE_GOLDEN=1 ctest -R Golden` and review the diff.

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "fmt/format.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"
#include "loom/sim/simulator.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

std::string Render(const SimResult& r) {
  std::string s = fmt::format("[{}]\n", r.policy);
  auto line = [&](const char* k, double v) {
    s += fmt::format("{} = {:.6g}\n", k, v);
  };
  line("finished", r.finished);
  line("infeasible", r.infeasible);
  line("unfinished", r.unfinished);
  line("makespan_s", r.makespan_s);
  line("jct_mean_s", r.jct_mean_s);
  line("jct_p50_s", r.jct_p50_s);
  line("jct_p95_s", r.jct_p95_s);
  line("jct_p99_s", r.jct_p99_s);
  line("wait_mean_s", r.wait_mean_s);
  line("slowdown_mean", r.slowdown_mean);
  line("gpu_utilization", r.gpu_utilization);
  line("fragmentation_mean", r.fragmentation_mean);
  line("gpu_hours_lost", r.gpu_hours_lost);
  line("goodput", r.goodput);
  line("preemptions", r.preemptions);
  line("node_failures", r.node_failures);
  for (const auto& [p, h] : r.gpu_hours_by_project) {
    s += fmt::format("gpu_hours[{}] = {:.6g}\n", p, h);
  }
  return s;
}

void CheckGolden(const std::string& name, const std::string& cluster_name,
                 const std::string& trace_path, double arrival_scale,
                 SimOptions base) {
  absl::StatusOr<Cluster> cluster = LoadCluster(cluster_name);
  ASSERT_TRUE(cluster.ok());
  absl::StatusOr<Trace> trace =
      ReadTraceFile(trace_path, TraceFormat::kAuto, /*strict=*/true);
  ASSERT_TRUE(trace.ok()) << trace.status();
  WorkloadOptions wo;
  wo.arrival_scale = arrival_scale;
  wo.time_limits = *ParseTimeLimitMode("overestimate:2");
  Workload w = BuildWorkload(*trace, *cluster, wo);
  std::string got;
  for (const char* policy : {"fifo", "backfill", "las", "fair"}) {
    SimOptions o = base;
    o.policy = policy;
    absl::StatusOr<SimResult> r = RunSimulation(*cluster, w.jobs, o);
    ASSERT_TRUE(r.ok()) << r.status();
    got += Render(*r);
  }
  const std::string path = "testdata/golden/" + name + ".txt";
  if (std::getenv("LOOM_UPDATE_GOLDEN") != nullptr) {
    std::ofstream(path) << got;
    GTEST_SKIP() << "updated " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path
                         << "; run with LOOM_UPDATE_GOLDEN=1 to create it";
  std::stringstream want;
  want << in.rdbuf();
  EXPECT_EQ(got, want.str()) << "simulator output changed for " << name;
}

TEST(Golden, SampleTraceOnTiny) {
  CheckGolden("sample_tiny", "testdata/clusters/tiny.yaml",
              "testdata/traces/sample.csv", 0.05, SimOptions{});
}

TEST(Golden, ItpExcerptWithFailuresOnTiny) {
  SimOptions o;
  o.fail_mtbf_s = 2.0e5;
  o.checkpoint_interval_s = 1800;
  o.seed = 7;
  // First 150 jobs of Microsoft ITP cluster10 (MIT licence).
  CheckGolden("itp_tiny_failures", "testdata/clusters/tiny.yaml",
              "testdata/traces/itp_cluster10_head.csv", 0.02, o);
}

}  // namespace
}  // namespace loom
