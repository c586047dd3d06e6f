#include "loom/core/job_spec_fit.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"

namespace loom {
namespace {

// The pools whose nodes a job of `gpu_model` ("any" or a model's name) may
// run on.
std::vector<const PoolSpec*> FitPools(std::string_view gpu_model,
                                      const Cluster& cluster) {
  const GpuModelId model =
      gpu_model == "any" ? kAnyGpuModel : cluster.FindGpuModel(gpu_model);
  std::vector<const PoolSpec*> out;
  for (const PoolSpec& p : cluster.pools) {
    if (p.node_count > 0 && (model == kAnyGpuModel || p.gpu_model == model)) {
      out.push_back(&p);
    }
  }
  return out;
}

// "h200 8, a100-legacy 0" (at most 8 pools, then "and N more").
template <typename F>
std::string FitPoolList(const std::vector<const PoolSpec*>& pools, F value) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < pools.size() && i < 8; ++i) {
    parts.push_back(absl::StrCat(pools[i]->name, " ", value(*pools[i])));
  }
  if (pools.size() > 8) {
    parts.push_back(absl::StrCat("and ", pools.size() - 8, " more"));
  }
  return absl::StrJoin(parts, ", ");
}

absl::Status CheckFitNics(const JobSpec& spec,
                          const std::vector<const PoolSpec*>& pools) {
  if (spec.nics_per_task <= 0 || pools.empty()) return absl::OkStatus();
  int most = 0;
  for (const PoolSpec* p : pools) most = std::max(most, p->nics);
  if (spec.nics_per_task <= most) return absl::OkStatus();
  const std::string list = FitPoolList(
      pools, [](const PoolSpec& p) { return absl::StrCat(p.nics); });
  if (most == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources.nics_per_task: ", spec.nics_per_task,
        " NICs per task, but no pool the job may use declares RDMA NICs "
        "(NICs per node: ",
        list,
        "); leave the field out, or have the operator declare the pools' "
        "`nics` in the cluster spec"));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("resources.nics_per_task: ", spec.nics_per_task,
                   " NICs per task is more than any node of the pools the job "
                   "may use has (NICs per node: ",
                   list, ")"));
}

absl::Status CheckFitGpuShare(const JobSpec& spec,
                              const std::vector<const PoolSpec*>& pools) {
  if (spec.gpu_share_bytes <= 0) return absl::OkStatus();
  std::vector<const PoolSpec*> sharing;
  int64_t most = 0;
  for (const PoolSpec* p : pools) {
    if (!p->sharing) continue;
    sharing.push_back(p);
    most = std::max(most, p->gpu_memory_bytes);
  }
  // No pool shares GPUs: the scheduler's infeasible answer says so.
  if (sharing.empty() || spec.gpu_share_bytes <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "resources.gpu_share.memory: ", FormatBytes(spec.gpu_share_bytes),
      " is more than the memory of one GPU that may be shared (",
      FitPoolList(sharing,
                  [](const PoolSpec& p) {
                    return absl::StrCat(FormatBytes(p.gpu_memory_bytes),
                                        " per GPU");
                  }),
      ")"));
}

}  // namespace

absl::Status CheckShmSize(int64_t shm_bytes, int64_t memory_per_task,
                          std::string_view gpu_model, const Cluster& cluster) {
  if (shm_bytes <= 0) return absl::OkStatus();
  if (memory_per_task > 0) {
    if (shm_bytes <= memory_per_task) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        "container.shm_size: ", FormatBytes(shm_bytes),
        " is more than the task's memory (resources.memory_per_task ",
        FormatBytes(memory_per_task),
        "); /dev/shm is memory, counted against the task's"));
  }
  const std::vector<const PoolSpec*> pools = FitPools(gpu_model, cluster);
  int64_t most = 0;
  for (const PoolSpec* p : pools) most = std::max(most, p->memory_bytes);
  if (pools.empty() || shm_bytes <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "container.shm_size: ", FormatBytes(shm_bytes),
      " is more than the memory of any node the job may use (memory per "
      "node: ",
      FitPoolList(
          pools, [](const PoolSpec& p) { return FormatBytes(p.memory_bytes); }),
      "); /dev/shm is memory"));
}

absl::Status CheckSpecFitsNodes(const JobSpec& spec, const Cluster& cluster) {
  const std::vector<const PoolSpec*> pools = FitPools(spec.gpu_model, cluster);
  if (absl::Status st = CheckFitNics(spec, pools); !st.ok()) return st;
  if (absl::Status st = CheckFitGpuShare(spec, pools); !st.ok()) return st;
  if (spec.container.has_value()) {
    return CheckShmSize(spec.container->shm_size_bytes,
                        spec.memory_bytes_per_task, spec.gpu_model, cluster);
  }
  return absl::OkStatus();
}

}  // namespace loom
