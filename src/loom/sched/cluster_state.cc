#include "loom/sched/cluster_state.h"

#include <algorithm>
#include <bit>
#include <cassert>
#include <optional>

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
  pool_profiles_.resize(cluster.pools.size());
  for (size_t p = 0; p < cluster.pools.size(); ++p) {
    const PoolSpec& pool = cluster.pools[p];
    if (pool.gpu_model >= 0 && pool.gpu_model < m) {
      pool_profiles_[p] = MigProfilesFor(
          cluster.gpu_models[pool.gpu_model].name, pool.gpu_memory_bytes);
    }
  }
  part_nodes_ = NodeMask(num_nodes());
  no_nics_ = NodeMask(num_nodes());
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
    n.parts.assign(spec.gpus, GpuPart{});
    n.nics = spec.nics > 0 ? spec.nics : -1;
    n.free_nics = std::max(n.nics, 0);
    n.gpu_memory = cluster.gpu_models[n.model].memory_bytes;
    if (spec.pool >= 0 && spec.pool < static_cast<int>(cluster.pools.size())) {
      const PoolSpec& pool = cluster.pools[spec.pool];
      n.pool = spec.pool;
      if (pool.gpu_memory_bytes > 0) n.gpu_memory = pool.gpu_memory_bytes;
      n.sharing = pool.sharing;
      n.gpu_domain = pool.gpu_domain;
      const bool mig = !pool_profiles_[spec.pool].empty();
      n.mig_dynamic = mig && pool.mig.dynamic;
      for (int g = 0; mig && g < std::min(pool.mig.gpus, spec.gpus); ++g) {
        GpuPart& part = n.parts[g];
        part.mode = GpuMode::kMig;
        part.pinned = true;
        part.layout = pool.mig.layout;
        part.owners.assign(part.layout.size(), 0);
        n.part_mask |= 1u << g;
      }
      n.free_mask &= ~n.part_mask;
      n.free_gpus = std::popcount(n.free_mask);
      if (n.part_mask != 0) part_nodes_.Insert(static_cast<int>(i));
    }
    max_node_gpus_[n.model] = std::max(max_node_gpus_[n.model], n.gpus);
    Index(static_cast<int>(i));
    RefreshReady(static_cast<int>(i));
  }
}

const std::vector<MigProfile>& ClusterState::MigProfilesOn(int node) const {
  static const std::vector<MigProfile>* const kNone =
      new std::vector<MigProfile>();
  const int pool = nodes_[node].pool;
  return pool < 0 ? *kNone : pool_profiles_[pool];
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
  if (shape.nics_per_task > 0 && n.nics >= 0) {
    fit = std::min(fit, std::max(n.free_nics, 0) / shape.nics_per_task);
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

void ClusterState::SetNics(int node, int nics) {
  Node& n = nodes_[node];
  int counted = 0;
  for (const Allocation& a : n.allocations) counted += a.nics;
  n.nics = nics;
  n.free_nics = std::max(nics, 0) - counted;
  if (nics == 0) {
    no_nics_.Insert(node);
  } else {
    no_nics_.Erase(node);
  }
}

void ClusterState::SetSchedulable(int node, bool schedulable) {
  if (nodes_[node].schedulable == schedulable) return;
  Unindex(node);
  nodes_[node].schedulable = schedulable;
  Index(node);
  RefreshReady(node);
}

namespace {

// The layout a GPU gets for an instance of `profile` at `start` that it
// lacks. With no instance in use: the GPU partitioned anew, all instances
// of `profile` (the requested one first), so that the next tasks asking for
// it find one ready. Otherwise (a restored or re-applied allocation):
// the instances in use are kept, free ones in the way are dropped, and the
// new one is added. `owners` is kept aligned with the layout.
std::vector<MigInstance> NewLayout(const std::vector<MigProfile>& profiles,
                                   const GpuPart& part, int profile, int start,
                                   std::vector<JobId>* owners) {
  std::vector<MigInstance> layout = {{profile, start}};
  std::vector<JobId> own = {0};
  const bool busy = std::any_of(part.owners.begin(), part.owners.end(),
                                [](JobId j) { return j != 0; });
  if (!busy) {
    while (std::optional<int> s = FindMigStart(profiles, layout, profile)) {
      layout.push_back({profile, *s});
      own.push_back(0);
    }
  } else {
    const uint32_t mine = MigMemoryMask(profiles, layout);
    for (size_t i = 0; i < part.layout.size(); ++i) {
      const bool in_use = part.owners[i] != 0;
      const bool overlaps =
          (MigMemoryMask(profiles, {part.layout[i]}) & mine) != 0;
      if (in_use || !overlaps) {
        layout.push_back(part.layout[i]);
        own.push_back(part.owners[i]);
      }
    }
    // Too many compute slices: drop free instances from the end.
    for (size_t i = layout.size();
         i-- > 1 && !ValidateMigLayout(profiles, layout).ok();) {
      if (own[i] == 0) {
        layout.erase(layout.begin() + static_cast<long>(i));
        own.erase(own.begin() + static_cast<long>(i));
      }
    }
  }
  *owners = std::move(own);
  return layout;
}

int FindInstance(const GpuPart& part, int profile, int start, JobId owner) {
  for (size_t i = 0; i < part.layout.size(); ++i) {
    if (part.layout[i].start == start &&
        (profile < 0 || part.layout[i].profile == profile) &&
        part.owners[i] == owner) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace

void ClusterState::TakeSlice(JobId job, Node& n, const TaskPlacement& t) {
  const int g = t.slice_gpu;
  GpuPart& part = n.parts[g];
  const uint32_t bit = 1u << g;
  if (part.mode == GpuMode::kWhole) {
    assert(n.free_mask & bit);
    n.free_mask &= ~bit;
    n.free_gpus -= 1;
    n.part_mask |= bit;
    part = GpuPart{};
    part.mode = t.mig_profile >= 0 ? GpuMode::kMig : GpuMode::kShared;
    part.capacity = n.gpu_memory;
  }
  if (part.mode == GpuMode::kMig) {
    int idx = FindInstance(part, t.mig_profile, t.mig_start, 0);
    if (idx < 0) {
      const std::vector<MigProfile>& profiles =
          n.pool < 0 ? std::vector<MigProfile>() : pool_profiles_[n.pool];
      std::vector<JobId> owners;
      part.layout =
          NewLayout(profiles, part, t.mig_profile, t.mig_start, &owners);
      part.owners = std::move(owners);
      idx = FindInstance(part, t.mig_profile, t.mig_start, 0);
    }
    assert(idx >= 0);
    if (idx >= 0) part.owners[idx] = job;
  } else {
    part.used += t.share_bytes;
  }
  part.tasks += 1;
}

void ClusterState::GiveSlice(Node& n, const Allocation& a) {
  const int g = a.slice_gpu;
  GpuPart& part = n.parts[g];
  if (part.mode == GpuMode::kMig) {
    const int idx = FindInstance(part, -1, a.mig_start, a.job);
    if (idx >= 0) part.owners[idx] = 0;
  } else {
    part.used -= a.share;
  }
  part.tasks -= 1;
  if (part.tasks == 0 && !part.pinned) {
    const uint32_t bit = 1u << g;
    part = GpuPart{};
    n.part_mask &= ~bit;
    n.free_mask |= bit;
    n.free_gpus += 1;
  }
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
    n.free_nics -= shape.nics_per_task;
    Allocation a{job, t.gpu_mask, shape.cpus_milli_per_task,
                 shape.memory_bytes_per_task, expected_end};
    a.nics = shape.nics_per_task;
    if (t.partial()) {
      TakeSlice(job, n, t);
      a.slice_gpu = t.slice_gpu;
      a.mig_start = t.mig_profile >= 0 ? t.mig_start : -1;
      a.share = t.mig_profile >= 0 ? 0 : t.share_bytes;
    }
    n.allocations.push_back(a);
    if (n.part_mask != 0) part_nodes_.Insert(t.node);
    Index(t.node);
    RefreshReady(t.node);
  }
}

void ClusterState::Release(JobId job, const Placement& placement,
                           const JobShape& shape) {
  for (const TaskPlacement& t : placement.tasks) {
    Node& n = nodes_[t.node];
    Unindex(t.node);
    auto it = std::find_if(
        n.allocations.begin(), n.allocations.end(), [&](const Allocation& a) {
          return a.job == job && a.gpu_mask == t.gpu_mask &&
                 a.slice_gpu == t.slice_gpu &&
                 (!t.partial() ||
                  (t.mig_profile >= 0 ? a.mig_start == t.mig_start
                                      : a.share == t.share_bytes));
        });
    assert(it != n.allocations.end());
    if (it != n.allocations.end()) {
      n.free_mask |= it->gpu_mask;
      n.free_gpus += std::popcount(it->gpu_mask);
      n.free_cpus += it->cpus;
      n.free_memory += it->memory;
      n.free_nics += it->nics;
      if (it->slice_gpu >= 0) GiveSlice(n, *it);
      n.allocations.erase(it);
    }
    if (n.part_mask == 0) part_nodes_.Erase(t.node);
    Index(t.node);
    RefreshReady(t.node);
  }
}

absl::Status ClusterState::CheckParts(int node) const {
  const Node& n = nodes_[node];
  const std::vector<MigProfile>& profiles = MigProfilesOn(node);
  auto fail = [&](int g, absl::string_view what) {
    return absl::InternalError(
        absl::StrCat("node ", node, " GPU ", g, ": ", what));
  };
  if (part_nodes_.Contains(node) != (n.part_mask != 0)) {
    return fail(-1, "partial-node index out of date");
  }
  for (int g = 0; g < n.gpus; ++g) {
    const GpuPart& part = n.parts[g];
    const bool is_part = (n.part_mask >> g) & 1;
    if (is_part != (part.mode != GpuMode::kWhole)) {
      return fail(g, "partial-GPU mask out of date");
    }
    int tasks = 0;
    int64_t shared = 0;
    std::vector<JobId> owners(part.layout.size(), 0);
    for (const Allocation& a : n.allocations) {
      if (a.slice_gpu != g) continue;
      ++tasks;
      if (part.mode == GpuMode::kShared) {
        shared += a.share;
      } else if (part.mode == GpuMode::kMig) {
        int idx = -1;
        for (size_t i = 0; i < part.layout.size(); ++i) {
          if (part.layout[i].start == a.mig_start && owners[i] == 0 &&
              part.owners[i] == a.job) {
            idx = static_cast<int>(i);
            break;
          }
        }
        if (idx < 0) return fail(g, "a task holds no instance of the layout");
        owners[idx] = a.job;
      } else {
        return fail(g, "a slice task on a whole GPU");
      }
    }
    if (tasks != part.tasks) return fail(g, "slice task count out of date");
    if (part.mode == GpuMode::kWhole) {
      if (!(part == GpuPart{})) return fail(g, "a whole GPU with a part");
      continue;
    }
    if (!part.pinned && tasks == 0) {
      return fail(g, "an empty part that should be whole again");
    }
    if (part.mode == GpuMode::kShared) {
      if (shared != part.used || part.used > part.capacity) {
        return fail(g, "shared memory over-committed or out of date");
      }
      continue;
    }
    if (owners != part.owners) {
      return fail(g, "an instance given twice, or its owner out of date");
    }
    if (absl::Status st = ValidateMigLayout(profiles, part.layout); !st.ok()) {
      return fail(g, st.message());
    }
  }
  return absl::OkStatus();
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
    if ((used & n.part_mask) != 0) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": a partial GPU allocated whole"));
    }
    if (absl::Status st = CheckParts(i); !st.ok()) return st;
    used |= n.part_mask;
    if (n.free_mask != (all & ~used) ||
        n.free_gpus != std::popcount(n.free_mask)) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": free GPU mask out of date"));
    }
    int nics = 0;
    for (const Allocation& a : n.allocations) nics += a.nics;
    if (n.free_nics != std::max(n.nics, 0) - nics ||
        no_nics_.Contains(i) != (n.nics == 0)) {
      return absl::InternalError(
          absl::StrCat("node ", i, ": free NICs out of date"));
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
