#include "loom/core/cluster_diff.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/core/service_ports.h"
#include "loom/core/private_data_yaml.h"

namespace loom {
namespace {

// A pool's MIG partitions as `plan` prints them: "none", or "4 GPUs
// [3g.71gb, 2g.35gb, 1g.18gb, 1g.18gb], dynamic".
std::string MigText(const Cluster& c, const PoolSpec& p) {
  if (p.mig.gpus == 0) return "none";
  std::vector<MigProfile> profiles;
  if (p.gpu_model >= 0 && p.gpu_model < static_cast<int>(c.gpu_models.size())) {
    profiles =
        MigProfilesFor(c.gpu_models[p.gpu_model].name, p.gpu_memory_bytes);
  }
  std::vector<std::string> names;
  for (const MigInstance& in : p.mig.layout) {
    names.push_back(in.profile >= 0 &&
                            in.profile < static_cast<int>(profiles.size())
                        ? profiles[in.profile].name
                        : absl::StrCat("#", in.profile));
  }
  return absl::StrCat(p.mig.gpus, " GPUs [", absl::StrJoin(names, ", "), "]",
                      p.mig.dynamic ? ", dynamic" : "");
}

using Op = ClusterDiffLine::Op;

std::string CpusText(int64_t milli) {
  if (milli % 1000 == 0) return absl::StrCat(milli / 1000);
  return absl::StrCat(static_cast<double>(milli) / 1000.0);
}

std::string NumberText(double v) { return absl::StrCat(v); }

// Appends "field a -> b" when the values differ.
template <typename T, typename F>
void DiffField(std::vector<std::string>& out, const char* field, const T& a,
               const T& b, F format) {
  if (a != b)
    out.push_back(absl::StrCat(field, " ", format(a), " -> ", format(b)));
}

// Appends "labels.rack \"a\" -> \"b\"" (or `prefix` instead of labels)
// for every key that differs.
void DiffLabels(std::vector<std::string>& out,
                const std::map<std::string, std::string>& a,
                const std::map<std::string, std::string>& b,
                const char* prefix = "labels") {
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) {
      out.push_back(absl::StrCat(prefix, ".", k, " \"", v, "\" -> (none)"));
    } else if (it->second != v) {
      out.push_back(
          absl::StrCat(prefix, ".", k, " \"", v, "\" -> \"", it->second, "\""));
    }
  }
  for (const auto& [k, v] : b) {
    if (!a.contains(k)) {
      out.push_back(absl::StrCat(prefix, ".", k, " (none) -> \"", v, "\""));
    }
  }
}

std::string ListText(const std::vector<std::string>& v) {
  return absl::StrCat("[", absl::StrJoin(v, ", "), "]");
}

// `from`'s objects, matched by name in `to`: changed or removed; then the
// ones only `to` has. `diff(a, b)` gives the changed fields,
// `summary(x, in_to)` the text of a removal (from `from`) or an addition.
template <typename T, typename Name, typename Diff, typename Summary>
void DiffByName(std::vector<ClusterDiffLine>& out, const char* kind,
                const std::vector<T>& from, const std::vector<T>& to, Name name,
                Diff diff, Summary summary) {
  std::unordered_map<std::string, const T*> in_to;
  for (const T& x : to) in_to.emplace(name(x), &x);
  std::unordered_map<std::string, const T*> in_from;
  for (const T& x : from) in_from.emplace(name(x), &x);
  for (const T& a : from) {
    auto it = in_to.find(name(a));
    if (it == in_to.end()) {
      out.push_back({Op::kRemove, kind, name(a), summary(a, false)});
      continue;
    }
    std::vector<std::string> d = diff(a, *it->second);
    if (!d.empty()) out.push_back({Op::kChange, kind, name(a), std::move(d)});
  }
  for (const T& b : to) {
    if (!in_from.contains(name(b))) {
      out.push_back({Op::kAdd, kind, name(b), summary(b, true)});
    }
  }
}

std::string ModelNameOf(const Cluster& c, GpuModelId id) {
  return id >= 0 && id < static_cast<int>(c.gpu_models.size())
             ? c.gpu_models[id].name
             : "?";
}

// Each node's path of switch names from its leaf up, by node name.
std::map<std::string, std::vector<std::string>> SwitchPaths(const Cluster& c) {
  std::map<std::string, std::vector<std::string>> out;
  const Topology& t = c.topology;
  if (t.num_nodes() != static_cast<int>(c.nodes.size())) return out;
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    std::vector<std::string>& path = out[c.nodes[i].name];
    for (int level = 1; level <= t.num_levels(); ++level) {
      path.push_back(t.sw(t.AncestorAt(static_cast<int>(i), level)).name);
    }
  }
  return out;
}

void DiffNetwork(std::vector<ClusterDiffLine>& out, const Cluster& from,
                 const Cluster& to) {
  const auto a = SwitchPaths(from);
  const auto b = SwitchPaths(to);
  std::vector<std::string> moved;
  for (const auto& [node, path] : a) {
    auto it = b.find(node);
    if (it == b.end() || it->second == path) continue;
    moved.push_back(absl::StrCat(node, " ", absl::StrJoin(path, "/"), " -> ",
                                 absl::StrJoin(it->second, "/")));
  }
  std::vector<std::string> details;
  if (from.topology.num_levels() != to.topology.num_levels()) {
    details.push_back(absl::StrCat("levels ", from.topology.num_levels(),
                                   " -> ", to.topology.num_levels()));
  }
  constexpr size_t kShown = 5;
  if (!moved.empty()) {
    details.push_back(absl::StrCat(
        moved.size(), " node(s) move: ",
        absl::StrJoin(moved.begin(),
                      moved.begin() + std::min(kShown, moved.size()), "; "),
        moved.size() > kShown ? "; ..." : ""));
  }
  if (!details.empty()) {
    out.push_back({Op::kChange, "network", "tree", std::move(details)});
  }
}

}  // namespace

std::vector<ClusterDiffLine> DiffClusters(const Cluster& from,
                                          const Cluster& to) {
  std::vector<ClusterDiffLine> out;
  if (from.name != to.name) {
    out.push_back({Op::kChange,
                   "cluster",
                   to.name,
                   {absl::StrCat("name ", from.name, " -> ", to.name)}});
  }
  DiffByName(
      out, "gpu_model", from.gpu_models, to.gpu_models,
      [](const GpuModel& m) { return m.name; },
      [](const GpuModel& a, const GpuModel& b) {
        std::vector<std::string> d;
        DiffField(d, "speed", a.speed, b.speed, NumberText);
        DiffField(d, "memory", a.memory_bytes, b.memory_bytes, FormatBytes);
        return d;
      },
      [](const GpuModel& m, bool) {
        return std::vector<std::string>{
            absl::StrCat("speed ", m.speed, ", ", FormatBytes(m.memory_bytes))};
      });

  // Pools, then the nodes of pools in both that come or go.
  DiffByName(
      out, "pool", from.pools, to.pools,
      [](const PoolSpec& p) { return p.name; },
      [&](const PoolSpec& a, const PoolSpec& b) {
        std::vector<std::string> d;
        DiffField(d, "nodes", a.node_count, b.node_count,
                  [](int n) { return absl::StrCat(n); });
        DiffField(d, "gpu.model", ModelNameOf(from, a.gpu_model),
                  ModelNameOf(to, b.gpu_model),
                  [](const std::string& s) { return s; });
        DiffField(d, "gpu.count", a.gpus_per_node, b.gpus_per_node,
                  [](int n) { return absl::StrCat(n); });
        DiffField(d, "gpu.memory", a.gpu_memory_bytes, b.gpu_memory_bytes,
                  FormatBytes);
        DiffField(d, "gpu.domain", a.gpu_domain, b.gpu_domain,
                  [](int n) { return absl::StrCat(n); });
        DiffField(d, "cpus", a.cpus_milli, b.cpus_milli, CpusText);
        DiffField(d, "memory", a.memory_bytes, b.memory_bytes, FormatBytes);
        DiffField(d, "nvme", a.nvme_bytes, b.nvme_bytes, FormatBytes);
        DiffField(d, "nics", a.nics, b.nics,
                  [](int n) { return absl::StrCat(n); });
        DiffField(d, "mig", MigText(from, a), MigText(to, b),
                  [](const std::string& s) { return s; });
        DiffField(d, "sharing", a.sharing, b.sharing,
                  [](bool v) { return std::string(v ? "true" : "false"); });
        DiffField(d, "allow_privilege_escalation",
                  a.allow_privilege_escalation, b.allow_privilege_escalation,
                  [](bool v) { return std::string(v ? "true" : "false"); });
        DiffLabels(d, a.labels, b.labels);
        DiffLabels(d, a.stack, b.stack, "stack");
        return d;
      },
      [&](const PoolSpec& p, bool in_to) {
        const Cluster& c = in_to ? to : from;
        return std::vector<std::string>{absl::StrCat(
            p.node_count, p.node_count == 1 ? " node" : " nodes", " of ",
            p.gpus_per_node, "x ", ModelNameOf(c, p.gpu_model))};
      });
  {
    std::set<std::string> pools_from, pools_to;
    for (const PoolSpec& p : from.pools) pools_from.insert(p.name);
    for (const PoolSpec& p : to.pools) pools_to.insert(p.name);
    auto pool_of = [](const Cluster& c, const NodeSpec& n) {
      return n.pool >= 0 && n.pool < static_cast<int>(c.pools.size())
                 ? c.pools[n.pool].name
                 : std::string();
    };
    // Only nodes whose pool is in both: a pool that comes or goes as a
    // whole says so in its own line.
    std::vector<NodeSpec> a, b;
    for (const NodeSpec& n : from.nodes) {
      if (pools_to.contains(pool_of(from, n))) a.push_back(n);
    }
    for (const NodeSpec& n : to.nodes) {
      if (pools_from.contains(pool_of(to, n))) b.push_back(n);
    }
    DiffByName(
        out, "node", a, b, [](const NodeSpec& n) { return n.name; },
        [&](const NodeSpec& x, const NodeSpec& y) {
          std::vector<std::string> d;
          DiffField(d, "pool", pool_of(from, x), pool_of(to, y),
                    [](const std::string& s) { return s; });
          // Its own labels (`node_labels`): a change of its pool's labels
          // is said once, on the pool.
          auto own = [](const Cluster& c, const NodeSpec& n) {
            std::map<std::string, std::string> out;
            const PoolSpec* p =
                n.pool >= 0 && n.pool < static_cast<int>(c.pools.size())
                    ? &c.pools[n.pool]
                    : nullptr;
            for (const auto& [k, v] : n.labels) {
              if (p == nullptr || !p->labels.contains(k) ||
                  p->labels.at(k) != v) {
                out[k] = v;
              }
            }
            return out;
          };
          DiffLabels(d, own(from, x), own(to, y));
          return d;
        },
        [](const NodeSpec&, bool) { return std::vector<std::string>{}; });
  }
  DiffNetwork(out, from, to);

  DiffByName(
      out, "project", from.projects, to.projects,
      [](const ProjectSpec& p) { return p.name; },
      [](const ProjectSpec& a, const ProjectSpec& b) {
        std::vector<std::string> d;
        DiffField(d, "quota_gpus", a.quota_gpus, b.quota_gpus,
                  [](int n) { return absl::StrCat(n); });
        DiffField(d, "weight", a.weight, b.weight, NumberText);
        DiffField(d, "priority_classes", a.priority_classes, b.priority_classes,
                  ListText);
        DiffField(d, "service_ports", a.service_ports, b.service_ports,
                  [](const std::vector<ServicePortRange>& v) {
                    return absl::StrCat("[", ServicePortRangesText(v), "]");
                  });
        return d;
      },
      [](const ProjectSpec& p, bool) {
        return std::vector<std::string>{
            absl::StrCat("quota_gpus ", p.quota_gpus, ", weight ", p.weight)};
      });
  DiffByName(
      out, "priority_class", from.priority_classes, to.priority_classes,
      [](const PriorityClass& p) { return p.name; },
      [](const PriorityClass& a, const PriorityClass& b) {
        std::vector<std::string> d;
        DiffField(d, "value", a.value, b.value,
                  [](int n) { return absl::StrCat(n); });
        return d;
      },
      [](const PriorityClass& p, bool) {
        return std::vector<std::string>{absl::StrCat("value ", p.value)};
      });
  for (auto [key, a, b] :
       {std::tuple{"local_roots", &from.datasets.local_roots,
                   &to.datasets.local_roots},
        std::tuple{"mount_roots", &from.datasets.mount_roots,
                   &to.datasets.mount_roots}}) {
    if (*a == *b) continue;
    out.push_back({Op::kChange,
                   "datasets",
                   key,
                   {absl::StrCat(ListText(*a), " -> ", ListText(*b))}});
  }
  if (from.containers.allowed_mounts != to.containers.allowed_mounts) {
    out.push_back(
        {Op::kChange,
         "containers",
         "allowed_mounts",
         {absl::StrCat(ListText(from.containers.allowed_mounts), " -> ",
                       ListText(to.containers.allowed_mounts))}});
  }
  if (from.services.port_range != to.services.port_range) {
    out.push_back(
        {Op::kChange,
         "services",
         "port_range",
         {absl::StrCat(ServicePortRangeText(from.services.port_range), " -> ",
                       ServicePortRangeText(to.services.port_range))}});
  }
  if (from.containers.allowed_registries != to.containers.allowed_registries) {
    out.push_back(
        {Op::kChange,
         "containers",
         "allowed_registries",
         {absl::StrCat(ListText(from.containers.allowed_registries), " -> ",
                       ListText(to.containers.allowed_registries))}});
  }
  if (from.private_data != to.private_data) {
    out.push_back(
        {Op::kChange,
         "cluster",
         "private_data",
         {absl::StrCat(
             ListText(internal::PrivateDataNames(from.private_data)), " -> ",
             ListText(internal::PrivateDataNames(to.private_data)))}});
  }
  return out;
}

std::string FormatDiffLine(const ClusterDiffLine& line) {
  const char* sign = line.op == Op::kAdd      ? "+"
                     : line.op == Op::kRemove ? "-"
                                              : "~";
  std::string out = absl::StrCat(sign, " ", line.kind, " ", line.name);
  if (line.details.empty()) return out;
  if (line.op == Op::kChange) {
    return absl::StrCat(out, ": ", absl::StrJoin(line.details, ", "));
  }
  return absl::StrCat(out, " (", absl::StrJoin(line.details, ", "), ")");
}

}  // namespace loom
