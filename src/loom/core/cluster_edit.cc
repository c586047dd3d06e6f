#include "loom/core/cluster_edit.h"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

// A chain of `levels` switches above a leaf holding `nodes`.
TreeSpec RetiringBranch(int levels, const std::vector<int>& nodes) {
  TreeSpec spec;
  spec.name = "retiring";
  spec.nodes = nodes;
  for (int level = 2; level <= levels; ++level) {
    TreeSpec up;
    up.name = absl::StrCat("retiring-", level);
    up.children.push_back(std::move(spec));
    spec = std::move(up);
  }
  return spec;
}

}  // namespace

absl::StatusOr<Cluster> KeepNodes(const Cluster& next, const Cluster& live,
                                  const std::vector<std::string>& keep) {
  std::unordered_map<std::string, int> in_next;
  for (size_t i = 0; i < next.nodes.size(); ++i) {
    in_next.emplace(next.nodes[i].name, static_cast<int>(i));
  }
  const std::unordered_set<std::string> wanted(keep.begin(), keep.end());
  Cluster out = next;
  auto model_of = [&](GpuModelId live_model) {
    const GpuModel& m = live.gpu_models[live_model];
    GpuModelId id = out.FindGpuModel(m.name);
    if (id < 0) {
      out.gpu_models.push_back(m);
      id = static_cast<GpuModelId>(out.gpu_models.size()) - 1;
    }
    return id;
  };
  std::vector<int> appended;
  for (const NodeSpec& node : live.nodes) {
    if (!wanted.contains(node.name)) continue;
    NodeSpec kept = node;
    kept.gpu_model = model_of(node.gpu_model);
    if (auto it = in_next.find(node.name); it != in_next.end()) {
      kept.pool = out.nodes[it->second].pool;
      out.nodes[it->second] = std::move(kept);
      continue;
    }
    const PoolSpec& live_pool = live.pools[node.pool];
    auto pool = std::find_if(
        out.pools.begin(), out.pools.end(),
        [&](const PoolSpec& p) { return p.name == live_pool.name; });
    if (pool == out.pools.end()) {
      PoolSpec copy = live_pool;
      copy.node_count = 0;
      copy.gpu_model = model_of(live_pool.gpu_model);
      out.pools.push_back(std::move(copy));
      pool = out.pools.end() - 1;
    }
    if (pool - out.pools.begin() >= static_cast<int>(next.pools.size())) {
      pool->node_count += 1;  // a pool only the kept nodes have
    }
    kept.pool = static_cast<int>(pool - out.pools.begin());
    appended.push_back(static_cast<int>(out.nodes.size()));
    out.nodes.push_back(std::move(kept));
  }
  if (appended.empty()) return out;

  // The appended nodes hang under a branch of their own, as deep as the
  // tree, beside the rest.
  const int levels = next.topology.num_levels();
  TreeSpec root = next.topology.ToSpec();
  std::vector<TreeSpec> roots;
  if (root.name == "core" && levels > 1) {
    roots = std::move(root.children);
    roots.push_back(RetiringBranch(levels - 1, appended));
  } else {
    if (root.name == "core") root.name = "core-0";
    roots.push_back(std::move(root));
    roots.push_back(RetiringBranch(levels, appended));
  }
  absl::StatusOr<Topology> tree =
      Topology::Explicit(static_cast<int>(out.nodes.size()), roots);
  if (!tree.ok()) return tree.status();
  out.topology = *std::move(tree);
  return out;
}

}  // namespace loom
