#include "loom/sched/placement.h"

#include <algorithm>
#include <bit>
#include <numeric>
#include <span>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "loom/sched/slice_placement.h"

namespace loom {
namespace {

// Takes `count` runs of `g` free GPUs from `mask`, lowest first; appends one
// TaskPlacement per task. On a node whose GPUs form domains of `domain`
// (PCIe switches; 0: all-to-all), a task that fits one domain takes its
// GPUs from one: the domain with the fewest free GPUs that still has `g`
// (best fit), lowest first; a task of several whole domains takes whole free
// domains; only when there are none does it span domains as it may.
void TakeGpus(int node, uint32_t mask, int g, int count, int domain,
              std::vector<TaskPlacement>* out) {
  for (int t = 0; t < count; ++t) {
    uint32_t pool = mask;
    const uint32_t whole = domain >= 32 ? ~0u : ((1u << domain) - 1);
    if (domain > 0 && g > domain && g % domain == 0) {
      // Whole domains, as many as it needs, when that many are free.
      uint32_t free_domains = 0;
      int n = 0;
      for (int start = 0; start < kMaxGpusPerNode && n < g / domain;
           start += domain) {
        if ((mask & (whole << start)) == (whole << start)) {
          free_domains |= whole << start;
          ++n;
        }
      }
      if (n == g / domain) pool = free_domains;
    } else if (domain > 0) {
      int best_free = kMaxGpusPerNode + 1;
      for (int start = 0; start < kMaxGpusPerNode; start += domain) {
        const uint32_t d = mask & (whole << start);
        const int free = std::popcount(d);
        if (free >= g && free < best_free) {
          best_free = free;
          pool = d;
        }
      }
    }
    uint32_t task_mask = 0;
    for (int taken = 0; taken < g; ++taken) {
      uint32_t bit = pool & (~pool + 1);  // lowest set bit
      task_mask |= bit;
      pool &= ~bit;
      mask &= ~bit;
    }
    out->push_back({node, task_mask});
  }
}

bool Avoided(const NodeMask* avoid, int node) {
  return avoid != nullptr && avoid->Contains(node);
}

// Single-node placement: best fit over partly used nodes, then an idle node
// from the leaf with the fewest idle nodes. Nodes of a higher rank in
// `prefer` win ties only: among the partly used nodes with the chosen free
// GPU count, or among the idle nodes of the chosen leaf.
std::optional<Placement> PlaceOnOneNode(const ClusterState& state,
                                        GpuModelId model, const JobShape& shape,
                                        const NodeMask* avoid,
                                        const NodePreference& prefer) {
  const int need = shape.TotalGpus();
  JobShape s = shape;
  s.gpu_model = model;
  auto fits = [&](int node) {
    return !Avoided(avoid, node) && state.TasksThatFit(node, s) >= s.tasks;
  };
  int chosen = -1;
  int chosen_free = 0;
  for (int f = std::max(need, 1); f <= kMaxGpusPerNode && chosen < 0; ++f) {
    if (state.PartialCount(model, f) == 0) continue;
    state.PartialNodes(model, f).ForEachUntil([&](int node) {
      if (fits(node)) {
        chosen = node;
        chosen_free = f;
        return false;
      }
      return true;
    });
  }
  const int top = prefer.Top();
  if (chosen >= 0 && prefer.Rank(chosen) < top) {
    // The same best-fit key: the other partly used nodes with as many free
    // GPUs. One word operation per 64 nodes of the bucket and mask: the
    // data nodes first (ranks 3 and 2), then, when none fits, the image's.
    const NodeMask& bucket = state.PartialNodes(model, chosen_free);
    int best = prefer.Rank(chosen);
    for (const NodeMask* m : {prefer.data, prefer.image}) {
      if (m == nullptr || best >= 2) continue;
      bucket.ForEachInBothUntil(*m, [&](int node) {
        const int rank = prefer.Rank(node);
        if (rank > best && fits(node)) {
          best = rank;
          chosen = node;
        }
        return best < top;
      });
    }
  }
  if (chosen < 0) {
    const Topology& topo = state.topology();
    auto idle_fits = [&](int node) {
      return state.NodeModel(node) == model && state.IsIdle(node) && fits(node);
    };
    for (const auto& [count, leaf] : state.LeavesByIdle(model)) {
      const std::vector<int>& nodes = topo.sw(leaf).nodes;
      size_t i = 0;
      while (i < nodes.size() && !idle_fits(nodes[i])) ++i;
      if (i == nodes.size()) continue;
      chosen = nodes[i];
      // The same leaf: its first idle node of the best rank, if better.
      int best = prefer.Rank(chosen);
      for (size_t j = i + 1; j < nodes.size() && best < top; ++j) {
        const int rank = prefer.Rank(nodes[j]);
        if (rank > best && idle_fits(nodes[j])) {
          best = rank;
          chosen = nodes[j];
        }
      }
      break;
    }
  }
  if (chosen < 0) return std::nullopt;
  Placement p;
  p.gpu_model = model;
  TakeGpus(chosen, state.FreeMask(chosen), shape.gpus_per_task, shape.tasks,
           state.GpuDomain(chosen), &p.tasks);
  p.switch_level = 0;
  p.switch_index = -1;
  p.nodes = 1;
  p.leaves = 1;
  return p;
}

// The lowest switch above every task of `p`.
void SetSwitch(const Topology& topo, Placement* p) {
  std::vector<int> used;
  used.reserve(p->tasks.size());
  for (const TaskPlacement& t : p->tasks) used.push_back(t.node);
  p->switch_level = used.empty() ? 0 : topo.LowestCommonLevel(used);
  p->switch_index =
      p->switch_level == 0 ? -1 : topo.AncestorAt(used[0], p->switch_level);
}

struct LeafRoom {
  int leaf;
  int room;  // tasks that fit
};

// Picks nodes below switch `sw` for `shape.tasks` tasks: fewest leaves (most
// room first, last one best-fit), then fewest nodes; among nodes of a leaf
// with equal room, those of a higher rank in `prefer` first. Returns nullopt
// when CPU, memory or `avoid` leave too little room.
std::optional<Placement> PlaceUnderSwitch(const ClusterState& state, int sw,
                                          GpuModelId model,
                                          const JobShape& shape,
                                          const NodeMask* avoid,
                                          const NodePreference& prefer) {
  const Topology& topo = state.topology();
  JobShape s = shape;
  s.gpu_model = model;
  std::vector<LeafRoom> leaves;
  for (int leaf : topo.LeavesUnder(sw)) {
    if (state.Slots(leaf, model, shape.gpus_per_task) == 0) continue;
    int room = 0;
    for (int node : topo.sw(leaf).nodes) {
      if (!Avoided(avoid, node)) {
        room += s.TasksPerNode(state.TasksThatFit(node, s));
      }
    }
    if (room > 0) leaves.push_back({leaf, room});
  }
  std::stable_sort(
      leaves.begin(), leaves.end(),
      [](const LeafRoom& a, const LeafRoom& b) { return a.room > b.room; });
  int total = 0;
  size_t k = 0;
  while (k < leaves.size() && total < shape.tasks) total += leaves[k++].room;
  if (total < shape.tasks) return std::nullopt;
  // Best fit for the last leaf: the smallest leaf among leaves[k-1..] that
  // still covers what the first k-1 leave over.
  const int remainder = shape.tasks - (total - leaves[k - 1].room);
  size_t best = k - 1;
  for (size_t i = k; i < leaves.size(); ++i) {
    if (leaves[i].room >= remainder && leaves[i].room < leaves[best].room) {
      best = i;
    }
  }
  std::swap(leaves[k - 1], leaves[best]);

  Placement p;
  p.gpu_model = model;
  int left = shape.tasks;
  for (size_t i = 0; i < k && left > 0; ++i) {
    // Within a leaf: nodes with the most room first (fewest nodes), then
    // the highest rank in `prefer`, then by id. Equal room, so the order
    // among them changes which nodes are used, not how many.
    std::vector<std::tuple<int, int, int>> nodes;  // (-room, -rank, node)
    for (int node : topo.sw(leaves[i].leaf).nodes) {
      if (Avoided(avoid, node)) continue;
      int room = s.TasksPerNode(state.TasksThatFit(node, s));
      if (room > 0) nodes.emplace_back(-room, -prefer.Rank(node), node);
    }
    std::sort(nodes.begin(), nodes.end());
    for (const auto& [neg_room, neg_rank, node] : nodes) {
      if (left == 0) break;
      int take = std::min(left, -neg_room);
      TakeGpus(node, state.FreeMask(node), shape.gpus_per_task, take,
               state.GpuDomain(node), &p.tasks);
      left -= take;
      ++p.nodes;
    }
    ++p.leaves;
  }
  if (left > 0) return std::nullopt;
  SetSwitch(topo, &p);
  return p;
}

std::optional<Placement> PlaceMultiNode(const ClusterState& state,
                                        GpuModelId model, const JobShape& shape,
                                        const NodeMask* avoid,
                                        const NodePreference& prefer) {
  const Topology& topo = state.topology();
  const int g = shape.gpus_per_task;
  if (state.Slots(topo.root(), model, g) < shape.tasks) return std::nullopt;
  for (int lvl = 1; lvl <= topo.num_levels(); ++lvl) {
    std::vector<std::pair<int, int>> candidates;  // (slots, switch)
    for (int sw : topo.SwitchesAtLevel(lvl)) {
      int slots = state.Slots(sw, model, g);
      if (slots >= shape.tasks) candidates.emplace_back(slots, sw);
    }
    std::sort(candidates.begin(), candidates.end());
    for (const auto& [slots, sw] : candidates) {
      std::optional<Placement> p =
          PlaceUnderSwitch(state, sw, model, shape, avoid, prefer);
      if (p.has_value()) return p;
    }
  }
  return std::nullopt;
}

void ExplainFailure(const ClusterState& state, GpuModelId model,
                    const JobShape& shape, PendingReason* why) {
  why->gpu_model = model;
  why->gpus_per_task = shape.gpus_per_task;
  if (state.SchedulableGpus(model) == 0) {
    why->code = PendingReason::Code::kNoSchedulableNodes;
    return;
  }
  if (state.ModelFreeGpus(model) == 0) {
    why->code = PendingReason::Code::kNoFreeGpus;
    return;
  }
  if (shape.OnOneNode(state.MaxNodeGpus(model))) {
    why->code = PendingReason::Code::kNoNodeFits;
    why->need = shape.TotalGpus();
    why->have = state.MaxFreeOnNode(model);
    return;
  }
  const Topology& topo = state.topology();
  why->code = PendingReason::Code::kNoSwitchFits;
  why->need = shape.tasks;
  why->whole_nodes = shape.gpus_per_task == state.MaxNodeGpus(model);

  int best = 0;
  for (int lvl = 1; lvl <= topo.num_levels(); ++lvl) {
    for (int sw : topo.SwitchesAtLevel(lvl)) {
      best = std::max(best, state.Slots(sw, model, shape.gpus_per_task));
    }
  }
  why->have = best;
}

}  // namespace

void DescribePlacement(const Topology& topo, Placement* placement) {
  SetSwitch(topo, placement);
  std::vector<int> nodes, leaves;
  for (const TaskPlacement& t : placement->tasks) {
    nodes.push_back(t.node);
    leaves.push_back(topo.leaf_of(t.node));
  }
  std::sort(nodes.begin(), nodes.end());
  std::sort(leaves.begin(), leaves.end());
  placement->nodes =
      static_cast<int>(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  placement->leaves = static_cast<int>(
      std::unique(leaves.begin(), leaves.end()) - leaves.begin());
}

std::vector<GpuModelId> CandidateModels(const Cluster& cluster,
                                        const JobShape& shape) {
  if (shape.gpu_model != kAnyGpuModel) return {shape.gpu_model};
  std::vector<GpuModelId> models(cluster.gpu_models.size());
  std::iota(models.begin(), models.end(), 0);
  std::stable_sort(models.begin(), models.end(), [&](int a, int b) {
    return cluster.gpu_models[a].speed > cluster.gpu_models[b].speed;
  });
  return models;
}

std::optional<Placement> FindPlacement(const ClusterState& state,
                                       const JobShape& shape,
                                       const NodeMask* avoid,
                                       const NodeMask* prefer,
                                       PendingReason* why) {
  return FindPlacement(state, shape, avoid, NodePreference{nullptr, prefer},
                       why);
}

std::optional<Placement> FindPlacement(const ClusterState& state,
                                       const JobShape& shape,
                                       const NodeMask* avoid,
                                       const NodePreference& prefer,
                                       PendingReason* why) {
  std::optional<GpuModelId> first_usable;
  const GpuModelId only[1] = {shape.gpu_model};
  const std::span<const GpuModelId> models =
      shape.gpu_model == kAnyGpuModel
          ? std::span<const GpuModelId>(state.ModelsBySpeed())
          : std::span<const GpuModelId>(only);
  for (GpuModelId model : models) {
    const int max_node = state.MaxNodeGpus(model);
    if (max_node < shape.gpus_per_task) continue;
    if (!first_usable) first_usable = model;
    if (state.ModelFreeGpus(model) < shape.TotalGpus()) continue;
    std::optional<Placement> p =
        shape.OnOneNode(max_node)
            ? PlaceOnOneNode(state, model, shape, avoid, prefer)
            : PlaceMultiNode(state, model, shape, avoid, prefer);
    if (p.has_value()) {
      if (!prefer.empty()) {
        for (const TaskPlacement& t : p->tasks) {
          const int rank = prefer.Rank(t.node);
          p->preferred_tasks += rank & 1;
          p->data_tasks += rank >> 1;
        }
      }
      return p;
    }
  }
  if (why != nullptr) {
    *why = PendingReason{};
    if (first_usable) {
      ExplainFailure(state, *first_usable, shape, why);
    } else {
      why->code = PendingReason::Code::kNoSchedulableNodes;
      why->gpu_model = shape.gpu_model;
    }
  }
  return std::nullopt;
}

bool CouldEverRun(const Cluster& cluster, const JobShape& shape,
                  std::string* why) {
  if (shape.slice.partial()) return CouldSliceEverRun(cluster, shape, why);
  std::string first_reason;
  for (GpuModelId model : CandidateModels(cluster, shape)) {
    const std::string& name = cluster.gpu_models[model].name;
    int64_t slots = 0;
    int max_node = 0;
    for (const NodeSpec& n : cluster.nodes) {
      if (n.gpu_model != model) continue;
      max_node = std::max(max_node, n.gpus);
      int fit = shape.gpus_per_task > 0 ? n.gpus / shape.gpus_per_task : 0;
      if (shape.cpus_milli_per_task > 0) {
        fit = std::min<int64_t>(fit, n.cpus_milli / shape.cpus_milli_per_task);
      }
      if (shape.memory_bytes_per_task > 0) {
        fit = std::min<int64_t>(fit,
                                n.memory_bytes / shape.memory_bytes_per_task);
      }
      if (shape.nics_per_task > 0 && n.nics > 0) {
        fit = std::min(fit, n.nics / shape.nics_per_task);
      }
      if (shape.OnOneNode(n.gpus) && fit >= shape.tasks) return true;
      slots += shape.TasksPerNode(fit);
    }
    std::string reason;
    if (max_node == 0) {
      reason = absl::StrCat("the cluster has no ", name, " nodes");
    } else if (shape.OnOneNode(max_node)) {
      reason = absl::StrCat("no ", name,
                            " node has the CPU or memory for the job's ",
                            shape.tasks, " task(s)");
    } else if (slots >= shape.tasks) {
      return true;
    } else if (shape.one_task_per_node) {
      reason = absl::StrCat(
          "needs ", shape.tasks, " ", name, " nodes with room for a task of ",
          shape.gpus_per_task, " GPUs; the cluster has ", slots);
    } else {
      reason =
          absl::StrCat("needs ", shape.tasks, " tasks of ", shape.gpus_per_task,
                       " ", name, " GPUs; the whole cluster holds ", slots);
    }

    if (first_reason.empty()) first_reason = reason;
  }
  if (why != nullptr) {
    *why = first_reason.empty() ? "the cluster has no GPUs" : first_reason;
  }
  return false;
}

}  // namespace loom
