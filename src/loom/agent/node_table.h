#pragma once

// The nodes an agent serves, by name: one for a real agent, up to thousands
// for the fleet emulator (`--emulate-nodes`). Made once, at start, with each
// node's directories, GPUs and launcher; never changed after.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/nic_probe.h"

namespace loom {

struct NodeTableOptions {
  // Each node's files are under `<data_dir>/nodes/<name>/` with `fleet`,
  // else under `<data_dir>/`.
  std::string data_dir;
  bool fleet = false;
  // Emulated GPUs; unset: the host's (`real_gpus` of `Create`).
  std::optional<GpuEmulation> emulation;
  // The host's GPU driver and CUDA versions (real GPUs only).
  GpuSoftware real_software;
  // The host's RDMA NICs, paired with its GPUs (real GPUs only; emulated
  // nodes get `EmulatedNicProbe`'s).
  std::vector<NicDevice> real_nics;
  // MIG of the host's GPUs (real GPUs only; emulated nodes get an
  // `EmulatedMigControl` each); null: none.
  std::shared_ptr<MigControl> real_mig;
  // `FakeTaskLauncher` instead of `ShimTaskLauncher`; no unit files.
  bool fake_tasks = false;
  // cgroup v1 limits and a cgroup v2 group per task, where the host allows.
  bool use_cgroups = true;
  // Null: the launcher `fake_tasks` picks.
  TaskLauncherFactory launcher_factory;
  // The clock of the launchers; null: theirs (`absl::Now`).
  std::function<absl::Time()> now;
  // Where the nodes pull container images from (registries); null: no
  // image store, no container tasks. Outlives the table.
  image::ImageSource* image_source = nullptr;
  // Each node's image store's budget (blobs and root filesystems); 0: none.
  int64_t image_budget_bytes = 0;
  // Each node's dataset cache (`<root>/datasets`; not with `fake_tasks`):
  // its budget and the rclone config it fills with.
  int64_t dataset_cache_bytes = int64_t{100} << 30;
  std::string rclone_config;
  // Tests: what fills each node's dataset cache instead of rclone; null:
  // rclone (`RcloneDatasetFiller`).
  std::function<std::unique_ptr<DatasetFiller>(const std::string& node)>
      dataset_filler;
};

// Letters, digits, '-', '_' and '.', starting with a letter or digit.
bool ValidNodeName(std::string_view name);

// Thread-safe: constant after `Create` (the nodes themselves guard their
// task tables).
class NodeTable {
 public:
  // Makes the nodes `names` (valid, distinct, at least one): their
  // directories (modes: data_dir.h), GPUs and launchers. Errors from the
  // file system (naming the node) or the launcher's own.
  static absl::StatusOr<std::unique_ptr<NodeTable>> Create(
      const NodeTableOptions& options, const std::vector<std::string>& names,
      const HostInfo& host, const std::vector<GpuDevice>& real_gpus,
      const AgentLog& log);

  const std::vector<std::unique_ptr<AgentNode>>& nodes() const {
    return nodes_;
  }
  size_t size() const { return nodes_.size(); }
  std::vector<std::string> names() const;

  // The node `name`; "" names the only node of a one-node agent.
  // `InvalidArgument` for "" on a fleet, `NotFound` for a name not served.
  absl::StatusOr<AgentNode*> Resolve(const std::string& name) const;
  // The named node, or every node when `name` is "".
  absl::StatusOr<std::vector<AgentNode*>> Select(const std::string& name) const;
  // The node of task `task_id`: the named one, else the node that knows the
  // task or has its log. `NotFound` when none does.
  absl::StatusOr<AgentNode*> ForTask(const std::string& name,
                                     const std::string& task_id) const;

 private:
  NodeTable() = default;

  std::vector<std::unique_ptr<AgentNode>> nodes_;
  std::map<std::string, AgentNode*, std::less<>> by_name_;
};

}  // namespace loom
