#include "loom/core/cluster_diff.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_edit.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

Cluster Parse(const std::string& yaml) {
  absl::StatusOr<Cluster> c = ParseClusterSpec(yaml, "test.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : Cluster{};
}

std::vector<std::string> Lines(const Cluster& a, const Cluster& b) {
  std::vector<std::string> out;
  for (const ClusterDiffLine& l : DiffClusters(a, b)) {
    out.push_back(FormatDiffLine(l));
  }
  return out;
}

constexpr const char* kBase = R"(
name: lab
pools:
  - {name: h200, nodes: 3, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 2, leaves_per_spine: 8}
projects:
  - {name: search, quota_gpus: 96, weight: 2}
  - {name: research, quota_gpus: 64}
)";

TEST(ClusterDiff, SameClusterNoLines) {
  EXPECT_TRUE(DiffClusters(Parse(kBase), Parse(kBase)).empty());
}

TEST(ClusterDiff, ObjectByObject) {
  const Cluster next = Parse(R"(
name: lab
pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti,
     labels: {rack: a}}
  - {name: a100-legacy, nodes: 10, gpu: {model: a100, count: 8}, cpus: 96, memory: 1Ti}
network: {nodes_per_leaf: 2, leaves_per_spine: 8}
projects:
  - {name: search, quota_gpus: 128, weight: 2}
  - {name: vision, quota_gpus: 8}
priority_classes: [{name: low, value: 0}, {name: normal, value: 100}]
)");
  EXPECT_EQ(Lines(Parse(kBase), next),
            (std::vector<std::string>{
                "~ pool h200: nodes 3 -> 2, labels.rack (none) -> \"a\"",
                "+ pool a100-legacy (10 nodes of 8x a100)",
                "- node h200-2",
                "~ project search: quota_gpus 96 -> 128",
                "- project research (quota_gpus 64, weight 1)",
                "+ project vision (quota_gpus 8, weight 1)",
                "- priority_class high (value 1000)",
            }));
}

TEST(ClusterDiff, ContainerPolicy) {
  const Cluster next = Parse(
      absl::StrCat(kBase,
                   "containers: {allowed_mounts: [/data], allowed_registries: "
                   "[\"reg.example.com:5000\"]}\n"));
  EXPECT_EQ(Lines(Parse(kBase), next),
            (std::vector<std::string>{
                "~ containers allowed_mounts: [] -> [/data]",
                "~ containers allowed_registries: [] -> [reg.example.com:5000]",
            }));
}

TEST(ClusterDiff, ANodesOwnLabelsAreItsLinePoolLabelsThePools) {
  const Cluster next = Parse(R"(
name: lab
pools:
  - name: h200
    nodes: 3
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    labels: {rack: a}
    node_labels: {h200-1: {rack: b}}
network: {nodes_per_leaf: 2, leaves_per_spine: 8}
projects:
  - {name: search, quota_gpus: 96, weight: 2}
  - {name: research, quota_gpus: 64}
)");
  EXPECT_EQ(Lines(Parse(kBase), next),
            (std::vector<std::string>{
                "~ pool h200: labels.rack (none) -> \"a\"",
                "~ node h200-1: labels.rack (none) -> \"b\"",
            }));
}

TEST(ClusterDiff, NetworkMoves) {
  const Cluster next = Parse(R"(
name: lab
pools:
  - {name: h200, nodes: 3, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 1, leaves_per_spine: 8}
projects:
  - {name: search, quota_gpus: 96, weight: 2}
  - {name: research, quota_gpus: 64}
)");
  const std::vector<std::string> lines = Lines(Parse(kBase), next);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0],
            "~ network tree: 2 node(s) move: h200-1 leaf0/spine0 -> "
            "leaf1/spine0; h200-2 leaf1/spine0 -> leaf2/spine0");
}

TEST(ClusterDiff, PrivateData) {
  const Cluster next =
      Parse(absl::StrCat(kBase, "private_data: [usage, jobs]\n"));
  EXPECT_EQ(Lines(Parse(kBase), next),
            (std::vector<std::string>{
                "~ cluster private_data: [] -> [jobs, usage]"}));
  EXPECT_EQ(Lines(next, Parse(kBase)),
            (std::vector<std::string>{
                "~ cluster private_data: [jobs, usage] -> []"}));
}

TEST(KeepNodes, RemovedBusyNodeStaysUnderItsOwnLeaf) {
  const Cluster live = Parse(kBase);
  const Cluster next = Parse(R"(
name: lab
pools:
  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 2, leaves_per_spine: 8}
)");
  absl::StatusOr<Cluster> kept = KeepNodes(next, live, {"h200-2", "nope"});
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->nodes.size(), 2u);
  EXPECT_EQ(kept->nodes[1].name, "h200-2");
  EXPECT_EQ(kept->nodes[1].pool, 0);
  const Topology& t = kept->topology;
  EXPECT_EQ(t.num_nodes(), 2);
  EXPECT_EQ(t.sw(t.leaf_of(1)).name, "retiring");
  EXPECT_NE(t.leaf_of(0), t.leaf_of(1));
  EXPECT_EQ(t.num_levels(), next.topology.num_levels() + 1);

  // Nothing to keep: `next` itself.
  absl::StatusOr<Cluster> same = KeepNodes(next, live, {});
  ASSERT_TRUE(same.ok());
  EXPECT_TRUE(DiffClusters(next, *same).empty());
}

TEST(KeepNodes, RemovedPoolAndModelComeAlong) {
  const Cluster live = Parse(R"(
name: lab
gpu_models: [{name: l40s, memory: 48Gi}]
pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
  - {name: l, nodes: 2, gpu: {model: l40s, count: 4}, cpus: 64, memory: 1Ti}
network: {nodes_per_leaf: 1, leaves_per_spine: 2}
)");
  const Cluster next = Parse(R"(
name: lab
pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 4}, cpus: 192, memory: 2Ti}
network: {nodes_per_leaf: 1, leaves_per_spine: 2}
)");
  absl::StatusOr<Cluster> kept = KeepNodes(next, live, {"l-1", "h200-0"});
  ASSERT_TRUE(kept.ok()) << kept.status();
  ASSERT_EQ(kept->nodes.size(), 3u);
  // h200-0 keeps its 8 GPUs in place until drained.
  EXPECT_EQ(kept->nodes[0].gpus, 8);
  EXPECT_EQ(kept->nodes[1].gpus, 4);
  EXPECT_EQ(kept->nodes[2].name, "l-1");
  EXPECT_EQ(kept->pools[kept->nodes[2].pool].name, "l");
  EXPECT_EQ(kept->pools[kept->nodes[2].pool].node_count, 1);
  EXPECT_EQ(kept->gpu_models[kept->nodes[2].gpu_model].name, "l40s");
  // One spine: a core comes above it and the retiring branch.
  EXPECT_EQ(kept->topology.num_levels(), next.topology.num_levels() + 1);
  EXPECT_EQ(kept->topology.sw(kept->topology.root()).name, "core");
  EXPECT_EQ(kept->topology.sw(kept->topology.leaf_of(2)).name, "retiring");
  EXPECT_EQ(kept->topology.leaf_of(0),
            kept->topology.LeavesUnder(kept->topology.root())[0]);
}

}  // namespace
}  // namespace loom
