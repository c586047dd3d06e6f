// Scheduler::PreviewCluster and Scheduler::UpdateCluster: taking a new
// cluster (a cluster spec revision) while jobs run.

#include <algorithm>
#include <bit>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "loom/core/mig.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"

namespace loom {
namespace {

std::string GpuCount(int n) {
  return absl::StrCat(n, n == 1 ? " GPU" : " GPUs");
}

// How the live jobs map onto `next`: node and GPU model ids by name.
struct Mapping {
  std::vector<int> node;          // old node id -> new id, or -1
  std::vector<GpuModelId> model;  // old model id -> new id, or -1
};

Mapping MapOnto(const Cluster& from, const Cluster& next) {
  Mapping m;
  absl::flat_hash_map<std::string, int> node_by_name;
  for (size_t i = 0; i < next.nodes.size(); ++i) {
    node_by_name.emplace(next.nodes[i].name, static_cast<int>(i));
  }
  m.node.reserve(from.nodes.size());
  for (const NodeSpec& n : from.nodes) {
    auto it = node_by_name.find(n.name);
    m.node.push_back(it == node_by_name.end() ? -1 : it->second);
  }
  m.model.reserve(from.gpu_models.size());
  for (const GpuModel& g : from.gpu_models) {
    m.model.push_back(next.FindGpuModel(g.name));
  }
  return m;
}

// Why the tasks of `job` at `placement` (old ids) cannot stay on `next`,
// given what jobs checked before it took (`used`, per new node: GPUs, CPUs,
// memory). Empty reasons: it fits, and `used` grows by its share.
struct NodeUse {
  uint32_t gpus = 0;
  int64_t cpus = 0;
  int64_t memory = 0;
};

std::vector<Scheduler::ClusterChange::Blocked> CheckFit(
    const SchedJob& job, const Cluster& from, const Cluster& next,
    const Mapping& map, absl::flat_hash_map<int, NodeUse>& used) {
  std::vector<Scheduler::ClusterChange::Blocked> out;
  const JobShape& shape = job.request.shape;
  absl::flat_hash_map<int, NodeUse> mine;
  for (const TaskPlacement& t : job.placement.tasks) {
    const std::string& name = from.nodes[t.node].name;
    const int to = map.node[t.node];
    auto block = [&](std::string why) {
      for (const auto& b : out) {
        if (b.node == name) return;
      }
      out.push_back({job.request.id, name, std::move(why)});
    };
    if (to < 0) {
      block(absl::StrCat("node ", name, " is removed"));
      continue;
    }
    const NodeSpec& n = next.nodes[to];
    const std::string& had = from.gpu_models[from.nodes[t.node].gpu_model].name;
    if (next.gpu_models[n.gpu_model].name != had) {
      block(absl::StrCat("node ", name, " changes GPU model ", had, " -> ",
                         next.gpu_models[n.gpu_model].name));
      continue;
    }
    // The next spec's MIG GPUs of the node (its pool's `mig.gpus` first
    // ones) are not whole: a whole-GPU task there cannot stay.
    if (n.pool >= 0 && n.pool < static_cast<int>(next.pools.size())) {
      const PoolSpec& pool = next.pools[n.pool];
      const int mig = MigProfilesFor(next.gpu_models[pool.gpu_model].name,
                                     pool.gpu_memory_bytes)
                              .empty()
                          ? 0
                          : std::min(pool.mig.gpus, n.gpus);
      const uint32_t mig_mask = mig >= 32 ? ~0u : ((1u << mig) - 1);
      if ((t.gpu_mask & mig_mask) != 0) {
        block(absl::StrCat("GPU ", std::countr_zero(t.gpu_mask & mig_mask),
                           " of node ", name,
                           " becomes a MIG GPU under a job that holds it "
                           "whole"));
        continue;
      }
    }
    NodeUse& u = mine[to];
    u.gpus |= t.gpu_mask;
    if (t.partial()) u.gpus |= 1u << t.slice_gpu;
    u.cpus += shape.cpus_milli_per_task;
    u.memory += shape.memory_bytes_per_task;
  }
  if (!out.empty()) return out;
  for (const auto& [to, u] : mine) {
    const NodeSpec& n = next.nodes[to];
    const NodeUse& before = used[to];
    const uint32_t all = n.gpus >= 32 ? ~0u : ((1u << n.gpus) - 1);
    std::string why;
    if ((u.gpus & ~all) != 0) {
      why = absl::StrCat("node ", n.name, " has ", GpuCount(n.gpus),
                         "; the job holds GPU ", 31 - std::countl_zero(u.gpus));
    } else if (before.cpus + u.cpus > n.cpus_milli) {
      why = absl::StrCat("node ", n.name, " has ", n.cpus_milli / 1000.0,
                         " CPUs; its jobs hold ",
                         (before.cpus + u.cpus) / 1000.0);
    } else if (before.memory + u.memory > n.memory_bytes) {
      why =
          absl::StrCat("node ", n.name, " has less memory than its jobs hold");
    }
    if (!why.empty()) out.push_back({job.request.id, n.name, std::move(why)});
  }
  if (!out.empty()) return out;
  for (const auto& [to, u] : mine) {
    NodeUse& total = used[to];
    total.gpus |= u.gpus;
    total.cpus += u.cpus;
    total.memory += u.memory;
  }
  return out;
}

// Live jobs in id order: deterministic whatever the hash map's order.
std::vector<JobId> SortedIds(const absl::node_hash_map<JobId, SchedJob>& jobs) {
  std::vector<JobId> ids;
  ids.reserve(jobs.size());
  for (const auto& [id, job] : jobs) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace

Scheduler::ClusterChange Scheduler::PreviewCluster(const Cluster& next) const {
  ClusterChange change;
  const Cluster& from = *cluster_;
  const Mapping map = MapOnto(from, next);
  absl::flat_hash_map<int, NodeUse> used;
  for (JobId id : SortedIds(jobs_)) {
    const SchedJob& job = jobs_.at(id);
    const GpuModelId asked = job.request.shape.gpu_model;
    const bool model_gone = asked != kAnyGpuModel && map.model[asked] < 0;
    JobShape shape = job.request.shape;
    if (asked != kAnyGpuModel) shape.gpu_model = map.model[asked];
    if (job.phase != JobPhase::kPending) {
      std::vector<ClusterChange::Blocked> b =
          CheckFit(job, from, next, map, used);
      change.blocked.insert(change.blocked.end(), b.begin(), b.end());
      continue;
    }
    std::string why;
    const bool can = !model_gone && CouldEverRun(next, shape, &why);
    if (can && !job.infeasible.empty()) change.feasible.push_back(id);
    if (!can && job.infeasible.empty()) {
      change.infeasible.push_back(
          {id, model_gone ? "its GPU model is removed"
                          : (why.empty() ? "it does not fit" : why)});
    }
  }
  return change;
}

absl::StatusOr<Scheduler::ClusterChange> Scheduler::UpdateCluster(
    const Cluster& next_spec, absl::Time now) {
  const Cluster& from = *cluster_;
  for (const auto& [id, job] : jobs_) {
    const GpuModelId m = job.request.shape.gpu_model;
    if (m != kAnyGpuModel &&
        next_spec.FindGpuModel(from.gpu_models[m].name) < 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", id, " asks for GPU model ", from.gpu_models[m].name,
          ", which the new cluster does not have"));
    }
  }
  ClusterChange change = PreviewCluster(next_spec);
  if (!change.blocked.empty()) {
    const ClusterChange::Blocked& b = change.blocked.front();
    return absl::FailedPreconditionError(absl::StrCat(
        "job ", b.job, " cannot stay where it runs: ", b.why,
        change.blocked.size() > 1
            ? absl::StrCat(" (and ", change.blocked.size() - 1, " more)")
            : ""));
  }

  auto next = std::make_unique<const Cluster>(next_spec);
  const Mapping map = MapOnto(from, *next);
  auto state =
      std::make_unique<ClusterState>(*next, policy_->UsesReservations());
  for (size_t i = 0; i < map.node.size(); ++i) {
    if (map.node[i] >= 0) {
      state->SetSchedulable(map.node[i],
                            state_->Schedulable(static_cast<int>(i)));
      // NICs its agent reported (not the old spec's count) stay.
      const int nics = state_->Nics(static_cast<int>(i));
      if (nics != (from.nodes[i].nics > 0 ? from.nodes[i].nics : -1)) {
        state->SetNics(map.node[i], nics);
      }
    }
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> images;
  for (size_t i = 0; i < node_images_.size(); ++i) {
    if (!node_images_[i].empty()) {
      images.emplace_back(from.nodes[i].name, node_images_[i]);
    }
  }
  std::vector<std::pair<std::string, std::vector<std::string>>> datasets;
  for (size_t i = 0; i < node_datasets_.size(); ++i) {
    if (!node_datasets_[i].empty()) {
      datasets.emplace_back(from.nodes[i].name, node_datasets_[i]);
    }
  }

  // Recovery placements on hot spares are node ids of the old numbering:
  // those jobs join the queue (as pending jobs, below).
  AbandonRecoveries();
  // A job whose GPU model id changes leaves the policy's index (keyed by
  // shape) and comes back with the new shape; so do pending jobs whose
  // feasibility changes. The others stay where they are in it.
  const std::vector<JobId> ids = SortedIds(jobs_);
  auto model_moves = [&](const SchedJob& job) {
    const GpuModelId m = job.request.shape.gpu_model;
    if (m != kAnyGpuModel && map.model[m] != m) return true;
    return job.phase != JobPhase::kPending &&
           map.model[job.placement.gpu_model] != job.placement.gpu_model;
  };
  std::vector<JobId> moved;
  for (JobId id : ids) {
    SchedJob& job = jobs_.at(id);
    if (!model_moves(job)) continue;
    moved.push_back(id);
    if (job.phase != JobPhase::kPending) {
      policy_->Stopped(job);
    } else if (job.infeasible.empty()) {
      policy_->Remove(job);
    }
  }
  cluster_ = std::move(next);
  state_ = std::move(state);
  // Claims are node masks of the old numbering; preemptions in flight go
  // on, unclaimed.
  claims_.clear();
  {
    std::vector<int> old_of_new(cluster_->nodes.size(), -1);
    for (size_t i = 0; i < map.node.size(); ++i) {
      if (map.node[i] >= 0) old_of_new[map.node[i]] = static_cast<int>(i);
    }
    node_labels_.Remap(*cluster_, old_of_new);
  }
  for (JobId id : ids) {
    SchedJob& job = jobs_.at(id);
    const bool was_moved = std::binary_search(moved.begin(), moved.end(), id);
    GpuModelId& m = job.request.shape.gpu_model;
    if (m != kAnyGpuModel) m = map.model[m];
    if (job.phase != JobPhase::kPending) {
      job.placement.gpu_model = map.model[job.placement.gpu_model];
      std::vector<int> nodes;
      for (TaskPlacement& t : job.placement.tasks) {
        t.node = map.node[t.node];
        nodes.push_back(t.node);
      }
      const Topology& topo = cluster_->topology;
      job.placement.switch_level = topo.LowestCommonLevel(nodes);
      job.placement.switch_index =
          job.placement.switch_level == 0
              ? -1
              : topo.AncestorAt(nodes[0], job.placement.switch_level);
      state_->Allocate(id, job.placement, job.request.shape, job.expected_end);
      if (was_moved) policy_->Started(job);
      continue;
    }
    const bool queued = job.infeasible.empty() && !was_moved;
    std::string why;
    if (CouldEverRun(*cluster_, job.request.shape, &why)) {
      job.infeasible.clear();
      if (!queued) policy_->Enqueue(job);
    } else {
      job.infeasible = why.empty() ? "it does not fit" : why;
      if (queued) policy_->Remove(job);
    }
  }
  // Spares move to the new node ids, or go when they cannot stay spares.
  RemapSpares(map.node);
  for (size_t p = 0; p < projects_.size(); ++p) {
    Accrue(static_cast<int>(p), now);
  }
  ApplyProjectSpecs();

  node_images_.clear();
  image_nodes_.clear();
  node_datasets_.clear();
  dataset_nodes_.clear();
  prefetched_.clear();  // node ids of the old numbering
  absl::flat_hash_map<std::string, int> node_by_name;
  for (size_t i = 0; i < cluster_->nodes.size(); ++i) {
    node_by_name.emplace(cluster_->nodes[i].name, static_cast<int>(i));
  }
  for (const auto& [name, digests] : images) {
    if (auto it = node_by_name.find(name); it != node_by_name.end()) {
      SetNodeImages(it->second, digests);
    }
  }
  for (const auto& [name, held] : datasets) {
    if (auto it = node_by_name.find(name); it != node_by_name.end()) {
      SetNodeDatasets(it->second, held);
    }
  }
  return change;
}

}  // namespace loom
