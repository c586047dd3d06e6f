// The scheduler's per-node state: schedulable flags, images, datasets,
// labels; prefetch for reserved jobs.

#include <algorithm>
#include <bit>
#include <map>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"

namespace loom {

void Scheduler::SetNodeSchedulable(int node, bool schedulable) {
  if (!schedulable) {
    if (const JobId owner = SpareOwner(node); owner != 0) {
      // A spare that went down is no spare: its job tops up.
      SchedJob& job = jobs_.at(owner);
      DropSpare(job, node);
      if (job.phase == JobPhase::kRunning) short_of_spares_.insert(owner);
    }
  }
  state_->SetSchedulable(node, schedulable);
}

namespace {

// Replaces the keys (image digests, dataset versions) node `node` holds in
// `per_node` and keeps `masks` (per key, the nodes holding it; only keys
// some node holds) in step.
void SetNodeKeys(int node, int num_nodes, const std::vector<std::string>& keys,
                 std::vector<std::vector<std::string>>* per_node,
                 absl::flat_hash_map<std::string, NodeMask>* masks) {
  if (node < 0 || node >= num_nodes) return;
  if (per_node->empty()) per_node->resize(num_nodes);
  std::vector<std::string> next;
  next.reserve(keys.size());
  for (const std::string& k : keys) {
    if (!k.empty()) next.push_back(k);
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  std::vector<std::string>& held = (*per_node)[node];
  if (held == next) return;
  for (const std::string& k : held) {
    if (std::binary_search(next.begin(), next.end(), k)) continue;
    auto it = masks->find(k);
    if (it == masks->end()) continue;
    it->second.Erase(node);
    if (it->second.Empty()) masks->erase(it);
  }
  for (const std::string& k : next) {
    auto [it, inserted] = masks->try_emplace(k);
    if (inserted) it->second = NodeMask(num_nodes);
    it->second.Insert(node);
  }
  held = std::move(next);
}

}  // namespace

void Scheduler::SetNodeImages(int node,
                              const std::vector<std::string>& digests) {
  SetNodeKeys(node, state_->num_nodes(), digests, &node_images_, &image_nodes_);
}

void Scheduler::SetNodeDatasets(int node,
                                const std::vector<std::string>& datasets) {
  SetNodeKeys(node, state_->num_nodes(), datasets, &node_datasets_,
              &dataset_nodes_);
}

const NodeMask* Scheduler::NodesWithDatasets(
    const std::vector<std::string>& datasets, NodeMask* scratch) const {
  if (datasets.empty() || dataset_nodes_.empty()) return nullptr;
  const NodeMask* first = nullptr;
  for (const std::string& d : datasets) {
    auto it = dataset_nodes_.find(d);
    if (it == dataset_nodes_.end()) return nullptr;
    if (first == nullptr) {
      first = &it->second;
    } else if (first != &it->second) {
      if (first != scratch) {
        *scratch = *first;
        first = scratch;
      }
      scratch->IntersectWith(it->second);
    }
  }
  return first == scratch && scratch->Empty() ? nullptr : first;
}

void Scheduler::NotePrefetch(const SchedJob& job,
                             const Reservation& reservation,
                             PassResult* result) {
  const JobId id = job.request.id;
  Prefetched& p = prefetched_[id];
  if (p.nodes != reservation.nodes) {
    // A reservation on other nodes: report afresh.
    p.nodes = reservation.nodes;
    p.reported.clear();
  }
  // Per node the datasets it lacks that were not reported yet; nodes with
  // the same list go into one entry.
  std::map<std::vector<std::string>, std::vector<int>> lacking;
  reservation.nodes.ForEachUntil([&](int node) {
    std::vector<std::string> missing;
    for (const std::string& d : job.request.datasets) {
      auto it = dataset_nodes_.find(d);
      if (it != dataset_nodes_.end() && it->second.Contains(node)) continue;
      if (p.reported.emplace(node, d).second) missing.push_back(d);
    }
    if (!missing.empty()) lacking[std::move(missing)].push_back(node);
    return true;
  });
  for (auto& [datasets, nodes] : lacking) {
    result->prefetch.push_back({id, std::move(nodes), datasets});
  }
}

void Scheduler::SetNodeNics(int node, int nics) {
  if (node < 0 || node >= state_->num_nodes()) return;
  state_->SetNics(node, nics);
}

void Scheduler::SetNodeLabels(int node,
                              std::map<std::string, std::string> labels) {
  node_labels_.Set(node, std::move(labels));
}

const NodeMask* Scheduler::NodesWithImage(const std::string& digest) const {
  if (digest.empty() || image_nodes_.empty()) return nullptr;
  auto it = image_nodes_.find(digest);
  return it == image_nodes_.end() ? nullptr : &it->second;
}

const NodeMask* Scheduler::SpreadAvoid(const SchedJob& job,
                                       const NodeMask* avoid,
                                       NodeMask* scratch) const {
  const std::string& group = job.request.spread_group;
  if (group.empty()) return nullptr;
  const int n = state_->num_nodes();
  NodeMask taken(n);
  bool any = false;
  for (const auto& [id, other] : jobs_) {
    if (id == job.request.id || other.request.spread_group != group ||
        (other.phase != JobPhase::kRunning &&
         other.phase != JobPhase::kStopping)) {
      continue;
    }
    for (const TaskPlacement& t : other.placement.tasks) {
      if (t.node >= 0 && t.node < n) {
        taken.Insert(t.node);
        any = true;
      }
    }
  }
  if (!any) return nullptr;
  if (job.request.spread_leaf) {
    const Topology& topo = state_->topology();
    std::vector<bool> leaves(topo.num_switches(), false);
    for (int node = 0; node < n; ++node) {
      if (taken.Contains(node)) leaves[topo.leaf_of(node)] = true;
    }
    for (int node = 0; node < n; ++node) {
      if (leaves[topo.leaf_of(node)]) taken.Insert(node);
    }
  }
  if (avoid != nullptr) taken.UnionWith(*avoid);
  *scratch = std::move(taken);
  return scratch;
}

std::vector<JobId> Scheduler::JobsOnNode(int node) const {
  std::vector<JobId> jobs = state_->JobsOn(node);
  std::sort(jobs.begin(), jobs.end());
  jobs.erase(std::unique(jobs.begin(), jobs.end()), jobs.end());
  return jobs;
}

}  // namespace loom
