#include "loom/sched/node_labels.h"

#include <utility>

#include "loom/core/labels.h"

namespace loom {
namespace {

const std::map<std::string, std::string>& EmptyMap() {
  static const auto* empty = new std::map<std::string, std::string>();
  return *empty;
}

}  // namespace

NodeLabels::NodeLabels(const Cluster& cluster) {
  labels_.reserve(cluster.nodes.size());
  for (const NodeSpec& n : cluster.nodes) labels_.push_back(n.labels);
}

bool NodeLabels::Set(int node, std::map<std::string, std::string> labels) {
  if (node < 0 || node >= num_nodes()) return false;
  if (labels_[node] == labels) return false;
  labels_[node] = std::move(labels);
  ++version_;
  return true;
}

const std::map<std::string, std::string>& NodeLabels::Get(int node) const {
  if (node < 0 || node >= num_nodes()) return EmptyMap();
  return labels_[node];
}

void NodeLabels::Remap(const Cluster& cluster,
                       const std::vector<int>& old_of_new) {
  std::vector<std::map<std::string, std::string>> next;
  next.reserve(cluster.nodes.size());
  for (size_t i = 0; i < cluster.nodes.size(); ++i) {
    const int old = i < old_of_new.size() ? old_of_new[i] : -1;
    if (old >= 0 && old < num_nodes()) {
      next.push_back(std::move(labels_[old]));
    } else {
      next.push_back(cluster.nodes[i].labels);
    }
  }
  labels_ = std::move(next);
  ++version_;
}

int NodeLabels::Intern(const std::map<std::string, std::string>& selector) {
  if (selector.empty()) return 0;
  auto [it, inserted] = ids_.try_emplace(selector, 0);
  if (inserted) {
    int id;
    if (!free_ids_.empty()) {
      id = free_ids_.back();
      free_ids_.pop_back();
    } else {
      entries_.emplace_back();
      id = static_cast<int>(entries_.size());
    }
    auto entry = std::make_unique<Entry>();
    entry->selector = selector;
    entries_[id - 1] = std::move(entry);
    it->second = id;
  }
  entries_[it->second - 1]->refs += 1;
  return it->second;
}

void NodeLabels::Release(int id) {
  if (id <= 0 || id > static_cast<int>(entries_.size()) ||
      entries_[id - 1] == nullptr) {
    return;
  }
  Entry& e = *entries_[id - 1];
  if (--e.refs > 0) return;
  ids_.erase(e.selector);
  entries_[id - 1].reset();
  free_ids_.push_back(id);
}

const NodeLabels::Entry* NodeLabels::Find(int id) const {
  if (id <= 0 || id > static_cast<int>(entries_.size())) return nullptr;
  return entries_[id - 1].get();
}

void NodeLabels::Refresh(const Entry& e) const {
  if (e.version == version_) return;
  const Entry& m = e;
  m.excluded = NodeMask(num_nodes());
  m.matching = 0;
  for (int n = 0; n < num_nodes(); ++n) {
    if (MatchesSelector(m.selector, labels_[n])) {
      ++m.matching;
    } else {
      m.excluded.Insert(n);
    }
  }
  m.version = version_;
}

const std::map<std::string, std::string>& NodeLabels::Selector(int id) const {
  const Entry* e = Find(id);
  return e != nullptr ? e->selector : EmptyMap();
}

const NodeMask* NodeLabels::Excluded(int id) const {
  const Entry* e = Find(id);
  if (e == nullptr) return nullptr;
  Refresh(*e);
  return &e->excluded;
}

int NodeLabels::Matching(int id) const {
  const Entry* e = Find(id);
  if (e == nullptr) return id == 0 ? num_nodes() : 0;
  Refresh(*e);
  return e->matching;
}

}  // namespace loom
