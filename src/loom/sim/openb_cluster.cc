#include "loom/sim/openb_cluster.h"

#include <fstream>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "loom/core/cluster_spec.h"

namespace loom {

absl::StatusOr<Cluster> ClusterFromNodeList(
    const std::vector<NodeListEntry>& nodes, std::string name) {
  Cluster c;
  c.name = std::move(name);
  c.priority_classes = DefaultPriorityClasses();
  using Key = std::tuple<std::string, int, int64_t, int64_t>;
  std::map<Key, int> pool_of;
  std::vector<std::vector<const NodeListEntry*>> members;
  for (const NodeListEntry& n : nodes) {
    if (n.gpus < 1 || n.gpus > kMaxGpusPerNode) {
      return absl::InvalidArgumentError(
          absl::StrCat("node ", n.name, " (line ", n.line, "): ", n.gpus,
                       " GPUs; a node has 1 to ", kMaxGpusPerNode));
    }
    GpuModelId model = c.FindGpuModel(n.model);
    if (model < 0) {
      model = static_cast<GpuModelId>(c.gpu_models.size());
      c.gpu_models.push_back({n.model, 1.0, kNodeListGpuMemoryBytes});
    }
    const Key key{n.model, n.gpus, n.cpu_milli, n.memory_mib};
    auto [it, fresh] = pool_of.emplace(key, static_cast<int>(c.pools.size()));
    if (fresh) {
      PoolSpec p;
      p.name = absl::StrCat(n.model, "-", n.gpus, "g-", c.pools.size());
      p.gpu_model = model;
      p.gpus_per_node = n.gpus;
      p.gpu_memory_bytes = kNodeListGpuMemoryBytes;
      p.cpus_milli = n.cpu_milli;
      p.memory_bytes = n.memory_mib << 20;
      p.sharing = true;
      c.pools.push_back(std::move(p));
      members.emplace_back();
    }
    members[it->second].push_back(&n);
  }
  for (size_t p = 0; p < c.pools.size(); ++p) {
    c.pools[p].node_count = static_cast<int>(members[p].size());
    for (const NodeListEntry* n : members[p]) {
      NodeSpec spec;
      spec.name = n->name;
      spec.pool = static_cast<int>(p);
      spec.gpu_model = c.pools[p].gpu_model;
      spec.gpus = n->gpus;
      spec.cpus_milli = n->cpu_milli;
      spec.memory_bytes = n->memory_mib << 20;
      c.nodes.push_back(std::move(spec));
    }
  }
  absl::StatusOr<Topology> topo =
      Topology::Uniform(static_cast<int>(c.nodes.size()), 32, 16);
  if (!topo.ok()) return topo.status();
  c.topology = *std::move(topo);
  return c;
}

absl::StatusOr<Cluster> LoadSimCluster(const std::string& name_or_path) {
  std::ifstream in(name_or_path, std::ios::binary);
  std::string first;
  if (in && std::getline(in, first)) {
    if (!first.empty() && first.back() == '\r') first.pop_back();
    if (IsNodeListHeader(first)) {
      absl::StatusOr<std::vector<NodeListEntry>> nodes =
          ReadNodeListFile(name_or_path);
      if (!nodes.ok()) return nodes.status();
      std::string name = name_or_path;
      if (const size_t slash = name.rfind('/'); slash != std::string::npos) {
        name = name.substr(slash + 1);
      }
      return ClusterFromNodeList(*nodes, name);
    }
  }
  return LoadCluster(name_or_path);
}

}  // namespace loom
