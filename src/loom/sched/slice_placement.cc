#include "loom/sched/slice_placement.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/sched/placement.h"

namespace loom {
namespace {

// A candidate GPU for one task, ranked by `key` (lower is better): the fgd
// score (the growth of the expected fragmentation in millionths of a GPU;
// 0 under best fit), the class (0: a free instance or room on a shared GPU,
// 1: an idle MIG GPU partitioned anew, 2: a free whole GPU converted), then
// the class's own best-fit measure, then node and GPU ids for determinism.
struct Candidate {
  std::array<int64_t, 5> key = {INT64_MAX, 0, 0, 0, 0};
  TaskPlacement task;
  bool found() const { return key[0] != INT64_MAX; }
};

int ProfileIndex(const std::vector<MigProfile>& profiles,
                 const std::string& name) {
  for (size_t i = 0; i < profiles.size(); ++i) {
    if (profiles[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

class SliceSearch {
 public:
  SliceSearch(const ClusterState& state, const JobShape& shape,
              const NodeMask* avoid, const SliceScoring& scoring)
      : state_(state),
        shape_(shape),
        avoid_(avoid),
        fgd_(scoring.score == SliceScore::kFgd && scoring.workload != nullptr &&
                     !scoring.workload->empty() && shape.slice.mig.empty()
                 ? scoring.workload
                 : nullptr) {}

  std::optional<Placement> Run() {
    Placement p;
    p.gpu_model = shape_.gpu_model;
    for (int t = 0; t < shape_.tasks; ++t) {
      Candidate best;
      fgd_node_ = -1;  // earlier tasks changed what is free
      // Classes 0 and 1 live on nodes with partial GPUs only; under best
      // fit a whole GPU (class 2) is looked for only when they have nothing,
      // under fgd always.
      state_.PartNodes().ForEachUntil([&](int node) {
        ConsiderNode(node, /*whole=*/false, &best);
        return true;
      });
      if (fgd_ != nullptr || (!best.found() && shape_.tasks > 1)) {
        for (int node = 0; node < state_.num_nodes(); ++node) {
          ConsiderNode(node, /*whole=*/true, &best);
        }
      } else if (!best.found()) {
        ConsiderWholeByIndex(&best);
      }
      if (!best.found()) return std::nullopt;
      const TaskPlacement& c = best.task;
      taken_.push_back({c.node, c.slice_gpu});
      AddUse(c.node);
      if (p.gpu_model == kAnyGpuModel) p.gpu_model = state_.NodeModel(c.node);
      p.tasks.push_back(c);
    }
    DescribePlacement(state_.topology(), &p);
    return p;
  }

 private:
  bool Taken(int node, int gpu) const {
    return std::find(taken_.begin(), taken_.end(), std::pair(node, gpu)) !=
           taken_.end();
  }
  std::pair<int64_t, int64_t>* Use(int node) {
    for (auto& [n, use] : use_) {
      if (n == node) return &use;
    }
    return nullptr;
  }
  void AddUse(int node) {
    std::pair<int64_t, int64_t>* u = Use(node);
    if (u == nullptr) {
      use_.push_back({node, {0, 0}});
      u = &use_.back().second;
    }
    u->first += shape_.cpus_milli_per_task;
    u->second += shape_.memory_bytes_per_task;
  }

  // Best fit for a free whole GPU (class 2) through the state's indexes
  // instead of a scan of every node: per usable model, the partly used
  // nodes with the fewest free GPUs first (in id order: the first usable one
  // is that model's best), else an idle node of the leaf with the fewest
  // idle nodes, as whole-GPU placement takes them. For one task; the
  // models' best candidates are compared by key.
  void ConsiderWholeByIndex(Candidate* best) {
    const GpuModelId chosen = chosen_model();
    for (GpuModelId model = 0; model < state_.num_models(); ++model) {
      if (chosen != kAnyGpuModel && model != chosen) continue;
      Candidate local;
      bool found = false;
      auto consider = [&](int node) {
        ConsiderNode(node, /*whole=*/true, &local);
        found = local.found();
        return !found;
      };
      for (int f = 1; f <= kMaxGpusPerNode && !found; ++f) {
        if (state_.PartialCount(model, f) > 0) {
          state_.PartialNodes(model, f).ForEachUntil(consider);
        }
      }
      const Topology& topo = state_.topology();
      for (const auto& [count, leaf] : state_.LeavesByIdle(model)) {
        if (found) break;
        for (int node : topo.sw(leaf).nodes) {
          if (state_.NodeModel(node) == model && state_.IsIdle(node) &&
              !consider(node)) {
            break;
          }
        }
      }
      if (local.found() && local.key < best->key) *best = local;
    }
  }

  bool NodeUsable(int node, GpuModelId model) const {
    if (!state_.Schedulable(node)) return false;
    if (avoid_ != nullptr && avoid_->Contains(node)) return false;
    if (model != kAnyGpuModel && state_.NodeModel(node) != model) return false;
    int64_t cpus = shape_.cpus_milli_per_task,
            mem = shape_.memory_bytes_per_task;
    for (const auto& [n, use] : use_) {
      if (n == node) {
        cpus += use.first;
        mem += use.second;
      }
    }
    return state_.FreeCpus(node) >= cpus && state_.FreeMemory(node) >= mem;
  }

  void ConsiderNode(int node, bool whole, Candidate* best) {
    const GpuModelId model = chosen_model();
    if (!NodeUsable(node, model)) return;
    const bool mig = !shape_.slice.mig.empty();
    int profile = -1;
    if (mig) {
      profile = ProfileIndex(state_.MigProfilesOn(node), shape_.slice.mig);
      if (profile < 0) return;
    }
    const uint32_t free = state_.FreeMask(node);
    int free_whole = std::popcount(free);
    for (const auto& [n, g] : taken_) {
      if (n == node && ((free >> g) & 1)) --free_whole;
    }
    for (int g = 0; g < state_.NodeGpus(node); ++g) {
      if (Taken(node, g)) continue;
      const GpuPart& part = state_.Part(node, g);
      Candidate c;
      c.task.node = node;
      c.task.slice_gpu = g;
      if (whole) {
        if (part.mode != GpuMode::kWhole || !((free >> g) & 1)) continue;
        if (mig ? !state_.MigDynamic(node)
                : !state_.Sharing(node) ||
                      state_.GpuMemory(node) < shape_.slice.share_bytes) {
          continue;
        }
        c.key = {0, 2, free_whole, node, g};
        c.task.repartition = mig;
      } else if (mig) {
        if (part.mode != GpuMode::kMig) continue;
        int free_left = -1, start = -1;
        for (size_t i = 0; i < part.layout.size(); ++i) {
          if (part.owners[i] != 0) continue;
          ++free_left;
          if (start < 0 && part.layout[i].profile == profile) {
            start = part.layout[i].start;
          }
        }
        if (start >= 0) {
          c.key = {0, 0, free_left, node, g};
          c.task.mig_start = start;
        } else if (part.tasks == 0 && state_.MigDynamic(node)) {
          c.key = {0, 1, free_whole, node, g};
          c.task.repartition = true;
        } else {
          continue;
        }
      } else {
        if (part.mode != GpuMode::kShared) continue;
        const int64_t left =
            part.capacity - part.used - shape_.slice.share_bytes;
        if (left < 0) continue;
        c.key = {0, 0, left, node, g};
      }
      if (fgd_ != nullptr) c.key[0] = FgdScore(node, g);
      if (mig) {
        c.task.mig_profile = profile;
        if (c.task.mig_start < 0) {
          c.task.mig_start = state_.MigProfilesOn(node)[profile].starts[0];
        }
      } else {
        c.task.share_bytes = shape_.slice.share_bytes;
      }
      if (c.key < best->key) *best = c;
    }
  }

  // The growth of the node's expected fragmentation (in millionths of a
  // GPU) when a share of this job takes GPU `g` (a shared one, or a free
  // whole one turned shared). GPUs of a node with the same room score the same,
  // so each node's score per room is computed once per task.
  int64_t FgdScore(int node, int g) {
    if (fgd_node_ != node) {
      fgd_node_ = node;
      fgd_memo_.clear();
      fgd_free_ = NodeFreeOf(state_, node);
      // Earlier tasks of this job placed on the node (not yet allocated).
      for (const auto& [n, gpu] : taken_) {
        if (n != node) continue;
        fgd_free_.free[gpu] = std::max<int64_t>(
            0, fgd_free_.free[gpu] - shape_.slice.share_bytes);
      }
      if (const std::pair<int64_t, int64_t>* u = UseOf(node)) {
        fgd_free_.cpus_milli -= u->first;
        fgd_free_.memory_bytes -= u->second;
      }
      fgd_before_ = ExpectedFragmentation(fgd_free_, *fgd_);
    }
    const int64_t room = fgd_free_.free[g];
    for (const auto& [r, score] : fgd_memo_) {
      if (r == room) return score;
    }
    NodeFree after = fgd_free_;
    after.free[g] = room - shape_.slice.share_bytes;
    after.cpus_milli -= shape_.cpus_milli_per_task;
    after.memory_bytes -= shape_.memory_bytes_per_task;
    const double delta = ExpectedFragmentation(after, *fgd_) - fgd_before_;
    const int64_t score = static_cast<int64_t>(std::llround(delta * 1e6));
    fgd_memo_.push_back({room, score});
    return score;
  }
  const std::pair<int64_t, int64_t>* UseOf(int node) const {
    for (const auto& [n, use] : use_) {
      if (n == node) return &use;
    }
    return nullptr;
  }

  GpuModelId chosen_model() const {
    return taken_.empty() ? shape_.gpu_model
                          : state_.NodeModel(taken_[0].first);
  }

  const ClusterState& state_;
  const JobShape& shape_;
  const NodeMask* avoid_;
  const TargetWorkload* fgd_;  // null: best fit
  // The fgd score's node being scored, its free state and expected
  // fragmentation before the task, and scores by room.
  int fgd_node_ = -1;
  NodeFree fgd_free_;
  double fgd_before_ = 0;
  std::vector<std::pair<int64_t, int64_t>> fgd_memo_;
  std::vector<std::pair<int, int>> taken_;  // (node, GPU) of earlier tasks
  std::vector<std::pair<int, std::pair<int64_t, int64_t>>> use_;
};

}  // namespace

absl::StatusOr<SliceScore> ParseSliceScore(std::string_view name) {
  if (name == "best_fit") return SliceScore::kBestFit;
  if (name == "fgd") return SliceScore::kFgd;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown slice score '", std::string(name), "' (use best_fit or fgd)"));
}

std::string_view SliceScoreName(SliceScore score) {
  return score == SliceScore::kFgd ? "fgd" : "best_fit";
}

std::optional<Placement> FindSlicePlacement(const ClusterState& state,
                                            const JobShape& shape,
                                            const NodeMask* avoid,
                                            PendingReason* why,
                                            const SliceScoring& scoring) {
  std::optional<Placement> p = SliceSearch(state, shape, avoid, scoring).Run();
  if (p.has_value() || why == nullptr) return p;
  *why = PendingReason{};
  why->code = PendingReason::Code::kNoSliceFits;
  why->gpu_model = shape.gpu_model;
  why->need = shape.tasks;
  // What there is: free instances of the profile, or the most memory left
  // on one shared GPU.
  state.PartNodes().ForEachUntil([&](int node) {
    if (!state.Schedulable(node)) return true;
    for (int g = 0; g < state.NodeGpus(node); ++g) {
      const GpuPart& part = state.Part(node, g);
      if (!shape.slice.mig.empty() && part.mode == GpuMode::kMig) {
        const std::vector<MigProfile>& profiles = state.MigProfilesOn(node);
        for (size_t i = 0; i < part.layout.size(); ++i) {
          if (part.owners[i] == 0 &&
              profiles[part.layout[i].profile].name == shape.slice.mig) {
            ++why->have;
          }
        }
      } else if (shape.slice.mig.empty() && part.mode == GpuMode::kShared) {
        why->bytes = std::max(why->bytes, part.capacity - part.used);
      }
    }
    return true;
  });
  return std::nullopt;
}

bool CouldSliceEverRun(const Cluster& cluster, const JobShape& shape,
                       std::string* why) {
  const bool mig = !shape.slice.mig.empty();
  int64_t gpus = 0;
  bool any_profile = false;
  for (const NodeSpec& n : cluster.nodes) {
    if (shape.gpu_model != kAnyGpuModel && n.gpu_model != shape.gpu_model) {
      continue;
    }
    if (n.pool < 0 || n.pool >= static_cast<int>(cluster.pools.size())) {
      continue;
    }
    const PoolSpec& pool = cluster.pools[n.pool];
    if (n.cpus_milli < shape.cpus_milli_per_task ||
        n.memory_bytes < shape.memory_bytes_per_task) {
      continue;
    }
    if (mig) {
      const std::vector<MigProfile> profiles = MigProfilesFor(
          cluster.gpu_models[pool.gpu_model].name, pool.gpu_memory_bytes);
      const int profile = ProfileIndex(profiles, shape.slice.mig);
      if (profile < 0) continue;
      any_profile = true;
      bool declared = false;
      for (const MigInstance& in : pool.mig.layout) {
        declared = declared || in.profile == profile;
      }
      if (pool.mig.dynamic) {
        gpus += n.gpus;
      } else if (declared) {
        gpus += std::min(pool.mig.gpus, n.gpus);
      }
    } else if (pool.sharing &&
               pool.gpu_memory_bytes >= shape.slice.share_bytes) {
      gpus +=
          n.gpus - (pool.mig.gpus > 0 ? std::min(pool.mig.gpus, n.gpus) : 0);
    }
  }
  if (gpus >= shape.tasks) return true;
  if (why != nullptr) {
    if (mig && !any_profile) {
      *why = absl::StrCat(
          "no GPU of the cluster",
          shape.gpu_model == kAnyGpuModel
              ? std::string()
              : absl::StrCat(" of model ",
                             cluster.gpu_models[shape.gpu_model].name),
          " has the MIG profile ", shape.slice.mig);
    } else if (mig) {
      *why =
          absl::StrCat("needs ", shape.tasks, " GPU(s) with ", shape.slice.mig,
                       " instances (declared in a pool's mig.layout, or a "
                       "pool with mig.dynamic); the cluster has ",
                       gpus);
    } else {
      *why = absl::StrCat("needs ", shape.tasks, " GPU(s) that may be shared ",
                          "with ", FormatBytes(shape.slice.share_bytes),
                          " of memory free; the cluster has ", gpus);
    }
  }
  return false;
}

}  // namespace loom
