#include "loom/core/cluster_spec.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/common/units.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kTiB = 1024 * kGiB;

// Returns "<source>:<line>:<column>: " for the first character of `needle`
// (plus `skip` characters) in `yaml`, 1-based, as parse errors print it.
std::string At(std::string_view yaml, std::string_view needle,
               size_t skip = 0) {
  const size_t pos = yaml.find(needle);
  EXPECT_NE(pos, std::string_view::npos) << needle;
  const size_t target = pos + skip;
  int line = 1;
  int column = 1;
  for (size_t i = 0; i < target; ++i) {
    if (yaml[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::StrCat("spec.yaml:", line, ":", column, ": ");
}

// Parses `yaml` expecting an InvalidArgument error and returns its message.
std::string ParseError(std::string_view yaml) {
  absl::StatusOr<Cluster> cluster = ParseClusterSpec(yaml, "spec.yaml");
  EXPECT_FALSE(cluster.ok()) << "parsed unexpectedly:\n" << yaml;
  if (cluster.ok()) return "";
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kInvalidArgument)
      << cluster.status();
  return std::string(cluster.status().message());
}

// A valid pools section used by tests that are about other sections.
constexpr char kTwoPools[] =
    "pools:\n"
    "  - {name: h200, nodes: 18, gpu: {model: h200, count: 8}, cpus: 192, "
    "memory: 2Ti}\n"
    "  - {name: a100-legacy, nodes: 10, gpu: {model: a100, count: 8}, cpus: "
    "96, memory: 1Ti}\n";

TEST(ClusterPreset, Names) {
  EXPECT_THAT(ClusterPresetNames(), ElementsAre("small", "large"));
  for (const std::string& name : ClusterPresetNames()) {
    EXPECT_FALSE(ClusterPresetSummary(name).empty()) << name;
  }
  EXPECT_EQ(ClusterPresetSummary("nope"), "");
  EXPECT_EQ(ClusterPreset("nope").status().code(), absl::StatusCode::kNotFound);
}

TEST(ClusterPreset, Small) {
  absl::StatusOr<Cluster> c = ClusterPreset("small");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "small");
  ASSERT_EQ(c->nodes.size(), 28u);
  EXPECT_EQ(c->TotalGpus(), 224);
  EXPECT_EQ(c->TotalGpus(c->FindGpuModel("h200")), 144);
  EXPECT_EQ(c->TotalGpus(c->FindGpuModel("a100")), 80);
  ASSERT_EQ(c->pools.size(), 2u);
  EXPECT_EQ(c->pools[0].name, "h200");
  EXPECT_EQ(c->pools[1].name, "a100");

  const NodeSpec& first = c->nodes[0];
  EXPECT_EQ(first.name, "h200-0");
  EXPECT_EQ(first.pool, 0);
  EXPECT_EQ(first.gpus, 8);
  EXPECT_EQ(first.cpus_milli, 192000);
  EXPECT_EQ(first.memory_bytes, 2 * kTiB);
  EXPECT_EQ(first.nvme_bytes, 15 * kTiB);
  EXPECT_EQ(first.nics, 8);
  const NodeSpec& last = c->nodes[27];
  EXPECT_EQ(last.name, "a100-9");
  EXPECT_EQ(last.pool, 1);
  EXPECT_EQ(last.gpu_model, c->FindGpuModel("a100"));
  EXPECT_EQ(last.cpus_milli, 96000);
  EXPECT_EQ(last.memory_bytes, 1 * kTiB);
  EXPECT_EQ(last.nvme_bytes, 8 * kTiB);
  EXPECT_EQ(c->pools[1].gpu_memory_bytes, 80 * kGiB);

  // 28 nodes at 16 per leaf: two leaves under one spine, which is the root.
  EXPECT_EQ(c->topology.num_nodes(), 28);
  EXPECT_EQ(c->topology.num_levels(), 2);
  EXPECT_EQ(c->topology.SwitchesAtLevel(1).size(), 2u);
  EXPECT_EQ(c->topology.sw(c->topology.root()).node_count, 28);

  EXPECT_TRUE(c->projects.empty());
  ASSERT_EQ(c->priority_classes.size(), 3u);
  EXPECT_EQ(c->FindPriorityClass("normal")->value, 100);
}

TEST(ClusterPreset, Large) {
  absl::StatusOr<Cluster> c = ClusterPreset("large");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nodes.size(), 2000u);
  EXPECT_EQ(c->TotalGpus(), 16000);
  EXPECT_EQ(c->TotalGpus(c->FindGpuModel("h200")), 16000);
  EXPECT_EQ(c->nodes[1999].name, "h200-1999");
  EXPECT_EQ(c->topology.num_levels(), 3);
  EXPECT_EQ(c->topology.SwitchesAtLevel(1).size(), 125u);
  EXPECT_EQ(c->topology.SwitchesAtLevel(2).size(), 16u);
  EXPECT_EQ(c->topology.SwitchesAtLevel(3).size(), 1u);
  EXPECT_EQ(c->topology.sw(c->topology.root()).name, "core");
}

TEST(ParseClusterSpec, DesignExampleWithLabelsAndProjects) {
  constexpr std::string_view kYaml = R"(name: demo
gpu_models:
  - {name: h200, speed: 1.25}
  - {name: l40s, speed: 0.5, memory: 48Gi}
pools:
  - {name: h200, nodes: 18, gpu: {model: h200, count: 8, memory: 141Gi}, cpus: 192, memory: 2Ti, nvme: 15Ti, nics: 8, labels: {rack: a, ib: "true"}}
  - {name: a100-legacy, nodes: 10, gpu: {model: a100, count: 8, memory: 80Gi}, cpus: 96, memory: 1Ti, nvme: 8Ti, nics: 8}
  - name: inf
    nodes: 3
    gpu: {model: l40s, count: 4}
    cpus: 31.5
    memory: 256Gi
network: {nodes_per_leaf: 16, leaves_per_spine: 8}
projects:
  - {name: search, quota_gpus: 96, weight: 2}
  - {name: research, quota_gpus: 64, weight: 1}
  - {name: adhoc}
priority_classes: [{name: low, value: 0}, {name: normal, value: 100}, {name: urgent, value: 5000}]
)";
  absl::StatusOr<Cluster> c = ParseClusterSpec(kYaml, "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "demo");
  ASSERT_EQ(c->nodes.size(), 31u);
  EXPECT_EQ(c->TotalGpus(), 18 * 8 + 10 * 8 + 3 * 4);

  // Built-ins stay, h200 is overridden in place, l40s is added.
  ASSERT_EQ(c->gpu_models.size(), 3u);
  const GpuModelId h200 = c->FindGpuModel("h200");
  EXPECT_EQ(h200, 0);
  EXPECT_DOUBLE_EQ(c->gpu_models[h200].speed, 1.25);
  EXPECT_EQ(c->gpu_models[h200].memory_bytes, 141 * kGiB);
  const GpuModelId l40s = c->FindGpuModel("l40s");
  ASSERT_GE(l40s, 0);
  EXPECT_EQ(c->gpu_models[l40s].memory_bytes, 48 * kGiB);

  EXPECT_EQ(c->nodes[0].labels.at("rack"), "a");
  EXPECT_EQ(c->nodes[17].labels.at("ib"), "true");
  EXPECT_TRUE(c->nodes[18].labels.empty());
  EXPECT_EQ(c->nodes[18].name, "a100-legacy-0");
  EXPECT_EQ(c->nodes[30].name, "inf-2");
  EXPECT_EQ(c->nodes[30].gpu_model, l40s);
  EXPECT_EQ(c->nodes[30].gpus, 4);
  EXPECT_EQ(c->nodes[30].cpus_milli, 31500);
  EXPECT_EQ(c->nodes[30].nvme_bytes, 0);
  EXPECT_EQ(c->nodes[30].nics, 0);
  // An omitted gpu.memory is the model's.
  EXPECT_EQ(c->pools[2].gpu_memory_bytes, 48 * kGiB);

  ASSERT_EQ(c->projects.size(), 3u);
  EXPECT_EQ(c->FindProject("search")->quota_gpus, 96);
  EXPECT_DOUBLE_EQ(c->FindProject("search")->weight, 2.0);
  EXPECT_EQ(c->FindProject("adhoc")->quota_gpus, 0);
  EXPECT_DOUBLE_EQ(c->FindProject("adhoc")->weight, 1.0);

  ASSERT_EQ(c->priority_classes.size(), 3u);
  EXPECT_EQ(c->FindPriorityClass("urgent")->value, 5000);
  EXPECT_EQ(c->FindPriorityClass("high"), nullptr);
}

TEST(ParseClusterSpec, NodeLabelsWinOverThePoolsAndNameRealNodes) {
  absl::StatusOr<Cluster> c = ParseClusterSpec(R"(
pools:
  - name: h200
    nodes: 3
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    labels: {rack: a, ib: "true"}
    node_labels:
      h200-2: {rack: b, nvme: fast}
)",
                                               "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->nodes[0].labels.at("rack"), "a");
  EXPECT_EQ(c->nodes[2].labels.at("rack"), "b");
  EXPECT_EQ(c->nodes[2].labels.at("nvme"), "fast");
  EXPECT_EQ(c->nodes[2].labels.at("ib"), "true");
  EXPECT_FALSE(c->nodes[1].labels.contains("nvme"));
  for (const auto& [node_labels, want] :
       std::vector<std::pair<std::string, std::string>>{
           {"{h200-3: {rack: b}}",
            "c.yaml:7:19: pools[0].node_labels.h200-3: no node 'h200-3' in "
            "pool h200 (its nodes are h200-0 to h200-2)"},
           {"{a100-0: {rack: b}}", "no node 'a100-0' in pool h200"},
           {"{h200-01: {rack: b}}", "no node 'h200-01'"},
           {"{h200-1: [b]}", "pools[0].node_labels.h200-1: must be a map"},
           {"[h200-1]", "pools[0].node_labels: must be a map of node names"},
       }) {
    absl::StatusOr<Cluster> bad = ParseClusterSpec(
        absl::StrCat("pools:\n  - name: h200\n    nodes: 3\n    gpu: {model: "
                     "h200, count: 8}\n    cpus: 192\n    memory: 2Ti\n    "
                     "node_labels: ",
                     node_labels, "\n"),
        "c.yaml");
    ASSERT_FALSE(bad.ok()) << node_labels;
    EXPECT_NE(bad.status().message().find(want), std::string::npos)
        << bad.status().message();
  }
}

TEST(ParseClusterSpec, DefaultsWithoutNetworkOrName) {
  absl::StatusOr<Cluster> c =
      ParseClusterSpec(kTwoPools, "conf/lab.cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->name, "lab.cluster");
  // Without `network`: 16 nodes per leaf, 8 leaves per spine.
  EXPECT_EQ(c->topology.num_levels(), 2);
  EXPECT_EQ(c->topology.SwitchesAtLevel(1).size(), 2u);
  EXPECT_EQ(c->topology.sw(c->topology.SwitchesAtLevel(1)[0]).nodes.size(),
            16u);
  EXPECT_EQ(c->priority_classes.size(), DefaultPriorityClasses().size());
  EXPECT_TRUE(c->projects.empty());
  EXPECT_EQ(c->pools[0].gpu_memory_bytes, 141 * kGiB);
  EXPECT_EQ(c->pools[1].gpu_memory_bytes, 80 * kGiB);
}

TEST(ParseClusterSpec, ExplicitTree) {
  const std::string yaml = absl::StrCat(kTwoPools, R"(network:
  tree:
    - name: spine0
      children:
        - {name: leaf0, nodes: ["h200-[0-15]"]}
        - {name: leaf1, nodes: ["h200-[16-17]", "a100-legacy-[0-3,4-8]", a100-legacy-9]}
)");
  absl::StatusOr<Cluster> c = ParseClusterSpec(yaml, "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const Topology& t = c->topology;
  EXPECT_EQ(t.num_levels(), 2);
  EXPECT_EQ(t.sw(t.root()).name, "spine0");
  ASSERT_EQ(t.SwitchesAtLevel(1).size(), 2u);
  const Switch& leaf1 = t.sw(t.SwitchesAtLevel(1)[1]);
  EXPECT_EQ(leaf1.name, "leaf1");
  EXPECT_EQ(leaf1.nodes.size(), 12u);
  EXPECT_EQ(t.leaf_of(17), t.SwitchesAtLevel(1)[1]);
  EXPECT_EQ(t.leaf_of(15), t.SwitchesAtLevel(1)[0]);
  EXPECT_EQ(t.LowestCommonLevel({0, 15}), 1);
  EXPECT_EQ(t.LowestCommonLevel({0, 27}), 2);
}

TEST(ParseClusterSpec, ExplicitTreeWithSeveralTopSwitchesGetsCore) {
  const std::string yaml = absl::StrCat(kTwoPools, R"(network:
  tree:
    - {name: spine0, children: [{name: leaf0, nodes: ["h200-[0-17]"]}]}
    - {name: spine1, children: [{name: leaf1, nodes: ["a100-legacy-[0-9]"]}]}
)");
  absl::StatusOr<Cluster> c = ParseClusterSpec(yaml, "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topology.num_levels(), 3);
  EXPECT_EQ(c->topology.sw(c->topology.root()).name, "core");
  EXPECT_EQ(c->topology.LowestCommonLevel({0, 20}), 3);
}

TEST(ParseClusterSpec, UnknownKey) {
  constexpr std::string_view kYaml = R"(pools:
  - name: h200
    nodes: 2
    gpus: {model: h200, count: 8}
    cpus: 8
    memory: 64Gi
)";
  const std::string msg = ParseError(kYaml);
  EXPECT_THAT(msg, StartsWith(At(kYaml, "gpus:")));
  EXPECT_THAT(msg, HasSubstr("pools[0].gpus: unknown field 'gpus'"));
  EXPECT_THAT(msg, HasSubstr("did you mean 'gpu'"));

  const std::string top = absl::StrCat(kTwoPools, "network:\n  spines: 2\n");
  EXPECT_THAT(ParseError(top),
              StartsWith(At(top, "spines") + "network.spines: unknown field"));
  const std::string root = absl::StrCat(kTwoPools, "queues: []\n");
  EXPECT_THAT(ParseError(root), StartsWith(At(root, "queues") +
                                           "queues: unknown field 'queues'"));
}

TEST(ParseClusterSpec, BadQuantity) {
  constexpr std::string_view kYaml = R"(pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 8, memory: 2Tb}
)";
  const std::string msg = ParseError(kYaml);
  EXPECT_THAT(msg, StartsWith(At(kYaml, "2Tb") + "pools[0].memory: "));
  EXPECT_THAT(msg, HasSubstr("'2Tb'"));

  constexpr std::string_view kCpus = R"(pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: many, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kCpus), StartsWith(At(kCpus, "many") +
                                            "pools[0].cpus: must be a number"));

  constexpr std::string_view kNodes = R"(pools:
  - {name: h200, nodes: 2.5, gpu: {model: h200, count: 8}, cpus: 8, memory: 2Ti}
)";
  EXPECT_THAT(
      ParseError(kNodes),
      StartsWith(At(kNodes, "2.5") + "pools[0].nodes: must be a whole number"));
}

TEST(ParseClusterSpec, UnknownGpuModel) {
  constexpr std::string_view kYaml = R"(pools:
  - name: h100
    nodes: 2
    gpu:
      model: h100
      count: 8
    cpus: 8
    memory: 2Ti
)";
  const std::string msg = ParseError(kYaml);
  EXPECT_THAT(msg,
              StartsWith(At(kYaml, "model: h100", 7) + "pools[0].gpu.model: "));
  EXPECT_THAT(msg, HasSubstr("unknown GPU model 'h100'"));

  constexpr std::string_view kUpper = R"(pools:
  - {name: h200, nodes: 2, gpu: {model: H200, count: 8}, cpus: 8, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kUpper), HasSubstr("pools[0].gpu.model: GPU model "
                                            "names are lower case; write "
                                            "'h200'"));
}

TEST(ParseClusterSpec, GpuCountOutOfRange) {
  constexpr std::string_view kYaml = R"(pools:
  - {name: h200, nodes: 18, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
  - {name: a100, nodes: 10, gpu: {model: a100, count: 0}, cpus: 96, memory: 1Ti}
)";
  EXPECT_EQ(ParseError(kYaml),
            At(kYaml, "count: 0", 7) +
                "pools[1].gpu.count: must be between 1 and 16, got 0");

  constexpr std::string_view kTooMany = R"(pools:
  - {name: h200, nodes: 1, gpu: {model: h200, count: 17}, cpus: 192, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kTooMany),
              HasSubstr("pools[0].gpu.count: must be between 1 and 16"));
}

TEST(ParseClusterSpec, NodeCountOutOfRange) {
  constexpr std::string_view kZero = R"(pools:
  - {name: h200, nodes: 0, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kZero), StartsWith(At(kZero, "nodes: 0", 7) +
                                            "pools[0].nodes: must be between "
                                            "1 and 100000"));
  constexpr std::string_view kHuge = R"(pools:
  - {name: h200, nodes: 100001, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kHuge), HasSubstr("pools[0].nodes: must be between"));
}

TEST(ParseClusterSpec, DuplicatePool) {
  constexpr std::string_view kYaml = R"(pools:
  - {name: gpu, nodes: 2, gpu: {model: h200, count: 8}, cpus: 8, memory: 1Ti}
  - {name: gpu, nodes: 2, gpu: {model: a100, count: 8}, cpus: 8, memory: 1Ti}
)";
  EXPECT_EQ(ParseError(kYaml),
            At(kYaml, "gpu, nodes: 2, gpu: {model: a100") +
                "pools[1].name: duplicate pool name 'gpu' (first declared on "
                "line 2)");
}

TEST(ParseClusterSpec, MalformedYaml) {
  constexpr std::string_view kYaml = R"(pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}
  - {name: a100
)";
  const std::string msg = ParseError(kYaml);
  EXPECT_THAT(msg, HasSubstr("invalid YAML"));
  EXPECT_THAT(msg, StartsWith("spec.yaml:"));
  // The location is a real line of the document.
  const int line =
      std::atoi(msg.substr(std::string("spec.yaml:").size()).c_str());
  EXPECT_GE(line, 2);
  EXPECT_LE(line, 4);

  constexpr std::string_view kTabs = "pools:\n\t- x\n";
  EXPECT_THAT(ParseError(kTabs), StartsWith("spec.yaml:2:"));
}

TEST(ParseClusterSpec, GarbageNeverThrows) {
  const std::vector<std::string> inputs = {
      "",
      "#only a comment\n",
      "[",
      "{{",
      "]",
      ":",
      "- - -",
      "pools",
      "pools:",
      "pools: 3",
      "pools: [3]",
      "pools: [[]]",
      "pools: [{name: [x]}]",
      "? [a]\n: b\n",
      "&a [*a]",
      "pools: !!binary abc",
      "\"unterminated",
      "\xff\xfe",
      std::string(5000, '['),
  };
  for (const std::string& input : inputs) {
    absl::StatusOr<Cluster> c = ParseClusterSpec(input, "spec.yaml");
    EXPECT_FALSE(c.ok()) << input;
    EXPECT_THAT(std::string(c.status().message()), StartsWith("spec.yaml"))
        << input;
  }
}

TEST(ParseClusterSpec, MissingAndEmptySections) {
  EXPECT_EQ(ParseError("name: x\n"), "spec.yaml:1:1: pools: is required");
  EXPECT_THAT(ParseError(""), HasSubstr("spec.yaml:1:1: the cluster spec is "
                                        "empty"));
  EXPECT_THAT(ParseError("pools: []\n"), HasSubstr("pools: must not be empty"));
  EXPECT_THAT(ParseError("- a\n- b\n"), HasSubstr("must be a map, got a list"));
  constexpr std::string_view kNoCount = R"(pools:
  - {name: h200, nodes: 2, gpu: {model: h200}, cpus: 8, memory: 2Ti}
)";
  EXPECT_THAT(ParseError(kNoCount),
              StartsWith(At(kNoCount, "{model") + "pools[0].gpu.count: is "
                                                  "required"));
}

TEST(ParseClusterSpec, DuplicateKey) {
  constexpr std::string_view kYaml = R"(pools:
  - name: h200
    nodes: 2
    nodes: 3
)";
  EXPECT_EQ(ParseError(kYaml),
            "spec.yaml:4:5: pools[0].nodes: given twice (first on line 3)");
}

TEST(ParseClusterSpec, GpuModelErrors) {
  const std::string zero_speed =
      absl::StrCat("gpu_models:\n  - {name: h200, speed: 0}\n", kTwoPools);
  EXPECT_THAT(ParseError(zero_speed),
              StartsWith("spec.yaml:2:25: gpu_models[0].speed: must be more "
                         "than zero"));
  const std::string no_memory =
      absl::StrCat("gpu_models:\n  - {name: b200, speed: 2}\n", kTwoPools);
  EXPECT_THAT(ParseError(no_memory),
              HasSubstr("gpu_models[0].memory: is required for the new GPU "
                        "model 'b200'"));
  const std::string upper = absl::StrCat(
      "gpu_models:\n  - {name: B200, speed: 2, memory: 180Gi}\n", kTwoPools);
  EXPECT_THAT(ParseError(upper), HasSubstr("gpu_models[0].name: 'B200' is not "
                                           "a valid GPU model name"));
}

TEST(ParseClusterSpec, ProjectAndPriorityErrors) {
  const std::string weight =
      absl::StrCat(kTwoPools, "projects:\n  - {name: search, weight: 0}\n");
  EXPECT_THAT(ParseError(weight),
              StartsWith(At(weight, "0}") + "projects[0].weight: must be "
                                            "more than zero"));
  const std::string quota = absl::StrCat(
      kTwoPools, "projects:\n  - {name: search, quota_gpus: -8}\n");
  EXPECT_THAT(ParseError(quota), HasSubstr("projects[0].quota_gpus: must be "
                                           "between 0 and"));
  const std::string dup = absl::StrCat(
      kTwoPools, "projects:\n  - {name: a}\n  - {name: b}\n  - {name: a}\n");
  EXPECT_THAT(ParseError(dup),
              HasSubstr("projects[2].name: duplicate project name 'a'"));
  const std::string pc = absl::StrCat(
      kTwoPools,
      "priority_classes:\n  - {name: low, value: 0}\n  - {name: low, value: "
      "1}\n");
  EXPECT_THAT(ParseError(pc),
              HasSubstr("priority_classes[1].name: duplicate priority class "
                        "name 'low'"));
}

// Issue 15, item 6: which priority classes a project's users may use.
TEST(ParseClusterSpec, ProjectPriorityClasses) {
  const std::string yaml =
      absl::StrCat(kTwoPools,
                   "projects:\n  - {name: search}\n"
                   "  - {name: prod, priority_classes: [low, high, high]}\n");
  absl::StatusOr<Cluster> c = ParseClusterSpec(yaml, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  // Listed: those (in the cluster's order, once each); not listed, or an
  // undeclared project: every class up to `normal`, as Slurm's default QOS.
  EXPECT_THAT(c->AllowedPriorityClasses("prod"),
              ::testing::ElementsAre("low", "high"));
  EXPECT_THAT(c->AllowedPriorityClasses("search"),
              ::testing::ElementsAre("low", "normal"));
  EXPECT_THAT(c->AllowedPriorityClasses("elsewhere"),
              ::testing::ElementsAre("low", "normal"));
  // A cluster without `normal`: its lowest class.
  Cluster other = *c;
  other.priority_classes = {{"batch", 5}, {"interactive", 50}};
  EXPECT_THAT(other.AllowedPriorityClasses("search"),
              ::testing::ElementsAre("batch"));

  const std::string unknown = absl::StrCat(
      kTwoPools, "projects:\n  - {name: a, priority_classes: [urgent]}\n");
  EXPECT_THAT(ParseError(unknown),
              HasSubstr("projects[0].priority_classes[0]: no priority class "
                        "'urgent' (the cluster has low, normal, high)"));
  const std::string empty = absl::StrCat(
      kTwoPools, "projects:\n  - {name: a, priority_classes: []}\n");
  EXPECT_THAT(ParseError(empty), HasSubstr("projects[0].priority_classes"));
  // Custom classes are declared before projects name them, wherever they
  // are in the file.
  const std::string custom =
      absl::StrCat(kTwoPools,
                   "projects:\n  - {name: a, priority_classes: [gold]}\n"
                   "priority_classes:\n  - {name: normal, value: 1}\n"
                   "  - {name: gold, value: 9}\n");
  absl::StatusOr<Cluster> g = ParseClusterSpec(custom, "c.yaml");
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_THAT(g->AllowedPriorityClasses("a"), ::testing::ElementsAre("gold"));
}

TEST(ParseClusterSpec, NodeInTwoLeaves) {
  const std::string yaml = absl::StrCat(kTwoPools, R"(network:
  tree:
    - name: spine0
      children:
        - {name: leaf0, nodes: ["h200-[0-15]"]}
        - {name: leaf1, nodes: ["h200-[15-17]", "a100-legacy-[0-9]"]}
)");
  EXPECT_EQ(ParseError(yaml),
            At(yaml, "\"h200-[15-17]") +
                "network.tree[0].children[1].nodes[0]: node 'h200-15' is "
                "already under leaf switch 'leaf0'; a node hangs off exactly "
                "one leaf");
}

TEST(ParseClusterSpec, NodeInNoLeaf) {
  const std::string yaml = absl::StrCat(kTwoPools, R"(network:
  tree:
    - name: spine0
      children:
        - {name: leaf0, nodes: ["h200-[0-15]"]}
        - {name: leaf1, nodes: ["a100-legacy-[0-9]"]}
)");
  EXPECT_EQ(ParseError(yaml),
            At(yaml, "network") +
                "network.tree: nodes h200-16, h200-17 are not under any leaf "
                "switch");
}

TEST(ParseClusterSpec, TreeErrors) {
  const std::string unknown = absl::StrCat(
      kTwoPools,
      "network:\n  tree:\n    - {name: leaf0, nodes: [\"h200-[0-17]\", "
      "\"a100-[0-9]\"]}\n");
  EXPECT_THAT(ParseError(unknown),
              StartsWith(At(unknown, "\"a100") +
                         "network.tree[0].nodes[1]: unknown node 'a100-0'"));
  const std::string mixed = absl::StrCat(kTwoPools, R"(network:
  tree:
    - {name: leaf0, nodes: ["h200-[0-17]"]}
    - {name: spine1, children: [{name: leaf1, nodes: ["a100-legacy-[0-9]"]}]}
)");
  EXPECT_THAT(ParseError(mixed),
              HasSubstr("network.tree[1]: top-level switch 'spine1' is 2 "
                        "level(s) high"));
  const std::string both =
      absl::StrCat(kTwoPools,
                   "network: {nodes_per_leaf: 4, tree: [{name: a, nodes: "
                   "[\"h200-[0-17]\", \"a100-legacy-[0-9]\"]}]}\n");
  EXPECT_THAT(ParseError(both),
              HasSubstr("network.nodes_per_leaf: cannot be combined with "
                        "`tree`"));
  const std::string range = absl::StrCat(
      kTwoPools, "network: {tree: [{name: a, nodes: [\"h200-[5-2]\"]}]}\n");
  EXPECT_THAT(ParseError(range), HasSubstr("network.tree[0].nodes[0]: "
                                           "'h200-[5-2]' has the empty range"));
  const std::string dup_switch = absl::StrCat(kTwoPools, R"(network:
  tree:
    - {name: s, children: [{name: a, nodes: ["h200-[0-17]"]}, {name: a, nodes: ["a100-legacy-[0-9]"]}]}
)");
  EXPECT_THAT(ParseError(dup_switch),
              HasSubstr("network.tree[0].children[1].name: duplicate switch "
                        "name 'a'"));
}

TEST(ParseClusterSpec, UniformNetworkErrors) {
  const std::string zero =
      absl::StrCat(kTwoPools, "network: {nodes_per_leaf: 0}\n");
  EXPECT_THAT(ParseError(zero),
              StartsWith(At(zero, "0}") + "network.nodes_per_leaf: must be "
                                          "between 1 and"));
  const std::string one_leaf = absl::StrCat(
      kTwoPools, "network: {nodes_per_leaf: 32, leaves_per_spine: 2}\n");
  absl::StatusOr<Cluster> c = ParseClusterSpec(one_leaf, "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->topology.num_levels(), 1);
}

TEST(LoadCluster, PresetFileAndErrors) {
  absl::StatusOr<Cluster> preset = LoadCluster("small");
  ASSERT_TRUE(preset.ok()) << preset.status();
  EXPECT_EQ(preset->TotalGpus(), 224);

  const std::string dir = ::testing::TempDir();
  const std::string path = absl::StrCat(dir, "/loom_cluster_spec_test.yaml");
  {
    std::ofstream out(path);
    out << kTwoPools;
  }
  absl::StatusOr<Cluster> file = LoadCluster(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->nodes.size(), 28u);
  EXPECT_EQ(file->name, "loom_cluster_spec_test");

  {
    std::ofstream out(path);
    out << "pools:\n  - {name: x, nodes: 0}\n";
  }
  absl::StatusOr<Cluster> bad = LoadCluster(path);
  EXPECT_THAT(std::string(bad.status().message()),
              StartsWith(absl::StrCat(path, ":2:")));
  std::remove(path.c_str());

  absl::StatusOr<Cluster> missing = LoadCluster("/nonexistent/cluster.yaml");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(missing.status().message()),
              HasSubstr("/nonexistent/cluster.yaml"));
  EXPECT_FALSE(LoadCluster(dir).ok());
  EXPECT_FALSE(LoadCluster("").ok());
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(ParseClusterSpec, PoolStack) {
  constexpr std::string_view kYaml = R"(pools:
  - name: h200
    nodes: 2
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    stack: {driver: 550.54.15, cuda: 12.4, loom: 0.1.0}
  - {name: a100, nodes: 1, gpu: {model: a100, count: 8}, cpus: 96, memory: 1Ti}
)";
  absl::StatusOr<Cluster> c = ParseClusterSpec(kYaml, "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pools[0].stack.at("driver"), "550.54.15");
  EXPECT_EQ(c->pools[0].stack.at("cuda"), "12.4");
  EXPECT_EQ(c->pools[0].stack.at("loom"), "0.1.0");
  EXPECT_TRUE(c->pools[1].stack.empty());
}

TEST(ParseClusterSpec, PoolStackErrorsNameTheField) {
  constexpr std::string_view kUnknown = R"(pools:
  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 1, memory: 1Gi, stack: {drivers: "1"}}
)";
  absl::StatusOr<Cluster> c = ParseClusterSpec(kUnknown, "spec.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("spec.yaml:2:"), std::string::npos)
      << c.status();
  EXPECT_NE(c.status().message().find("pools[0].stack.drivers: unknown field"),
            std::string::npos)
      << c.status();
  constexpr std::string_view kList = R"(pools:
  - {name: h200, nodes: 1, gpu: {model: h200, count: 8}, cpus: 1, memory: 1Gi, stack: {driver: [1]}}
)";
  c = ParseClusterSpec(kList, "spec.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("pools[0].stack.driver:"),
            std::string::npos)
      << c.status();
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// A pool's MIG partitions (docs/cluster-spec.md "mig"): NVIDIA's profiles of
// the pool's GPU model, placed in order at the lowest start each may take.
TEST(ParseClusterSpec, MigLayoutsAndSharing) {
  constexpr std::string_view kYaml = R"(pools:
  - name: h200
    nodes: 2
    gpu: {model: h200, count: 8, memory: 141G}
    cpus: 192
    memory: 2Ti
    mig: {gpus: 2, layout: [3g.71gb, 2g.35gb, 1g.18gb], dynamic: true}
  - name: a100
    nodes: 1
    gpu: {model: a100, count: 8, memory: 80G}
    cpus: 96
    memory: 1Ti
    sharing: false
    mig: {layout: [1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb, 1g.10gb]}
)";
  absl::StatusOr<Cluster> c = ParseClusterSpec(kYaml, "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  const MigPool& h = c->pools[0].mig;
  EXPECT_EQ(h.gpus, 2);
  EXPECT_TRUE(h.dynamic);
  const std::vector<MigProfile> profiles = MigProfilesFor("h200", 141000000000);
  ASSERT_EQ(h.layout.size(), 3u);
  EXPECT_EQ(profiles[h.layout[0].profile].name, "3g.71gb");
  EXPECT_EQ(h.layout[0].start, 0);
  EXPECT_EQ(h.layout[1].start, 4);
  EXPECT_EQ(h.layout[2].start, 6);
  EXPECT_TRUE(c->pools[0].sharing);
  EXPECT_FALSE(c->pools[1].sharing);
  EXPECT_EQ(c->pools[1].mig.gpus, 8);
  EXPECT_EQ(c->pools[1].mig.layout.size(), 7u);
}

TEST(ParseClusterSpec, BadMigLayoutsNameTheEntry) {
  const std::string base = R"(pools:
  - name: h200
    nodes: 1
    gpu: {model: h200, count: 8}
    cpus: 192
    memory: 2Ti
    mig: )";
  auto error = [&](const std::string& mig) {
    absl::StatusOr<Cluster> c =
        ParseClusterSpec(base + mig + "\n", "cluster.yaml");
    return c.ok() ? std::string("ok") : std::string(c.status().message());
  };
  EXPECT_THAT(error("{layout: [1g.10gb]}"),
              HasSubstr("pools[0].mig.layout[0]: unknown MIG profile "
                        "'1g.10gb' for h200 (known: 1g.18gb"));
  EXPECT_THAT(error("{layout: [4g.71gb, 4g.71gb]}"),
              HasSubstr("pools[0].mig.layout[1]: '4g.71gb' does not fit"));
  // 1g.18gb may not take memory slice 7 (NVIDIA's placements 0 to 6).
  EXPECT_THAT(error("{layout: [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb]}"),
              HasSubstr("pools[0].mig.layout[3]: '1g.18gb' does not fit"));
  EXPECT_THAT(error("{gpus: 9, layout: [7g.141gb]}"),
              HasSubstr("pools[0].mig.gpus"));
  EXPECT_THAT(error("{gpus: 1}"), HasSubstr("needs a layout, or dynamic"));
  EXPECT_THAT(error("{layout: [7g.141gb], spread: 1}"),
              HasSubstr("unknown field 'spread'"));
  EXPECT_EQ(error("{dynamic: true}"), "ok");
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

TEST(ParseClusterSpec, GpuDomains) {
  const std::string base = R"(pools:
  - name: a100
    nodes: 1
    gpu: {model: a100, count: 8, domain: )";
  const std::string rest = "}\n    cpus: 96\n    memory: 1Ti\n";
  absl::StatusOr<Cluster> c = ParseClusterSpec(base + "2" + rest, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pools[0].gpu_domain, 2);
  c = ParseClusterSpec(base + "8" + rest, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->pools[0].gpu_domain, 0) << "one domain of all: all-to-all";
  c = ParseClusterSpec(base + "3" + rest, "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(std::string(c.status().message()),
              HasSubstr("pools[0].gpu.domain: must divide the node's 8 GPUs"));
}

}  // namespace
}  // namespace loom
