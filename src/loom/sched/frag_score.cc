#include "loom/sched/frag_score.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace loom {

TargetWorkload MakeTargetWorkload(const std::vector<TaskType>& counted,
                                  size_t max_types) {
  // Merge equal types, remembering the order they were first seen.
  using Key = std::tuple<GpuModelId, int, int64_t, int64_t, int64_t>;
  std::map<Key, size_t> index;
  std::vector<TaskType> merged;
  for (const TaskType& t : counted) {
    if (!(t.popularity > 0)) continue;
    const Key k{t.gpu_model, t.gpus, t.share_bytes, t.cpus_milli,
                t.memory_bytes};
    auto [it, fresh] = index.emplace(k, merged.size());
    if (fresh) {
      merged.push_back(t);
    } else {
      merged[it->second].popularity += t.popularity;
    }
  }
  std::stable_sort(merged.begin(), merged.end(),
                   [](const TaskType& a, const TaskType& b) {
                     return a.popularity > b.popularity;
                   });
  if (merged.size() > max_types) merged.resize(max_types);
  double sum = 0;
  for (const TaskType& t : merged) sum += t.popularity;
  TargetWorkload w;
  for (TaskType& t : merged) {
    t.popularity /= sum;
    w.types.push_back(t);
  }
  return w;
}

NodeFree NodeFreeOf(const ClusterState& state, int node) {
  NodeFree n;
  n.model = state.NodeModel(node);
  n.gpus = state.NodeGpus(node);
  n.gpu_memory = std::max<int64_t>(1, state.GpuMemory(node));
  n.sharing = state.Sharing(node);
  n.schedulable = state.Schedulable(node);
  n.cpus_milli = state.FreeCpus(node);
  n.memory_bytes = state.FreeMemory(node);
  const uint32_t free = state.FreeMask(node);
  for (int g = 0; g < n.gpus; ++g) {
    const GpuPart& part = state.Part(node, g);
    if ((free >> g) & 1) {
      n.free[g] = n.gpu_memory;
    } else if (part.mode == GpuMode::kShared) {
      n.free[g] = std::max<int64_t>(0, part.capacity - part.used);
    }
  }
  return n;
}

double FreeCapacity(const NodeFree& node) {
  if (!node.schedulable) return 0;
  int64_t sum = 0;
  for (int g = 0; g < node.gpus; ++g) sum += node.free[g];
  return static_cast<double>(sum) / node.gpu_memory;
}

double Fragmentation(const NodeFree& node, const TaskType& type) {
  if (!node.schedulable) return 0;
  int64_t total = 0, whole = 0, most = 0;
  for (int g = 0; g < node.gpus; ++g) {
    total += node.free[g];
    whole += node.free[g] == node.gpu_memory ? 1 : 0;
    // A free whole GPU takes a share only where GPUs may be shared.
    if (node.free[g] < node.gpu_memory || node.sharing) {
      most = std::max(most, node.free[g]);
    }
  }
  if (total == 0) return 0;
  const bool share = type.share_bytes > 0;
  const bool fits =
      (type.gpu_model == kAnyGpuModel || type.gpu_model == node.model) &&
      node.cpus_milli >= type.cpus_milli &&
      node.memory_bytes >= type.memory_bytes &&
      (share ? most >= type.share_bytes : whole >= type.gpus);
  if (!fits) return static_cast<double>(total) / node.gpu_memory;
  // The task fits: GPUs with less room than it needs of one GPU are lost.
  const int64_t need =
      share ? std::min(type.share_bytes, node.gpu_memory) : node.gpu_memory;
  int64_t lost = 0;
  for (int g = 0; g < node.gpus; ++g) {
    if (node.free[g] < need) lost += node.free[g];
  }
  return static_cast<double>(lost) / node.gpu_memory;
}

double ExpectedFragmentation(const NodeFree& node,
                             const TargetWorkload& workload) {
  if (!node.schedulable) return 0;
  double f = 0;
  for (const TaskType& t : workload.types) {
    f += t.popularity * Fragmentation(node, t);
  }
  return f;
}

}  // namespace loom
