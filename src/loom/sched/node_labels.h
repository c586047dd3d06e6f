#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/cluster.h"
#include "loom/sched/node_mask.h"

namespace loom {

// The labels of every node and the job node selectors in use, with the set
// of nodes each selector rules out: what `Scheduler` gives placement as
// nodes to avoid (docs/scheduling.md, "Labels and selectors").
//
// Selectors are interned: equal selectors get one id, so that jobs with
// equal selectors share a queue group and a failure memo, and a selector's
// mask is computed once per change of labels (lazily, on first use). Ids
// are reference counted (`Intern` / `Release`); a released id may be given
// to another selector later.
//
// Pure data; not thread-safe (its `Scheduler`'s thread owns it). The masks
// are caches, so the const accessors may fill them.
class NodeLabels {
 public:
  // Every node starts with its declared labels (`NodeSpec::labels`).
  explicit NodeLabels(const Cluster& cluster);

  int num_nodes() const { return static_cast<int>(labels_.size()); }

  // Replaces node `node`'s labels. Returns whether they changed; a node id
  // out of range is ignored (false).
  bool Set(int node, std::map<std::string, std::string> labels);
  // The labels of `node` (empty for an id out of range).
  const std::map<std::string, std::string>& Get(int node) const;

  // For a new cluster revision: node `i` of the new cluster takes the
  // labels old node `old_of_new[i]` had, or its declared labels in
  // `cluster` where that is -1 (a new node). `old_of_new` has one entry per
  // node of `cluster`. Interned selectors keep their ids; their masks are
  // recomputed for the new nodes.
  void Remap(const Cluster& cluster, const std::vector<int>& old_of_new);

  // The id of `selector`, adding a reference: 0 for the empty selector
  // (never counted), else >= 1.
  int Intern(const std::map<std::string, std::string>& selector);
  // Drops a reference taken by `Intern`. Ids 0 and unknown ones are ignored.
  void Release(int id);

  // The selector of `id` (empty for 0 or an unknown id).
  const std::map<std::string, std::string>& Selector(int id) const;
  // The nodes whose labels do not match selector `id`: null for id 0 (no
  // selector) or an unknown one. The pointer stays valid while `id` is
  // interned; what it points to follows changes of labels.
  const NodeMask* Excluded(int id) const;
  // How many nodes match selector `id` (all of them for 0).
  int Matching(int id) const;

 private:
  struct Entry {
    std::map<std::string, std::string> selector;
    int refs = 0;
    // Nodes that do not match, as of `version`: a cache of `labels_`.
    mutable NodeMask excluded;
    mutable int matching = 0;
    mutable uint64_t version = 0;
  };
  const Entry* Find(int id) const;
  void Refresh(const Entry& e) const;

  std::vector<std::map<std::string, std::string>> labels_;  // by node id
  // By id - 1; null: a free id. unique_ptr: `Excluded`'s pointers stay
  // valid while other selectors are interned.
  std::vector<std::unique_ptr<Entry>> entries_;
  std::map<std::map<std::string, std::string>, int> ids_;
  std::vector<int> free_ids_;
  // Bumped by every change of labels; an entry older than it is stale.
  uint64_t version_ = 1;
};

}  // namespace loom
