#include "loom/core/cluster_spec.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/common/units.h"
#include "loom/core/cluster_network_yaml.h"
#include "loom/core/container_spec_yaml.h"
#include "loom/core/dataset_policy_yaml.h"
#include "loom/core/pool_mig_yaml.h"
#include "loom/core/pool_stack_yaml.h"
#include "loom/core/service_ports_yaml.h"
#include "loom/core/private_data_yaml.h"
#include "loom/core/yaml_util.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

// Limits that keep a typo from turning into a cluster that exhausts memory.
constexpr int64_t kMaxNodesPerPool = 100000;
constexpr int64_t kMaxClusterNodes = internal::kMaxClusterNodes;
constexpr int64_t kMaxCores = 1000000;
constexpr int64_t kMaxNics = 1024;
constexpr int64_t kMaxQuotaGpus = 100000000;

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;
using yaml::ScalarText;

// True when `name` is usable as a pool name, and so as the stem of node
// names: ASCII letters, digits, '-', '_' and '.', starting with a letter or
// digit.
bool IsValidPoolName(absl::string_view name) {
  if (name.empty() || !absl::ascii_isalnum(static_cast<unsigned char>(name[0])))
    return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

// True when `name` is a valid GPU model name: lower-case letters, digits,
// '-', '_' and '.', starting with a letter or digit.
bool IsValidGpuModelName(absl::string_view name) {
  if (name.empty() ||
      !(absl::ascii_islower(static_cast<unsigned char>(name[0])) ||
        absl::ascii_isdigit(static_cast<unsigned char>(name[0])))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.';
  });
}

// The name a spec without `name` gets: the file name without directory and
// extension ("conf/big.yaml" -> "big"), or "cluster".
std::string DefaultClusterName(absl::string_view source) {
  const size_t slash = source.find_last_of('/');
  absl::string_view stem =
      slash == absl::string_view::npos ? source : source.substr(slash + 1);
  const size_t dot = stem.find_last_of('.');
  if (dot != absl::string_view::npos && dot > 0) stem = stem.substr(0, dot);
  if (stem.empty() || !IsValidPoolName(stem)) return "cluster";
  return std::string(stem);
}

// Names declared so far in one list, with the 1-based line of each.
using NameLines = std::map<std::string, int, std::less<>>;

// Turns the YAML document of a cluster spec into a `Cluster`. Every method
// returns InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on
// bad input. The parser never throws; yaml-cpp exceptions are caught by the
// caller of `Parse`.
class SpecParser : public yaml::Reader {
 public:
  // `source` must outlive the parser.
  explicit SpecParser(absl::string_view source) : yaml::Reader(source) {}

  absl::StatusOr<Cluster> Parse(const YAML::Node& root);

 private:
  // Reads the required `name` of the list element `map`. `seen` holds the
  // names of earlier elements with the line each was declared on; a repeat is
  // an error that calls the thing `what` ("pool", "project").
  absl::StatusOr<std::string> ReadUniqueName(const MapNode& map,
                                             absl::string_view what,
                                             NameLines* seen) const;

  absl::Status ParseGpuModels(const Field& field,
                              std::vector<GpuModel>* models) const;
  absl::Status ParsePools(const Field& field, Cluster* cluster) const;
  absl::Status ParseLabels(const Field& field, absl::string_view path,
                           std::map<std::string, std::string>* labels) const;
  absl::Status ParseNetwork(const Field* field, const YAML::Node& root,
                            Cluster* cluster) const {
    return internal::ParseClusterNetwork(source(), field, root, cluster);
  }
  absl::Status ParseProjects(const Field& field, Cluster* cluster) const;
  absl::Status ParsePriorityClasses(const Field& field, Cluster* cluster) const;
};

absl::StatusOr<std::string> SpecParser::ReadUniqueName(const MapNode& map,
                                                       absl::string_view what,
                                                       NameLines* seen) const {
  absl::StatusOr<const Field*> f = Require(map, "name");
  if (!f.ok()) return f.status();
  const std::string path = ChildPath(map.path, "name");
  absl::StatusOr<std::string> name = ReadString((*f)->value, path);
  if (!name.ok()) return name.status();
  if (auto prior = seen->find(*name); prior != seen->end()) {
    return Error(
        (*f)->value, path,
        absl::StrCat("duplicate ", what, " name '", *name,
                     "' (first declared on line ", prior->second, ")"));
  }
  seen->emplace(*name, (*f)->value.Mark().line + 1);
  return name;
}

absl::Status SpecParser::ParseGpuModels(const Field& field,
                                        std::vector<GpuModel>* models) const {
  const std::string path = field.key;
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(field.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  std::vector<std::string> declared;
  for (size_t i = 0; i < items->size(); ++i) {
    absl::StatusOr<MapNode> map =
        ReadMap((*items)[i], ElementPath(path, i), {"name", "speed", "memory"});
    if (!map.ok()) return map.status();
    absl::StatusOr<const Field*> name_field = Require(*map, "name");
    if (!name_field.ok()) return name_field.status();
    const std::string name_path = ChildPath(map->path, "name");
    absl::StatusOr<std::string> name =
        ReadString((*name_field)->value, name_path);
    if (!name.ok()) return name.status();
    if (!IsValidGpuModelName(*name)) {
      return Error((*name_field)->value, name_path,
                   absl::StrCat("'", *name,
                                "' is not a valid GPU model name (use lower-"
                                "case letters, digits, '-', '_' and '.')"));
    }
    if (*name == "any") {
      return Error((*name_field)->value, name_path,
                   "'any' is reserved for jobs that accept every model");
    }
    if (std::find(declared.begin(), declared.end(), *name) != declared.end()) {
      return Error((*name_field)->value, name_path,
                   absl::StrCat("GPU model '", *name, "' is declared twice"));
    }
    declared.push_back(*name);

    auto existing =
        std::find_if(models->begin(), models->end(),
                     [&](const GpuModel& m) { return m.name == *name; });
    GpuModel model;
    if (existing != models->end()) model = *existing;
    model.name = *name;
    if (const Field* f = map->Find("speed"); f != nullptr) {
      const std::string speed_path = ChildPath(map->path, "speed");
      absl::StatusOr<double> speed = ReadNumber(f->value, speed_path);
      if (!speed.ok()) return speed.status();
      if (*speed <= 0) {
        return Error(f->value, speed_path,
                     absl::StrCat("must be more than zero, got ", *speed));
      }
      model.speed = *speed;
    } else if (existing == models->end()) {
      model.speed = 1.0;
    }
    if (const Field* f = map->Find("memory"); f != nullptr) {
      absl::StatusOr<int64_t> memory =
          ReadBytes(f->value, ChildPath(map->path, "memory"), 1);
      if (!memory.ok()) return memory.status();
      model.memory_bytes = *memory;
    } else if (existing == models->end()) {
      return Error(
          map->node, ChildPath(map->path, "memory"),
          absl::StrCat("is required for the new GPU model '", *name, "'"));
    }
    if (existing != models->end()) {
      *existing = model;
    } else {
      models->push_back(model);
    }
  }
  return absl::OkStatus();
}

absl::Status SpecParser::ParseLabels(
    const Field& field, absl::string_view path,
    std::map<std::string, std::string>* labels) const {
  if (!field.value.IsMap()) {
    return Error(
        field.value, path,
        absl::StrCat("must be a map of strings, got ", KindOf(field.value)));
  }
  for (auto it = field.value.begin(); it != field.value.end(); ++it) {
    const YAML::Node key = it->first;
    const YAML::Node value = it->second;
    if (!key.IsScalar() || key.Scalar().empty()) {
      return Error(key, path, "label names must be non-empty strings");
    }
    const std::string name = ScalarText(key);
    const std::string label_path = ChildPath(path, name);
    if (labels->count(name) > 0) {
      return Error(key, label_path, "given twice");
    }
    if (!value.IsScalar()) {
      return Error(value, label_path,
                   absl::StrCat("must be a string, got ", KindOf(value)));
    }
    (*labels)[name] = ScalarText(value);
  }
  return absl::OkStatus();
}

absl::Status SpecParser::ParsePools(const Field& field,
                                    Cluster* cluster) const {
  const std::string path = field.key;
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(field.value, path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  NameLines seen;
  int64_t total_nodes = 0;
  for (size_t i = 0; i < items->size(); ++i) {
    absl::StatusOr<MapNode> map =
        ReadMap((*items)[i], ElementPath(path, i),
                {"name", "nodes", "gpu", "cpus", "memory", "nvme", "nics",
                 "mig", "sharing", "allow_privilege_escalation", "labels",
                 "node_labels", "stack"});
    if (!map.ok()) return map.status();
    PoolSpec pool;

    absl::StatusOr<std::string> name = ReadUniqueName(*map, "pool", &seen);
    if (!name.ok()) return name.status();
    if (!IsValidPoolName(*name)) {
      return Error(map->Find("name")->value, ChildPath(map->path, "name"),
                   absl::StrCat("'", *name,
                                "' is not a valid pool name (use letters, "
                                "digits, '-', '_' and '.')"));
    }
    pool.name = *name;

    absl::StatusOr<const Field*> f = Require(*map, "nodes");
    if (!f.ok()) return f.status();
    const std::string nodes_path = ChildPath(map->path, "nodes");
    absl::StatusOr<int64_t> count =
        ReadInt((*f)->value, nodes_path, 1, kMaxNodesPerPool);
    if (!count.ok()) return count.status();
    total_nodes += *count;
    if (total_nodes > kMaxClusterNodes) {
      return Error((*f)->value, nodes_path,
                   absl::StrCat("the cluster would have more than ",
                                kMaxClusterNodes, " nodes"));
    }
    pool.node_count = static_cast<int>(*count);

    f = Require(*map, "gpu");
    if (!f.ok()) return f.status();
    absl::StatusOr<MapNode> gpu =
        ReadMap((*f)->value, ChildPath(map->path, "gpu"),
                {"model", "count", "memory", "domain"});
    if (!gpu.ok()) return gpu.status();
    f = Require(*gpu, "model");
    if (!f.ok()) return f.status();
    const std::string model_path = ChildPath(gpu->path, "model");
    absl::StatusOr<std::string> model_name =
        ReadString((*f)->value, model_path);
    if (!model_name.ok()) return model_name.status();
    const std::string lower = absl::AsciiStrToLower(*model_name);
    const auto model_index = [&](absl::string_view n) -> int {
      for (size_t m = 0; m < cluster->gpu_models.size(); ++m) {
        if (cluster->gpu_models[m].name == n) return static_cast<int>(m);
      }
      return -1;
    };
    const int model = model_index(*model_name);
    if (model < 0) {
      if (lower != *model_name && model_index(lower) >= 0) {
        return Error((*f)->value, model_path,
                     absl::StrCat("GPU model names are lower case; write '",
                                  lower, "'"));
      }
      std::vector<std::string> known;
      for (const GpuModel& m : cluster->gpu_models) known.push_back(m.name);
      return Error((*f)->value, model_path,
                   absl::StrCat("unknown GPU model '", *model_name,
                                "' (known: ", absl::StrJoin(known, ", "),
                                "; declare others under gpu_models)"));
    }
    pool.gpu_model = model;
    f = Require(*gpu, "count");
    if (!f.ok()) return f.status();
    absl::StatusOr<int64_t> gpus =
        ReadInt((*f)->value, ChildPath(gpu->path, "count"), 1, kMaxGpusPerNode);
    if (!gpus.ok()) return gpus.status();
    pool.gpus_per_node = static_cast<int>(*gpus);
    pool.gpu_memory_bytes = cluster->gpu_models[model].memory_bytes;
    if (const Field* mem = gpu->Find("memory"); mem != nullptr) {
      absl::StatusOr<int64_t> bytes =
          ReadBytes(mem->value, ChildPath(gpu->path, "memory"), 1);
      if (!bytes.ok()) return bytes.status();
      pool.gpu_memory_bytes = *bytes;
    }
    if (const Field* d = gpu->Find("domain"); d != nullptr) {
      const std::string path = ChildPath(gpu->path, "domain");
      absl::StatusOr<int64_t> size =
          ReadInt(d->value, path, 1, kMaxGpusPerNode);
      if (!size.ok()) return size.status();
      if (pool.gpus_per_node % *size != 0) {
        return Error(d->value, path,
                     absl::StrCat("must divide the node's ", pool.gpus_per_node,
                                  " GPUs into equal domains"));
      }
      pool.gpu_domain =
          *size == pool.gpus_per_node ? 0 : static_cast<int>(*size);
    }

    f = Require(*map, "cpus");
    if (!f.ok()) return f.status();
    const std::string cpus_path = ChildPath(map->path, "cpus");
    absl::StatusOr<double> cpus = ReadNumber((*f)->value, cpus_path);
    if (!cpus.ok()) return cpus.status();
    if (*cpus < 0.001 || *cpus > kMaxCores) {
      return Error((*f)->value, cpus_path,
                   absl::StrCat("must be between 0.001 and ", kMaxCores,
                                " cores, got ", (*f)->value.Scalar()));
    }
    pool.cpus_milli = std::llround(*cpus * 1000);

    f = Require(*map, "memory");
    if (!f.ok()) return f.status();
    absl::StatusOr<int64_t> memory =
        ReadBytes((*f)->value, ChildPath(map->path, "memory"), 1);
    if (!memory.ok()) return memory.status();
    pool.memory_bytes = *memory;

    if (const Field* nvme = map->Find("nvme"); nvme != nullptr) {
      absl::StatusOr<int64_t> bytes =
          ReadBytes(nvme->value, ChildPath(map->path, "nvme"), 0);
      if (!bytes.ok()) return bytes.status();
      pool.nvme_bytes = *bytes;
    }
    if (const Field* nics = map->Find("nics"); nics != nullptr) {
      absl::StatusOr<int64_t> n =
          ReadInt(nics->value, ChildPath(map->path, "nics"), 0, kMaxNics);
      if (!n.ok()) return n.status();
      pool.nics = static_cast<int>(*n);
    }
    if (const Field* mig = map->Find("mig"); mig != nullptr) {
      absl::StatusOr<MigPool> parsed =
          internal::ParsePoolMig(*this, *mig, ChildPath(map->path, "mig"), pool,
                                 cluster->gpu_models[pool.gpu_model]);
      if (!parsed.ok()) return parsed.status();
      pool.mig = *std::move(parsed);
    }
    if (const Field* sharing = map->Find("sharing"); sharing != nullptr) {
      absl::StatusOr<bool> b =
          ReadBool(sharing->value, ChildPath(map->path, "sharing"));
      if (!b.ok()) return b.status();
      pool.sharing = *b;
    }
    if (const Field* f = map->Find("allow_privilege_escalation");
        f != nullptr) {
      absl::StatusOr<bool> b = ReadBool(
          f->value, ChildPath(map->path, "allow_privilege_escalation"));
      if (!b.ok()) return b.status();
      pool.allow_privilege_escalation = *b;
    }
    if (const Field* labels = map->Find("labels"); labels != nullptr) {
      absl::Status st =
          ParseLabels(*labels, ChildPath(map->path, "labels"), &pool.labels);
      if (!st.ok()) return st;
    }
    if (const Field* f = map->Find("node_labels"); f != nullptr) {
      const std::string path = ChildPath(map->path, "node_labels");
      if (!f->value.IsMap()) {
        return Error(f->value, path,
                     absl::StrCat("must be a map of node names to labels, got ",
                                  KindOf(f->value)));
      }
      for (auto it = f->value.begin(); it != f->value.end(); ++it) {
        const std::string node = ScalarText(it->first);
        int index = -1;
        const std::string prefix = absl::StrCat(pool.name, "-");
        if (absl::StartsWith(node, prefix) &&
            !absl::SimpleAtoi(node.substr(prefix.size()), &index)) {
          index = -1;
        }
        if (index < 0 || index >= pool.node_count ||
            node != absl::StrCat(prefix, index) ||
            pool.node_labels.count(node)) {
          return Error(
              it->first, ChildPath(path, node),
              pool.node_labels.count(node)
                  ? std::string("given twice")
                  : absl::StrCat("no node '", node, "' in pool ", pool.name,
                                 " (its nodes are ", prefix, "0 to ", prefix,
                                 pool.node_count - 1, ")"));
        }
        Field labels{node, it->first, it->second};
        if (absl::Status st = ParseLabels(labels, ChildPath(path, node),
                                          &pool.node_labels[node]);
            !st.ok()) {
          return st;
        }
      }
    }
    if (const Field* stack = map->Find("stack"); stack != nullptr) {
      absl::StatusOr<std::map<std::string, std::string>> parsed =
          internal::ParsePoolStack(*this, *stack,
                                   ChildPath(map->path, "stack"));
      if (!parsed.ok()) return parsed.status();
      pool.stack = *std::move(parsed);
    }
    cluster->pools.push_back(std::move(pool));
  }

  cluster->nodes.reserve(total_nodes);
  for (size_t p = 0; p < cluster->pools.size(); ++p) {
    const PoolSpec& pool = cluster->pools[p];
    for (int i = 0; i < pool.node_count; ++i) {
      NodeSpec node;
      node.name = absl::StrCat(pool.name, "-", i);
      node.pool = static_cast<int>(p);
      node.gpu_model = pool.gpu_model;
      node.gpus = pool.gpus_per_node;
      node.cpus_milli = pool.cpus_milli;
      node.memory_bytes = pool.memory_bytes;
      node.nvme_bytes = pool.nvme_bytes;
      node.nics = pool.nics;
      node.labels = pool.labels;
      if (auto own = pool.node_labels.find(node.name);
          own != pool.node_labels.end()) {
        for (const auto& [key, value] : own->second) node.labels[key] = value;
      }
      cluster->nodes.push_back(std::move(node));
    }
  }
  return absl::OkStatus();
}

absl::Status SpecParser::ParseProjects(const Field& field,
                                       Cluster* cluster) const {
  const std::string path = field.key;
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(field.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  NameLines seen;
  for (size_t i = 0; i < items->size(); ++i) {
    absl::StatusOr<MapNode> map = ReadMap(
        (*items)[i], ElementPath(path, i),
        {"name", "quota_gpus", "weight", "priority_classes", "service_ports"});
    if (!map.ok()) return map.status();
    ProjectSpec project;
    absl::StatusOr<std::string> name = ReadUniqueName(*map, "project", &seen);
    if (!name.ok()) return name.status();
    project.name = *name;
    if (const Field* q = map->Find("quota_gpus"); q != nullptr) {
      absl::StatusOr<int64_t> quota = ReadInt(
          q->value, ChildPath(map->path, "quota_gpus"), 0, kMaxQuotaGpus);
      if (!quota.ok()) return quota.status();
      project.quota_gpus = static_cast<int>(*quota);
    }
    if (const Field* w = map->Find("weight"); w != nullptr) {
      const std::string weight_path = ChildPath(map->path, "weight");
      absl::StatusOr<double> weight = ReadNumber(w->value, weight_path);
      if (!weight.ok()) return weight.status();
      if (*weight <= 0) {
        return Error(w->value, weight_path,
                     absl::StrCat("must be more than zero, got ", *weight));
      }
      project.weight = *weight;
    }
    if (const Field* pc = map->Find("priority_classes"); pc != nullptr) {
      const std::string pc_path = ChildPath(map->path, "priority_classes");
      absl::StatusOr<std::vector<YAML::Node>> names =
          ReadList(pc->value, pc_path, /*allow_empty=*/false);
      if (!names.ok()) return names.status();
      for (size_t k = 0; k < names->size(); ++k) {
        const std::string name_path = ElementPath(pc_path, k);
        absl::StatusOr<std::string> name = ReadString((*names)[k], name_path);
        if (!name.ok()) return name.status();
        if (cluster->FindPriorityClass(*name) == nullptr) {
          std::vector<std::string> known;
          for (const PriorityClass& c : cluster->priority_classes) {
            known.push_back(c.name);
          }
          return Error(
              (*names)[k], name_path,
              absl::StrCat("no priority class '", *name, "' (the cluster has ",
                           absl::StrJoin(known, ", "), ")"));
        }
        if (std::find(project.priority_classes.begin(),
                      project.priority_classes.end(),
                      *name) == project.priority_classes.end()) {
          project.priority_classes.push_back(*name);
        }
      }
    }
    if (const Field* sp = map->Find("service_ports"); sp != nullptr) {
      absl::StatusOr<std::vector<ServicePortRange>> ports =
          internal::ParseServicePorts(*this, *sp,
                                      ChildPath(map->path, "service_ports"));
      if (!ports.ok()) return ports.status();
      project.service_ports = *std::move(ports);
    }
    cluster->projects.push_back(std::move(project));
  }
  return absl::OkStatus();
}

absl::Status SpecParser::ParsePriorityClasses(const Field& field,
                                              Cluster* cluster) const {
  const std::string path = field.key;
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(field.value, path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  NameLines seen;
  for (size_t i = 0; i < items->size(); ++i) {
    absl::StatusOr<MapNode> map =
        ReadMap((*items)[i], ElementPath(path, i), {"name", "value"});
    if (!map.ok()) return map.status();
    PriorityClass pc;
    absl::StatusOr<std::string> name =
        ReadUniqueName(*map, "priority class", &seen);
    if (!name.ok()) return name.status();
    pc.name = *name;
    absl::StatusOr<const Field*> f = Require(*map, "value");
    if (!f.ok()) return f.status();
    absl::StatusOr<int64_t> value = ReadInt(
        (*f)->value, ChildPath(map->path, "value"),
        std::numeric_limits<int>::min(), std::numeric_limits<int>::max());
    if (!value.ok()) return value.status();
    pc.value = static_cast<int>(*value);
    cluster->priority_classes.push_back(std::move(pc));
  }
  return absl::OkStatus();
}

absl::StatusOr<Cluster> SpecParser::Parse(const YAML::Node& root) {
  if (root.IsNull() || !root.IsDefined()) {
    return Error(YAML::Mark(), "",
                 "the cluster spec is empty; it needs at least `pools`");
  }
  absl::StatusOr<MapNode> map =
      ReadMap(root, "",
              {"name", "gpu_models", "pools", "network", "projects",
               "priority_classes", "containers", "datasets", "services",
               "private_data"});
  if (!map.ok()) return map.status();

  Cluster cluster;
  cluster.name = DefaultClusterName(source());
  if (const Field* f = map->Find("name"); f != nullptr) {
    absl::StatusOr<std::string> name = ReadString(f->value, f->key);
    if (!name.ok()) return name.status();
    cluster.name = *name;
  }

  cluster.gpu_models = DefaultGpuModels();
  if (const Field* f = map->Find("gpu_models"); f != nullptr) {
    absl::Status st = ParseGpuModels(*f, &cluster.gpu_models);
    if (!st.ok()) return st;
  }

  absl::StatusOr<const Field*> pools = Require(*map, "pools");
  if (!pools.ok()) return pools.status();
  if (absl::Status st = ParsePools(**pools, &cluster); !st.ok()) return st;

  if (absl::Status st = ParseNetwork(map->Find("network"), root, &cluster);
      !st.ok()) {
    return st;
  }

  // Classes first: a project's `priority_classes` name them.
  if (const Field* f = map->Find("priority_classes"); f != nullptr) {
    absl::Status st = ParsePriorityClasses(*f, &cluster);
    if (!st.ok()) return st;
  } else {
    cluster.priority_classes = DefaultPriorityClasses();
  }

  if (const Field* f = map->Find("projects"); f != nullptr) {
    absl::Status st = ParseProjects(*f, &cluster);
    if (!st.ok()) return st;
  }
  if (const Field* f = map->Find("containers"); f != nullptr) {
    absl::StatusOr<ContainerPolicy> policy =
        internal::ParseContainerPolicy(*this, *f);
    if (!policy.ok()) return policy.status();
    cluster.containers = *std::move(policy);
  }
  if (const Field* f = map->Find("datasets"); f != nullptr) {
    absl::StatusOr<DatasetPolicy> policy =
        internal::ParseDatasetPolicy(*this, *f);
    if (!policy.ok()) return policy.status();
    cluster.datasets = *std::move(policy);
  }
  if (const Field* f = map->Find("services"); f != nullptr) {
    absl::StatusOr<ServicePolicy> policy =
        internal::ParseServicePolicy(*this, *f);
    if (!policy.ok()) return policy.status();
    cluster.services = *policy;
  }
  if (const Field* f = map->Find("private_data"); f != nullptr) {
    absl::StatusOr<PrivateData> p = internal::ParsePrivateData(*this, *f);
    if (!p.ok()) return p.status();
    cluster.private_data = *p;
  }
  return cluster;
}

}  // namespace

absl::StatusOr<Cluster> ParseClusterSpec(std::string_view yaml,
                                         std::string_view source) {
  const std::string source_name(source);
  SpecParser parser(source_name);
  try {
    const YAML::Node root = YAML::Load(std::string(yaml));
    return parser.Parse(root);
  } catch (const YAML::Exception& e) {
    return parser.Error(e.mark, "", absl::StrCat("invalid YAML: ", e.msg));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(
        source_name, ": reading the cluster spec failed: ", e.what()));
  }
}

}  // namespace loom
