// Submit-time checks of a spec against the cluster's nodes
// (loom/core/job_spec_fit.h).

#include "loom/core/job_spec_fit.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

Cluster ParseFitPools(const std::string& pools) {
  absl::StatusOr<Cluster> c =
      ParseClusterSpec(absl::StrCat("pools:\n", pools), "c.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Cluster{};
}

// Two pools without NICs (the cluster spec's default), one of 2Ti.
const char kNicless[] =
    "  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, "
    "memory: 2Ti}\n"
    "  - {name: a100, nodes: 2, gpu: {model: a100, count: 8}, cpus: 96, "
    "memory: 1Ti, sharing: false}\n";
const char kWithNics[] =
    "  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, "
    "memory: 2Ti, nics: 8}\n"
    "  - {name: a100, nodes: 2, gpu: {model: a100, count: 8}, cpus: 96, "
    "memory: 1Ti, nics: 4}\n";

std::string FitError(const JobSpec& spec, const Cluster& c) {
  absl::Status st = CheckSpecFitsNodes(spec, c);
  EXPECT_TRUE(st.ok() || st.code() == absl::StatusCode::kInvalidArgument) << st;
  return st.ok() ? "ok" : std::string(st.message());
}

TEST(CheckSpecFitsNodes, NicsPerTaskAtMostThePoolsNics) {
  JobSpec spec;
  spec.nics_per_task = 1024;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)),
            "resources.nics_per_task: 1024 NICs per task, but no pool the job "
            "may use declares RDMA NICs (NICs per node: h200 0, a100 0); "
            "leave the field out, or have the operator declare the pools' "
            "`nics` in the cluster spec");
  EXPECT_EQ(FitError(spec, ParseFitPools(kWithNics)),
            "resources.nics_per_task: 1024 NICs per task is more than any "
            "node of the pools the job may use has (NICs per node: h200 8, "
            "a100 4)");
  spec.nics_per_task = 8;
  EXPECT_EQ(FitError(spec, ParseFitPools(kWithNics)), "ok");
  // Only the pools of the job's model count.
  spec.gpu_model = "a100";
  EXPECT_THAT(FitError(spec, ParseFitPools(kWithNics)),
              HasSubstr("(NICs per node: a100 4)"));
  spec.nics_per_task = 0;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
}

TEST(CheckSpecFitsNodes, GpuShareAtMostOneSharedGpusMemory) {
  JobSpec spec;
  spec.tasks = 1;
  spec.gpu_share_bytes = int64_t{200} << 30;
  // The a100 pool does not share its GPUs: only h200's 141Gi count.
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)),
            "resources.gpu_share.memory: 200Gi is more than the memory of one "
            "GPU that may be shared (h200 141Gi per GPU)");
  spec.gpu_share_bytes = int64_t{141} << 30;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
  // No pool the job may use shares GPUs: the scheduler's infeasible answer.
  spec.gpu_model = "a100";
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
}

TEST(CheckSpecFitsNodes, ShmSizeAtMostTheTasksOrANodesMemory) {
  JobSpec spec;
  spec.container.emplace();
  spec.container->image = "h/a";
  spec.container->shm_size_bytes = int64_t{1} << 50;  // 1Pi
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)),
            "container.shm_size: 1Pi is more than the memory of any node the "
            "job may use (memory per node: h200 2Ti, a100 1Ti); /dev/shm is "
            "memory");
  spec.container->shm_size_bytes = int64_t{2} << 40;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
  spec.gpu_model = "a100";
  EXPECT_THAT(FitError(spec, ParseFitPools(kNicless)),
              HasSubstr("(memory per node: a100 1Ti)"));
  spec.memory_bytes_per_task = int64_t{64} << 30;
  spec.container->shm_size_bytes = int64_t{65} << 30;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)),
            "container.shm_size: 65Gi is more than the task's memory "
            "(resources.memory_per_task 64Gi); /dev/shm is memory, counted "
            "against the task's");
  spec.container->shm_size_bytes = int64_t{64} << 30;
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
  spec.container->shm_size_bytes = 0;  // the default: the agent's choice
  EXPECT_EQ(FitError(spec, ParseFitPools(kNicless)), "ok");
}

}  // namespace
}  // namespace loom
