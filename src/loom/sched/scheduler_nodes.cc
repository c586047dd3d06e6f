// The scheduler's per-node state: schedulable flags, images, labels.

#include <algorithm>
#include <bit>
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

void Scheduler::SetNodeImages(int node,
                              const std::vector<std::string>& digests) {
  if (node < 0 || node >= state_->num_nodes()) return;
  if (node_images_.empty()) node_images_.resize(state_->num_nodes());
  std::vector<std::string> next;
  next.reserve(digests.size());
  for (const std::string& d : digests) {
    if (!d.empty()) next.push_back(d);
  }
  std::sort(next.begin(), next.end());
  next.erase(std::unique(next.begin(), next.end()), next.end());
  std::vector<std::string>& held = node_images_[node];
  if (held == next) return;
  for (const std::string& d : held) {
    if (std::binary_search(next.begin(), next.end(), d)) continue;
    auto it = image_nodes_.find(d);
    if (it == image_nodes_.end()) continue;
    it->second.Erase(node);
    if (it->second.Empty()) image_nodes_.erase(it);
  }
  for (const std::string& d : next) {
    auto [it, inserted] = image_nodes_.try_emplace(d);
    if (inserted) it->second = NodeMask(state_->num_nodes());
    it->second.Insert(node);
  }
  held = std::move(next);
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
