#include "loom/sched/cluster_state.h"

#include <algorithm>
#include <bit>
#include <cassert>

#include "absl/strings/str_cat.h"

namespace loom {

ClusterState::ClusterState(const Cluster& cluster, bool track_ready_times)
    : cluster_(cluster), track_ready_(track_ready_times) {
  const int m = num_models();
  const int nsw = cluster.topology.num_switches();
  nodes_.resize(cluster.nodes.size());
  max_node_gpus_.assign(m, 0);
  free_by_model_.assign(m, 0);
  schedulable_by_model_.assign(m, 0);
  slots_.assign(static_cast<size_t>(nsw) * m * (kMaxGpusPerNode + 1), 0);
  idle_.assign(static_cast<size_t>(nsw) * m, 0);
  partial_.assign(m * (kMaxGpusPerNode + 1), NodeMask(num_nodes()));
  partial_count_.assign(m * (kMaxGpusPerNode + 1), 0);
  leaves_by_idle_.resize(m);
  ready_.resize(m * (kMaxGpusPerNode + 1));
  models_by_speed_.resize(m);
  for (int i = 0; i < m; ++i) models_by_speed_[i] = i;
  std::stable_sort(
      models_by_speed_.begin(), models_by_speed_.end(), [&](int a, int b) {
        return cluster.gpu_models[a].speed > cluster.gpu_models[b].speed;
      });
  levels_ = cluster.topology.num_levels();
  ancestors_.resize(cluster.nodes.size() * levels_);
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    for (int lvl = 1; lvl <= levels_; ++lvl) {
      ancestors_[i * levels_ + lvl - 1] =
          cluster.topology.AncestorAt(static_cast<int>(i), lvl);
    }
  }
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const NodeSpec& spec = cluster.nodes[i];
    Node& n = nodes_[i];
    n.model = spec.gpu_model;
    n.gpus = spec.gpus;
    n.cpus = spec.cpus_milli;
    n.memory = spec.memory_bytes;
    n.free_gpus = spec.gpus;
    n.free_mask = spec.gpus >= 32 ? ~0u : ((1u << spec.gpus) - 1);
    n.free_cpus = spec.cpus_milli;
    n.free_memory = spec.memory_bytes;
    n.schedulable = true;
    max_node_gpus_[n.model] = std::max(max_node_gpus_[n.model], n.gpus);
    Index(static_cast<int>(i));
    RefreshReady(static_cast<int>(i));
  }
}

int ClusterState::TasksThatFit(int node, const JobShape& shape) const {
  const Node& n = nodes_[node];
  if (!n.schedulable) return 0;
  if (shape.gpu_model != kAnyGpuModel && shape.gpu_model != n.model) return 0;
  int fit = shape.gpus_per_task > 0 ? n.free_gpus / shape.gpus_per_task
                                    : kMaxGpusPerNode * 64;
  if (shape.cpus_milli_per_task > 0) {
    fit = std::min<int64_t>(fit, n.free_cpus / shape.cpus_milli_per_task);
  }
  if (shape.memory_bytes_per_task > 0) {
    fit = std::min<int64_t>(fit, n.free_memory / shape.memory_bytes_per_task);
  }
  return std::max(fit, 0);
}

int ClusterState::MaxFreeOnNode(GpuModelId model) const {
  int best = 0;
  for (int f = kMaxGpusPerNode; f >= 1; --f) {
    if (PartialCount(model, f) > 0) {
      best = f;
      break;
    }
  }
  if (!leaves_by_idle_[model].empty()) {
    // Idle nodes of this model: the largest node size among them.
    for (const auto& [count, leaf] : leaves_by_idle_[model]) {
      for (int node : topology().sw(leaf).nodes) {
        if (nodes_[node].model == model && IsIdle(node)) {
          best = std::max(best, nodes_[node].gpus);
        }
      }
      break;
    }
  }
  return best;
}

std::vector<JobId> ClusterState::JobsOn(int node) const {
  std::vector<JobId> jobs;
  for (const Allocation& a : nodes_[node].allocations) jobs.push_back(a.job);
  return jobs;
}

std::vector<absl::Time> ClusterState::ComputeReadyTimes(int node) const {
  const Node& n = nodes_[node];
  std::vector<absl::Time> ready;
  if (!n.schedulable) return ready;
  ready.assign(n.gpus + 1, absl::InfiniteFuture());
  int g = 1;
  for (; g <= n.free_gpus; ++g) ready[g] = absl::InfinitePast();
  if (g > n.gpus) return ready;
  // Free up allocations in order of their expected end.
  std::vector<std::pair<absl::Time, int>> ends;
  ends.reserve(n.allocations.size());
  for (const Allocation& a : n.allocations) {
    ends.emplace_back(a.expected_end, std::popcount(a.gpu_mask));
  }
  std::sort(ends.begin(), ends.end());
  int free = n.free_gpus;
  for (const auto& [end, gpus] : ends) {
    free += gpus;
    for (; g <= std::min(free, n.gpus); ++g) ready[g] = end;
    if (g > n.gpus) break;
  }
  return ready;
}

void ClusterState::RefreshReady(int node) {
  if (!track_ready_) return;
  Node& n = nodes_[node];
  std::vector<absl::Time> ready = ComputeReadyTimes(node);
  const size_t size = std::max(ready.size(), n.ready.size());
  for (size_t g = 1; g < size; ++g) {
    const bool had = g < n.ready.size();
    const bool has = g < ready.size();
    if (had && has && n.ready[g] == ready[g]) continue;
    auto& idx = ready_[n.model * (kMaxGpusPerNode + 1) + g];
    if (had) idx.erase({n.ready[g], node});
    if (has) idx.insert({ready[g], node});
  }
  n.ready = std::move(ready);
}

void ClusterState::Unindex(int node) {
  Node& n = nodes_[node];
  if (!n.schedulable) return;
  const Topology& topo = topology();
  const int m = n.model;
  free_by_model_[m] -= n.free_gpus;
  schedulable_by_model_[m] -= n.gpus;
  total_free_ -= n.free_gpus;
  const bool idle = n.free_gpus == n.gpus;
  for (int lvl = 1; lvl <= topo.num_levels(); ++lvl) {
    int sw = ancestors_[node * levels_ + lvl - 1];
    for (int g = 1; g <= n.free_gpus; ++g) {
      slots_[SlotIndex(sw, m, g)] -= n.free_gpus / g;
    }
    if (idle) idle_[sw * num_models() + m] -= 1;
  }
  if (idle) {
    int leaf = topo.leaf_of(node);
    int count = idle_[leaf * num_models() + m];
    leaves_by_idle_[m].erase({count + 1, leaf});
    if (count > 0) leaves_by_idle_[m].insert({count, leaf});
  } else if (n.free_gpus > 0) {
    partial_[m * (kMaxGpusPerNode + 1) + n.free_gpus].Erase(node);
    partial_count_[m * (kMaxGpusPerNode + 1) + n.free_gpus] -= 1;
  }
}

void ClusterState::Index(int node) {
  Node& n = nodes_[node];
  if (!n.schedulable) return;
  const Topology& topo = topology();
  const int m = n.model;
  free_by_model_[m] += n.free_gpus;
  schedulable_by_model_[m] += n.gpus;
  total_free_ += n.free_gpus;
  const bool idle = n.free_gpus == n.gpus;
  for (int lvl = 1; lvl <= topo.num_levels(); ++lvl) {
    int sw = ancestors_[node * levels_ + lvl - 1];
    for (int g = 1; g <= n.free_gpus; ++g) {
      slots_[SlotIndex(sw, m, g)] += n.free_gpus / g;
    }
    if (idle) idle_[sw * num_models() + m] += 1;
  }
  if (idle) {
    int leaf = topo.leaf_of(node);
    int count = idle_[leaf * num_models() + m];
    if (count > 1) leaves_by_idle_[m].erase({count - 1, leaf});
    leaves_by_idle_[m].insert({count, leaf});
  } else if (n.free_gpus > 0) {
    partial_[m * (kMaxGpusPerNode + 1) + n.free_gpus].Insert(node);
    partial_count_[m * (kMaxGpusPerNode + 1) + n.free_gpus] += 1;
  }
}

void ClusterState::SetSchedulable(int node, bool schedulable) {
  if (nodes_[node].schedulable == schedulable) return;
  Unindex(node);
  nodes_[node].schedulable = schedulable;
  Index(node);
  RefreshReady(node);
}

void ClusterState::Allocate(JobId job, const Placement& placement,
                            const JobShape& shape, absl::Time expected_end) {
  for (const TaskPlacement& t : placement.tasks) {
    Node& n = nodes_[t.node];
    assert((n.free_mask & t.gpu_mask) == t.gpu_mask);
    Unindex(t.node);
    n.free_mask &= ~t.gpu_mask;
    n.free_gpus -= std::popcount(t.gpu_mask);
    n.free_cpus -= shape.cpus_milli_per_task;
    n.free_memory -= shape.memory_bytes_per_task;
    n.allocations.push_back({job, t.gpu_mask, shape.cpus_milli_per_task,
                             shape.memory_bytes_per_task, expected_end});
    Index(t.node);
    RefreshReady(t.node);
  }
}

void ClusterState::Release(JobId job, const Placement& placement,
                           const JobShape& shape) {
  for (const TaskPlacement& t : placement.tasks) {
    Node& n = nodes_[t.node];
    Unindex(t.node);
    auto it = std::find_if(n.allocations.begin(), n.allocations.end(),
                           [&](const Allocation& a) {
                             return a.job == job && a.gpu_mask == t.gpu_mask;
                           });
    assert(it != n.allocations.end());
    if (it != n.allocations.end()) {
      n.free_mask |= it->gpu_mask;
      n.free_gpus += std::popcount(it->gpu_mask);
      n.free_cpus += it->cpus;
      n.free_memory += it->memory;
      n.allocations.erase(it);
    }
    Index(t.node);
    RefreshReady(t.node);
  }
}

absl::Status ClusterState::CheckInvariants() const {
  const Topology& topo = topology();
  const int m = num_models();
  std::vector<int> slots(slots_.size(), 0), idle(idle_.size(), 0);
  std::vector<int> free_by_model(m, 0), partial_count(partial_count_.size(), 0);
  int total_free = 0;
  for (int i = 0; i < num_nodes(); ++i) {
    const Node& n = nodes_[i];
    uint32_t used = 0;
    int64_t cpus = 0, mem = 0;
    for (const Allocation& a : n.allocations) {
      if (used & a.gpu_mask) {
        return absl::InternalError(
            absl::StrCat("node ", i, ": a GPU is allocated twice"));
      }
      used |= a.gpu_mask;
      cpus += a.cpus;
      mem += a.memory;
    }
    const uint32_t all = n.gpus >= 32 ? ~0u : ((1u << n.gpus) - 1);
    if ((used & ~all) != 0) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": allocation outside the node's GPUs"));
    }
    if (n.free_mask != (all & ~used) ||
        n.free_gpus != std::popcount(n.free_mask)) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": free GPU mask out of date"));
    }
    if (n.free_cpus != n.cpus - cpus || n.free_memory != n.memory - mem) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": free CPU or memory out of date"));
    }
    if (n.free_cpus < 0 || n.free_memory < 0) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": CPU or memory over-committed"));
    }
    if (!n.schedulable) continue;
    free_by_model[n.model] += n.free_gpus;
    total_free += n.free_gpus;
    const bool is_idle = n.free_gpus == n.gpus;
    for (int lvl = 1; lvl <= topo.num_levels(); ++lvl) {
      int sw = topo.AncestorAt(i, lvl);
      for (int g = 1; g <= n.free_gpus; ++g) {
        slots[SlotIndex(sw, n.model, g)] += n.free_gpus / g;
      }
      if (is_idle) idle[sw * m + n.model] += 1;
    }
    if (!is_idle && n.free_gpus > 0) {
      partial_count[n.model * (kMaxGpusPerNode + 1) + n.free_gpus] += 1;
      if (!partial_[n.model * (kMaxGpusPerNode + 1) + n.free_gpus].Contains(
              i)) {
        return absl::InternalError(
            absl::StrCat("node ", i, ": missing from its free-GPU bucket"));
      }
    }
    if (track_ready_) {
      std::vector<absl::Time> want = ComputeReadyTimes(i);
      if (want != n.ready) {
        return absl::InternalError(
            absl::StrCat("node ", i, ": reservation times out of date"));
      }
      for (int g = 1; g <= n.gpus; ++g) {
        const auto& idx = ready_[n.model * (kMaxGpusPerNode + 1) + g];
        if (!idx.contains({want[g], i})) {
          return absl::InternalError(
              absl::StrCat("node ", i, ": reservation index out of date"));
        }
      }
    }
  }
  if (track_ready_) {
    size_t want = 0, have = 0;
    for (const Node& n : nodes_) {
      if (n.schedulable) want += n.gpus;
    }
    for (const auto& idx : ready_) have += idx.size();
    if (want != have) {
      return absl::InternalError("reservation index has stale entries");
    }
  }
  if (slots != slots_) return absl::InternalError("switch slot counts differ");
  if (idle != idle_) return absl::InternalError("idle node counts differ");
  if (free_by_model != free_by_model_ || total_free != total_free_) {
    return absl::InternalError("free GPU totals differ");
  }
  if (partial_count != partial_count_) {
    return absl::InternalError("free-GPU bucket counts differ");
  }
  for (int model = 0; model < m; ++model) {
    size_t leaves = 0;
    for (int leaf : topo.SwitchesAtLevel(1)) {
      int c = idle_[leaf * m + model];
      if (c > 0) {
        ++leaves;
        if (!leaves_by_idle_[model].contains({c, leaf})) {
          return absl::InternalError("idle leaf index out of date");
        }
      }
    }
    if (leaves != leaves_by_idle_[model].size()) {
      return absl::InternalError("idle leaf index has stale entries");
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
