// Nodes as the API shows them (and where their agents are), and an
// operator's cordon, uncordon and drain (docs/api.md).

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/server/controller.h"
#include "loom/server/task_slice.h"

namespace loom {
namespace {

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

}  // namespace

std::string Controller::NodeHost(const std::string& node) const {
  const int n = NodeIndex(node);
  return n >= 0 ? HostOf(nodes_[n].address) : std::string();
}

absl::StatusOr<std::string> Controller::NodeAddress(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  if (nodes_[n].address.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", name, " has never registered: no agent address"));
  }
  return nodes_[n].address;
}

std::string Controller::NodeStateName(int n) const {
  const Node& node = nodes_[n];
  if (node.state == Node::State::kDown) return "down";
  if (node.state == Node::State::kUnknown) return "unknown";
  if (node.suspect) return "suspect";
  if (node.draining) {
    return scheduler_->JobsOnNode(n).empty() ? "drained" : "draining";
  }
  // Cordoned by its agent while a change of MIG mode waits.
  if (node.cordoned || !node.mig_waits.empty()) return "cordoned";
  if (!node.drift.empty()) return "drifted";
  return "up";
}

nlohmann::json Controller::NodeJson(int n, absl::Time now) const {
  const NodeSpec& spec = cluster_->nodes[n];
  const Node& node = nodes_[n];
  const std::vector<JobId> jobs = scheduler_->JobsOnNode(n);
  const std::string state = NodeStateName(n);
  std::string reason = node.reason;
  if (node.suspect) {
    reason = absl::StrCat("no heartbeat for ",
                          FormatDurationShort(now - node.last_heartbeat));
  } else if (state == "drifted") {
    reason = DriftReason(n);
  } else if (state == "cordoned" && !node.cordoned) {
    reason = absl::StrCat(
        node.mig_waits.size() == 1 ? "GPU " : "GPUs ",
        absl::StrJoin(node.mig_waits, ", "),
        ": a change of MIG mode waits until the GPU is idle or reset "
        "(another process may hold it open); its agent asks again every "
        "health round, and the node takes no new work until then");
  } else if (state == "up" && !node.outdated.empty()) {
    reason = absl::StrCat("outdated: ", absl::StrJoin(node.outdated, "; "),
                          " (an upgrade is due; it keeps working)");
  }
  return {{"name", spec.name},
          {"state", state},
          {"reason", reason},
          {"health", node.health},
          {"mig_waits", node.mig_waits},
          {"address", node.address},
          {"hostname", node.hostname},
          {"pool", cluster_->pools[spec.pool].name},
          {"gpu_model", cluster_->gpu_models[spec.gpu_model].name},
          {"gpus", spec.gpus},
          {"gpus_allocated", spec.gpus - scheduler_->state().FreeGpus(n)},
          {"gpu_parts", GpuPartsJson(scheduler_->state(), n)},
          {"cpus", spec.cpus_milli / 1000.0},
          {"memory_bytes", spec.memory_bytes},
          {"leaf", cluster_->topology.sw(cluster_->topology.leaf_of(n)).name},
          {"emulated", node.emulated},
          {"labels", EffectiveLabels(n)},
          {"stack", node.stack},
          {"drift", node.drift},
          {"outdated", node.outdated},
          {"last_heartbeat",
           node.last_heartbeat == absl::InfinitePast()
               ? nlohmann::json(nullptr)
               : nlohmann::json(FormatTimestamp(node.last_heartbeat))},
          {"jobs", jobs}};
}

nlohmann::json Controller::ListNodes(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (size_t n = 0; n < nodes_.size(); ++n) {
    out.push_back(NodeJson(static_cast<int>(n), now));
  }
  return {{"nodes", std::move(out)}};
}

absl::StatusOr<nlohmann::json> Controller::GetNode(const std::string& name,
                                                   absl::Time now) const {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  return NodeJson(n, now);
}

absl::StatusOr<nlohmann::json> Controller::SetNodeMode(const std::string& name,
                                                       const std::string& op,
                                                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  Node& node = nodes_[n];
  const Node before = node;
  if (op == "cordon") {
    node.cordoned = true;
    node.reason = "cordoned";
  } else if (op == "uncordon") {
    node.cordoned = false;
    node.draining = false;
    node.unhealthy = false;  // drained again if its checks still fail
    node.reason = "";
  } else if (op == "drain") {
    node.draining = true;
    node.reason = "drained by an operator";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown node operation '", op, "'"));
  }
  if (absl::Status st = PersistNode(n); !st.ok()) {
    node = before;
    return st;
  }
  UpdateSchedulable(n);
  return NodeJson(n, now);
}

}  // namespace loom
