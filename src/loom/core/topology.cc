#include "loom/core/topology.h"

#include <algorithm>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"

namespace loom {

absl::StatusOr<Topology> Topology::Uniform(int num_nodes, int nodes_per_leaf,
                                           int leaves_per_spine) {
  if (num_nodes <= 0) {
    return absl::InvalidArgumentError("a cluster needs at least one node");
  }
  if (nodes_per_leaf <= 0) {
    return absl::InvalidArgumentError("nodes_per_leaf must be positive");
  }
  if (leaves_per_spine <= 0) {
    return absl::InvalidArgumentError("leaves_per_spine must be positive");
  }
  Topology t;
  t.leaf_of_node_.assign(num_nodes, -1);
  const int num_leaves = (num_nodes + nodes_per_leaf - 1) / nodes_per_leaf;
  for (int l = 0; l < num_leaves; ++l) {
    Switch s;
    s.name = absl::StrCat("leaf", l);
    s.level = 1;
    for (int n = l * nodes_per_leaf;
         n < std::min(num_nodes, (l + 1) * nodes_per_leaf); ++n) {
      s.nodes.push_back(n);
      t.leaf_of_node_[n] = static_cast<int>(t.switches_.size());
    }
    t.switches_.push_back(std::move(s));
  }
  if (num_leaves == 1) {
    absl::Status st = t.Finish();
    if (!st.ok()) return st;
    return t;
  }
  const int num_spines = (num_leaves + leaves_per_spine - 1) / leaves_per_spine;
  const int first_spine = static_cast<int>(t.switches_.size());
  for (int s = 0; s < num_spines; ++s) {
    Switch sp;
    sp.name = absl::StrCat("spine", s);
    sp.level = 2;
    for (int l = s * leaves_per_spine;
         l < std::min(num_leaves, (s + 1) * leaves_per_spine); ++l) {
      sp.children.push_back(l);
      t.switches_[l].parent = static_cast<int>(t.switches_.size());
    }
    t.switches_.push_back(std::move(sp));
  }
  if (num_spines > 1) {
    Switch core;
    core.name = "core";
    core.level = 3;
    const int core_index = static_cast<int>(t.switches_.size());
    for (int s = 0; s < num_spines; ++s) {
      core.children.push_back(first_spine + s);
      t.switches_[first_spine + s].parent = core_index;
    }
    t.switches_.push_back(std::move(core));
  }
  absl::Status st = t.Finish();
  if (!st.ok()) return st;
  return t;
}

absl::StatusOr<Topology> Topology::Explicit(
    int num_nodes, const std::vector<TreeSpec>& roots) {
  if (num_nodes <= 0) {
    return absl::InvalidArgumentError("a cluster needs at least one node");
  }
  if (roots.empty()) {
    return absl::InvalidArgumentError("the network tree is empty");
  }
  // Depth of every leaf must agree; compute heights first.
  std::function<absl::StatusOr<int>(const TreeSpec&)> height =
      [&](const TreeSpec& spec) -> absl::StatusOr<int> {
    if (!spec.nodes.empty() && !spec.children.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "switch '", spec.name, "' has both nodes and child switches"));
    }
    if (spec.children.empty()) return 1;
    int h = -1;
    for (const TreeSpec& c : spec.children) {
      absl::StatusOr<int> ch = height(c);
      if (!ch.ok()) return ch.status();
      if (h != -1 && *ch != h) {
        return absl::InvalidArgumentError(absl::StrCat(
            "switch '", spec.name,
            "' has children at different depths; every leaf switch must be "
            "at the same depth"));
      }
      h = *ch;
    }
    return h + 1;
  };
  std::vector<TreeSpec> top = roots;
  int h = -1;
  for (const TreeSpec& r : top) {
    absl::StatusOr<int> rh = height(r);
    if (!rh.ok()) return rh.status();
    if (h != -1 && *rh != h) {
      return absl::InvalidArgumentError(
          "top-level switches of the network tree are at different depths");
    }
    h = *rh;
  }
  TreeSpec root;
  if (top.size() == 1) {
    root = top[0];
  } else {
    root.name = "core";
    root.children = top;
  }

  Topology t;
  t.leaf_of_node_.assign(num_nodes, -1);
  // Lay out switches level by level, lowest level first, so that switches of
  // one level are contiguous.
  std::vector<std::vector<const TreeSpec*>> levels;
  std::function<int(const TreeSpec&)> collect = [&](const TreeSpec& s) -> int {
    int lvl = 1;
    if (!s.children.empty()) {
      for (const TreeSpec& c : s.children) lvl = collect(c) + 1;
    }
    if (static_cast<int>(levels.size()) < lvl) levels.resize(lvl);
    levels[lvl - 1].push_back(&s);
    return lvl;
  };
  collect(root);
  std::map<const TreeSpec*, int> index;
  for (const auto& lvl : levels) {
    for (const TreeSpec* s : lvl) {
      index[s] = static_cast<int>(t.switches_.size());
      Switch sw;
      sw.name = s->name;
      t.switches_.push_back(std::move(sw));
    }
  }
  for (size_t l = 0; l < levels.size(); ++l) {
    for (const TreeSpec* s : levels[l]) {
      Switch& sw = t.switches_[index[s]];
      sw.level = static_cast<int>(l) + 1;
      for (const TreeSpec& c : s->children) {
        sw.children.push_back(index[&c]);
        t.switches_[index[&c]].parent = index[s];
      }
      for (int n : s->nodes) {
        if (n < 0 || n >= num_nodes) {
          return absl::InvalidArgumentError(absl::StrCat(
              "switch '", s->name, "' names node ", n, " outside the cluster"));
        }
        if (t.leaf_of_node_[n] != -1) {
          return absl::InvalidArgumentError(absl::StrCat(
              "node ", n, " appears under two leaf switches ('",
              t.switches_[t.leaf_of_node_[n]].name, "' and '", s->name, "')"));
        }
        t.leaf_of_node_[n] = index[s];
        sw.nodes.push_back(n);
      }
    }
  }
  for (int n = 0; n < num_nodes; ++n) {
    if (t.leaf_of_node_[n] == -1) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", n, " is not under any leaf switch"));
    }
  }
  absl::Status st = t.Finish();
  if (!st.ok()) return st;
  return t;
}

absl::Status Topology::Finish() {
  num_levels_ = 0;
  root_ = -1;
  for (size_t i = 0; i < switches_.size(); ++i) {
    const Switch& s = switches_[i];
    num_levels_ = std::max(num_levels_, s.level);
    if (s.parent == -1) {
      if (root_ != -1) {
        return absl::InternalError("network tree has more than one root");
      }
      root_ = static_cast<int>(i);
    }
  }
  by_level_.assign(num_levels_ + 1, {});
  for (size_t i = 0; i < switches_.size(); ++i) {
    by_level_[switches_[i].level].push_back(static_cast<int>(i));
  }
  // Node counts bottom-up (levels are increasing along the vector).
  for (int lvl = 1; lvl <= num_levels_; ++lvl) {
    for (int i : by_level_[lvl]) {
      Switch& s = switches_[i];
      s.node_count = static_cast<int>(s.nodes.size());
      for (int c : s.children) s.node_count += switches_[c].node_count;
    }
  }
  ancestors_.assign(leaf_of_node_.size(), std::vector<int>(num_levels_ + 1));
  for (size_t n = 0; n < leaf_of_node_.size(); ++n) {
    int s = leaf_of_node_[n];
    for (int lvl = 1; lvl <= num_levels_; ++lvl) {
      ancestors_[n][lvl] = s;
      if (s != -1) s = switches_[s].parent;
    }
  }
  return absl::OkStatus();
}

int Topology::AncestorAt(int node, int level) const {
  return ancestors_[node][level];
}

std::vector<int> Topology::LeavesUnder(int index) const {
  std::vector<int> out;
  std::vector<int> stack = {index};
  while (!stack.empty()) {
    int s = stack.back();
    stack.pop_back();
    if (switches_[s].level == 1) {
      out.push_back(s);
    } else {
      for (auto it = switches_[s].children.rbegin();
           it != switches_[s].children.rend(); ++it) {
        stack.push_back(*it);
      }
    }
  }
  return out;
}

int Topology::LowestCommonLevel(const std::vector<int>& nodes) const {
  if (nodes.empty()) return 0;
  bool same = std::all_of(nodes.begin(), nodes.end(),
                          [&](int n) { return n == nodes[0]; });
  if (same) return 0;
  for (int lvl = 1; lvl <= num_levels_; ++lvl) {
    int a = ancestors_[nodes[0]][lvl];
    bool all = std::all_of(nodes.begin(), nodes.end(),
                           [&](int n) { return ancestors_[n][lvl] == a; });
    if (all) return lvl;
  }
  return num_levels_;
}

TreeSpec Topology::ToSpec() const {
  std::function<TreeSpec(int)> build = [&](int index) {
    const Switch& sw = switches_[index];
    TreeSpec spec;
    spec.name = sw.name;
    spec.nodes = sw.nodes;
    for (int child : sw.children) spec.children.push_back(build(child));
    return spec;
  };
  return root_ < 0 ? TreeSpec{} : build(root_);
}

}  // namespace loom
