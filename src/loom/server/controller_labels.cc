// Node labels and software drift (docs/scheduling.md, "Labels and
// selectors"; docs/cluster-spec.md, "stack"): what an agent reports of
// itself, merged with what the cluster spec declares and the topology, for
// the scheduler's node selectors; and the node's software stack against its
// pool's, which makes a node `drifted` (no new work) when they differ.

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/labels.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

// The most of what an agent says of itself that the server keeps.
constexpr size_t kMaxReportedLabels = 64;
constexpr size_t kMaxLabelValue = 256;
constexpr size_t kMaxStackValue = 64;

// The string entries of a JSON object whose key `valid_key` accepts, at
// most `max_entries` of at most `max_value` bytes; anything else is
// dropped.
template <typename ValidKey>
std::map<std::string, std::string> StringMap(const nlohmann::json& j,
                                             ValidKey valid_key,
                                             size_t max_entries,
                                             size_t max_value) {
  std::map<std::string, std::string> out;
  if (!j.is_object()) return out;
  for (auto it = j.begin(); it != j.end() && out.size() < max_entries; ++it) {
    if (!it.value().is_string() || !valid_key(it.key())) continue;
    const std::string& value = it.value().get_ref<const std::string&>();
    if (value.size() > max_value) continue;
    out[it.key()] = value;
  }
  return out;
}

bool IsStackKey(const std::string& key) {
  for (std::string_view k : kStackKeys) {
    if (k == key) return true;
  }
  return false;
}

}  // namespace

std::map<std::string, std::string> Controller::EffectiveLabels(int n) const {
  const NodeSpec& spec = cluster_->nodes[n];
  const Topology& topo = cluster_->topology;
  std::map<std::string, std::string> labels = nodes_[n].reported_labels;
  labels[kLabelPool] = cluster_->pools[spec.pool].name;
  if (n < topo.num_nodes()) {
    labels[kLabelLeaf] = topo.sw(topo.leaf_of(n)).name;
    if (topo.num_levels() >= 2) {
      labels[kLabelSpine] = topo.sw(topo.AncestorAt(n, 2)).name;
    }
  }
  // What the operator declared wins over what the node says.
  for (const auto& [key, value] : spec.labels) labels[key] = value;
  return labels;
}

void Controller::ApplyLabels(int n, const nlohmann::json& body,
                             bool registering) {
  Node& node = nodes_[n];
  auto labels = body.find("labels");
  if (labels != body.end()) {
    node.reported_labels = StringMap(
        *labels, [](const std::string& k) { return IsValidLabelKey(k); },
        kMaxReportedLabels, kMaxLabelValue);
  } else if (registering) {
    node.reported_labels.clear();
  }
  auto stack = body.find("stack");
  if (stack != body.end()) {
    node.stack =
        StringMap(*stack, IsStackKey, std::size(kStackKeys), kMaxStackValue);
  } else if (registering) {
    node.stack.clear();
  }
  // Heartbeats carry the stack, not the labels: the version labels follow
  // the stack, so that a node upgraded in place is selected by its new
  // driver at once.
  for (const auto& [key, label] :
       {std::pair{"driver", "gpu.driver"}, std::pair{"cuda", "gpu.cuda"}}) {
    if (auto it = node.stack.find(key); it != node.stack.end()) {
      node.reported_labels[label] = it->second;
    }
  }
  scheduler_->SetNodeLabels(n, EffectiveLabels(n));
  UpdateDrift(n);
}

void Controller::UpdateDrift(int n) {
  Node& node = nodes_[n];
  if (node.state == Node::State::kUnknown && node.stack.empty()) {
    return;  // it has said nothing yet
  }
  const std::map<std::string, std::string>& declared =
      cluster_->pools[cluster_->nodes[n].pool].stack;
  std::vector<std::string> drift = StackDrift(declared, node.stack);
  std::vector<std::string> outdated;
  if (drift.empty()) {
    // In line with its pool: what it runs of the declared keys is accepted.
    std::map<std::string, std::string> accepted;
    for (const auto& [key, value] : declared) accepted[key] = value;
    if (accepted != node.accepted_stack) {
      node.accepted_stack = std::move(accepted);
      (void)PersistNode(n);
    }
  } else if (!node.accepted_stack.empty() &&
             std::all_of(node.accepted_stack.begin(), node.accepted_stack.end(),
                         [&](const auto& kv) {
                           auto it = node.stack.find(kv.first);
                           return it != node.stack.end() &&
                                  it->second == kv.second;
                         })) {
    // Unchanged since it was in line: the declaration moved, not the node.
    outdated = std::move(drift);
    drift.clear();
  }
  node.outdated = std::move(outdated);
  if (drift != node.drift) {
    node.drift = std::move(drift);
    UpdateSchedulable(n);
  }
}

std::string Controller::DriftReason(int n) const {
  return absl::StrCat("drifted: ", absl::StrJoin(nodes_[n].drift, "; "));
}

}  // namespace loom
