// The `network` section of a cluster spec (docs/cluster-spec.md,
// "Network"): a uniform fat-tree (`nodes_per_leaf`, `leaves_per_spine`) or
// an explicit tree of named switches over node-name ranges.

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/core/cluster_network_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom::internal {
namespace {

constexpr int64_t kMaxFanout = 100000;
constexpr int kMaxTreeLevels = 8;

// The fabric assumed when a spec has no `network` section.
constexpr int kDefaultNodesPerLeaf = 16;
constexpr int kDefaultLeavesPerSpine = 8;

// The name given to the switch that joins several top-level switches.
constexpr absl::string_view kCoreSwitchName = "core";

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::MapNode;

// Expands a node-name pattern: "h200-[0-3,8]" gives h200-0 .. h200-3 and
// h200-8; a name without brackets stands for itself. Returns the reason on a
// malformed pattern.
absl::StatusOr<std::vector<std::string>> ExpandNodeNames(
    absl::string_view pattern) {
  const size_t open = pattern.find('[');
  if (open == absl::string_view::npos) {
    if (pattern.find(']') != absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", pattern, "' has ']' without '['"));
    }
    return std::vector<std::string>{std::string(pattern)};
  }
  const size_t close = pattern.find(']', open);
  const auto malformed = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("'", pattern,
                     "' is not a node name or range (write e.g. "
                     "\"h200-[0-15]\" or \"h200-[0-3,8]\")"));
  };
  if (close == absl::string_view::npos) return malformed();
  const absl::string_view prefix = pattern.substr(0, open);
  const absl::string_view body = pattern.substr(open + 1, close - open - 1);
  const absl::string_view suffix = pattern.substr(close + 1);
  if (suffix.find_first_of("[]") != absl::string_view::npos) return malformed();
  std::vector<std::string> names;
  for (absl::string_view item : absl::StrSplit(body, ',')) {
    item = absl::StripAsciiWhitespace(item);
    const std::vector<absl::string_view> bounds = absl::StrSplit(item, '-');
    if (bounds.size() > 2) return malformed();
    int64_t first = 0;
    int64_t last = 0;
    if (!absl::SimpleAtoi(bounds[0], &first) || first < 0) return malformed();
    last = first;
    if (bounds.size() == 2 &&
        (!absl::SimpleAtoi(bounds[1], &last) || last < 0)) {
      return malformed();
    }
    if (last < first) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", pattern, "' has the empty range ", first, "-", last));
    }
    if (last - first + static_cast<int64_t>(names.size()) >= kMaxClusterNodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", pattern, "' names more nodes than any cluster has"));
    }
    for (int64_t i = first; i <= last; ++i) {
      names.push_back(absl::StrCat(prefix, i, suffix));
    }
  }
  return names;
}

// A switch of an explicit network tree as parsed, with its height (1 for a
// leaf switch).
struct ParsedSwitch {
  TreeSpec spec;
  int height = 1;
};

// Bookkeeping while an explicit network tree is parsed.
struct TreeState {
  std::unordered_map<std::string, int> node_ids;
  // For every node, the leaf switch that claimed it, or empty.
  std::vector<std::string> leaf_of;
  // Switch names seen so far, with where they were declared.
  std::map<std::string, YAML::Mark, std::less<>> switch_names;
};

// Reads the section with the spec's reader (its errors name the source).
class NetworkParser : public yaml::Reader {
 public:
  explicit NetworkParser(absl::string_view source) : yaml::Reader(source) {}

  absl::Status ParseNetwork(const Field* field, const YAML::Node& root,
                            Cluster* cluster) const;

 private:
  absl::StatusOr<ParsedSwitch> ParseSwitch(const YAML::Node& node,
                                           const std::string& path, int depth,
                                           TreeState* state) const;
};

absl::StatusOr<ParsedSwitch> NetworkParser::ParseSwitch(
    const YAML::Node& node, const std::string& path, int depth,
    TreeState* state) const {
  if (depth > kMaxTreeLevels) {
    return Error(node, path,
                 absl::StrCat("the network tree is deeper than ",
                              kMaxTreeLevels, " levels"));
  }
  absl::StatusOr<MapNode> map =
      ReadMap(node, path, {"name", "children", "nodes"});
  if (!map.ok()) return map.status();
  ParsedSwitch out;

  absl::StatusOr<const Field*> name_field = Require(*map, "name");
  if (!name_field.ok()) return name_field.status();
  const std::string name_path = ChildPath(path, "name");
  absl::StatusOr<std::string> name =
      ReadString((*name_field)->value, name_path);
  if (!name.ok()) return name.status();
  if (auto prior = state->switch_names.find(*name);
      prior != state->switch_names.end()) {
    if (prior->second.line < 0) {
      return Error((*name_field)->value, name_path,
                   absl::StrCat("'", *name,
                                "' is the name of the root switch that joins "
                                "the top-level switches; choose another"));
    }
    return Error((*name_field)->value, name_path,
                 absl::StrCat("duplicate switch name '", *name,
                              "' (first declared on line ",
                              prior->second.line + 1, ")"));
  }
  state->switch_names.emplace(*name, (*name_field)->value.Mark());
  out.spec.name = *name;

  const Field* children = map->Find("children");
  const Field* nodes = map->Find("nodes");
  if (children != nullptr && nodes != nullptr) {
    const Field* later =
        children->key_node.Mark().pos > nodes->key_node.Mark().pos ? children
                                                                   : nodes;
    return Error(later->key_node, ChildPath(path, later->key),
                 "a switch has either `children` (switches) or `nodes`, not "
                 "both");
  }
  if (children == nullptr && nodes == nullptr) {
    return Error(map->node, path,
                 absl::StrCat("switch '", *name,
                              "' needs `children` (switches) or `nodes` (node "
                              "names)"));
  }

  if (children != nullptr) {
    const std::string children_path = ChildPath(path, "children");
    absl::StatusOr<std::vector<YAML::Node>> items =
        ReadList(children->value, children_path, /*allow_empty=*/false);
    if (!items.ok()) return items.status();
    int height = -1;
    std::string first_name;
    for (size_t i = 0; i < items->size(); ++i) {
      const std::string child_path = ElementPath(children_path, i);
      absl::StatusOr<ParsedSwitch> child =
          ParseSwitch((*items)[i], child_path, depth + 1, state);
      if (!child.ok()) return child.status();
      if (height == -1) {
        height = child->height;
        first_name = child->spec.name;
      } else if (child->height != height) {
        return Error(
            (*items)[i], child_path,
            absl::StrCat("switch '", child->spec.name, "' is ", child->height,
                         " level(s) high but its sibling '", first_name,
                         "' is ", height,
                         "; every leaf switch must be at the same "
                         "depth"));
      }
      out.spec.children.push_back(std::move(child->spec));
    }
    out.height = height + 1;
    return out;
  }

  const std::string nodes_path = ChildPath(path, "nodes");
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(nodes->value, nodes_path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string item_path = ElementPath(nodes_path, i);
    absl::StatusOr<std::string> pattern = ReadString((*items)[i], item_path);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::vector<std::string>> names = ExpandNodeNames(*pattern);
    if (!names.ok())
      return Error((*items)[i], item_path, names.status().message());
    for (const std::string& node_name : *names) {
      auto id = state->node_ids.find(node_name);
      if (id == state->node_ids.end()) {
        return Error((*items)[i], item_path,
                     absl::StrCat("unknown node '", node_name,
                                  "' (nodes are named <pool>-<index>, index "
                                  "from 0)"));
      }
      std::string& owner = state->leaf_of[id->second];
      if (!owner.empty()) {
        return Error(
            (*items)[i], item_path,
            owner == *name
                ? absl::StrCat("node '", node_name, "' is listed twice in '",
                               *name, "'")
                : absl::StrCat("node '", node_name,
                               "' is already under leaf switch '", owner,
                               "'; a node hangs off exactly one leaf"));
      }
      owner = *name;
      out.spec.nodes.push_back(id->second);
    }
  }
  out.height = 1;
  return out;
}

absl::Status NetworkParser::ParseNetwork(const Field* field,
                                         const YAML::Node& root,
                                         Cluster* cluster) const {
  const int num_nodes = static_cast<int>(cluster->nodes.size());
  if (field == nullptr) {
    absl::StatusOr<Topology> t = Topology::Uniform(
        num_nodes, kDefaultNodesPerLeaf, kDefaultLeavesPerSpine);
    if (!t.ok()) return Error(root, "network", t.status().message());
    cluster->topology = *std::move(t);
    return absl::OkStatus();
  }
  absl::StatusOr<MapNode> map = ReadMap(
      field->value, field->key, {"nodes_per_leaf", "leaves_per_spine", "tree"});
  if (!map.ok()) return map.status();
  const Field* tree = map->Find("tree");
  if (tree == nullptr) {
    int64_t per_leaf = kDefaultNodesPerLeaf;
    int64_t per_spine = kDefaultLeavesPerSpine;
    if (const Field* f = map->Find("nodes_per_leaf"); f != nullptr) {
      absl::StatusOr<int64_t> v = ReadInt(
          f->value, ChildPath(map->path, "nodes_per_leaf"), 1, kMaxFanout);
      if (!v.ok()) return v.status();
      per_leaf = *v;
    }
    if (const Field* f = map->Find("leaves_per_spine"); f != nullptr) {
      absl::StatusOr<int64_t> v = ReadInt(
          f->value, ChildPath(map->path, "leaves_per_spine"), 1, kMaxFanout);
      if (!v.ok()) return v.status();
      per_spine = *v;
    }
    absl::StatusOr<Topology> t = Topology::Uniform(
        num_nodes, static_cast<int>(per_leaf), static_cast<int>(per_spine));
    if (!t.ok()) return Error(field->key_node, "network", t.status().message());
    cluster->topology = *std::move(t);
    return absl::OkStatus();
  }
  for (const Field& f : map->fields) {
    if (f.key != "tree") {
      return Error(f.key_node, ChildPath(map->path, f.key),
                   "cannot be combined with `tree`; give either an explicit "
                   "tree or nodes_per_leaf/leaves_per_spine");
    }
  }

  const std::string tree_path = ChildPath(map->path, "tree");
  absl::StatusOr<std::vector<YAML::Node>> items =
      ReadList(tree->value, tree_path, /*allow_empty=*/false);
  if (!items.ok()) return items.status();
  TreeState state;
  state.node_ids.reserve(cluster->nodes.size());
  for (int n = 0; n < num_nodes; ++n) {
    state.node_ids.emplace(cluster->nodes[n].name, n);
  }
  state.leaf_of.assign(num_nodes, "");
  if (items->size() > 1) {
    state.switch_names.emplace(std::string(kCoreSwitchName),
                               YAML::Mark::null_mark());
  }
  std::vector<TreeSpec> roots;
  int height = -1;
  std::string first_name;
  for (size_t i = 0; i < items->size(); ++i) {
    const std::string switch_path = ElementPath(tree_path, i);
    absl::StatusOr<ParsedSwitch> sw =
        ParseSwitch((*items)[i], switch_path, 1, &state);
    if (!sw.ok()) return sw.status();
    if (height == -1) {
      height = sw->height;
      first_name = sw->spec.name;
    } else if (sw->height != height) {
      return Error(
          (*items)[i], switch_path,
          absl::StrCat("top-level switch '", sw->spec.name, "' is ", sw->height,
                       " level(s) high but '", first_name, "' is ", height,
                       "; every leaf switch must be at the same "
                       "depth"));
    }
    roots.push_back(std::move(sw->spec));
  }
  std::vector<std::string> missing;
  for (int n = 0; n < num_nodes; ++n) {
    if (state.leaf_of[n].empty()) missing.push_back(cluster->nodes[n].name);
  }
  if (!missing.empty()) {
    std::string reason = absl::StrCat(
        missing.size() == 1 ? "node " : "nodes ",
        absl::StrJoin(missing.begin(),
                      missing.begin() + std::min<size_t>(missing.size(), 5),
                      ", "));
    if (missing.size() > 5) {
      absl::StrAppend(&reason, " and ", missing.size() - 5, " more");
    }
    absl::StrAppend(&reason, missing.size() == 1 ? " is" : " are",
                    " not under any leaf switch");
    return Error(field->key_node, tree_path, reason);
  }
  absl::StatusOr<Topology> t = Topology::Explicit(num_nodes, roots);
  if (!t.ok()) return Error(field->key_node, tree_path, t.status().message());
  cluster->topology = *std::move(t);
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseClusterNetwork(absl::string_view source,
                                 const yaml::Field* field,
                                 const YAML::Node& root, Cluster* cluster) {
  return NetworkParser(source).ParseNetwork(field, root, cluster);
}

}  // namespace loom::internal
