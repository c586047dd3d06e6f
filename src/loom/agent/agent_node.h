#pragma once

// One node an agent serves: its files, its inventory, its launcher and its
// task table. A real agent serves one; the fleet emulator many, in one
// process (node_table.h). The parts of the agent (docs/agent.md) share
// nodes through `AgentNode&`; each keeps its own per-node state (the
// session's heartbeat schedule, for one) itself.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/cgroup.h"
#include "loom/agent/dataset_cache.h"
#include "loom/agent/dataset_prefetch.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/image_prepull.h"
#include "loom/agent/mig_control.h"
#include "loom/agent/nic_probe.h"
#include "loom/agent/task_group.h"
#include "loom/agent/task_launcher.h"
#include "loom/agent/task_state.h"
#include "loom/image/image_store.h"

namespace loom {

// Makes a `TaskLauncher` for the node `node` whose launcher state lives in
// `state_dir` (tests wrap the real one to inject failures).
using TaskLauncherFactory =
    std::function<absl::StatusOr<std::unique_ptr<TaskLauncher>>(
        const std::string& node, const std::string& state_dir)>;

struct AgentNode {
  // Constant once the node table is made.
  size_t index = 0;  // in the node table
  std::string name;
  std::string root;       // `<data_dir>` or `<data_dir>/nodes/<name>`
  std::string tasks_dir;  // the launcher's state
  std::string units_dir;  // empty: multi-process tasks are not persisted
  std::string logs_dir;
  HostInfo host;
  std::vector<GpuDevice> gpus;
  // RDMA NICs, each with the GPUs paired with it (nic_probe.h).
  std::vector<NicDevice> nics;
  bool emulated = false;
  // Makes and reads its GPUs' MIG layouts (mig_control.h); null: none (a
  // MIG launch is refused). Thread-safe.
  std::shared_ptr<MigControl> mig;
  std::unique_ptr<CgroupManager> cgroups;
  // A cgroup v2 group per task (task_group.h); null: process groups only.
  std::unique_ptr<TaskGroups> groups;
  // Thread-safe.
  std::unique_ptr<TaskLauncher> launcher;
  // The node's container images (`<root>/images`); null: the agent runs no
  // container tasks. Declared before the task table, whose units hold
  // images: it outlives them.
  std::unique_ptr<image::ImageStore> images;
  // The node's dataset cache (`<root>/datasets`, dataset_cache.h) and
  // what fills it; null: none (a launch with `data` is refused).
  std::unique_ptr<DatasetFiller> dataset_filler;
  std::unique_ptr<DatasetCache> datasets;
  // Fills the server asks for ahead of a task (`POST /v1/datasets/
  // prefetch`, dataset_prefetch.h); with `datasets`. Declared after it:
  // its threads end before the cache goes.
  std::unique_ptr<DatasetPrefetches> dataset_prefetches;
  // Pulls asked for ahead of tasks (`loom image pull`); with `images`.
  std::unique_ptr<ImagePrepulls> prepulls;
  // Where the node's GPU device files are: /dev, or for emulated GPUs
  // `<root>/dev`, with stand-in files (nvidia0, ..., nvidiactl) that a
  // container task gets as it would real ones.
  std::string device_dir = "/dev";

  // The task table (task_runner.h changes it).
  absl::Mutex mu;
  std::map<std::string, TaskUnit> units ABSL_GUARDED_BY(mu);
  // launcher id -> (task id, process index)
  std::map<std::string, std::pair<std::string, int>> by_launcher_id
      ABSL_GUARDED_BY(mu);

  // The GPU driver and CUDA versions (emulated: `GpuEmulation`'s), for the
  // node's labels and stack. Read again when a maintenance command ends
  // (maintenance_runner.h), so guarded: thread-safe.
  GpuSoftware Software() const {
    absl::MutexLock lock(&software_mu);
    return software;
  }
  void SetSoftware(GpuSoftware s) {
    absl::MutexLock lock(&software_mu);
    software = std::move(s);
  }
  mutable absl::Mutex software_mu;
  GpuSoftware software ABSL_GUARDED_BY(software_mu);

  // Injected faults (fault_injector.h).
  std::atomic<bool> drop_heartbeats{false};
  std::atomic<uint32_t> failed_gpus{0};  // bit i: emulated GPU i failed

  // GPUs whose change of MIG mode waits (bit i: GPU i), as a launch found
  // (mig_step.h): the node takes no new work while any does, and the
  // health monitor's rounds ask again (`SettleMigModes`). Mutable: the
  // launch steps see the node as const.
  mutable std::atomic<uint32_t> mig_waits{0};
  // Of those, the GPUs whose MIG mode is to go off (for a task that uses
  // the GPU whole): asked for again until it is off.
  mutable std::atomic<uint32_t> mig_wants_off{0};
};

// `<node>/lease`: the send time of the last answered heartbeat and the fence
// limit (lease.h).
inline std::string LeasePath(const AgentNode& node) {
  return absl::StrCat(node.root, "/lease");
}

// The unit file of a task of several processes (unit_file.h).
inline std::string UnitPath(const AgentNode& node, const std::string& task_id) {
  return absl::StrCat(node.units_dir, "/", task_id, ".json");
}

// Where process `k` of task `task_id` writes its output.
inline std::string TaskLogPath(const AgentNode& node,
                               const std::string& task_id, int k,
                               bool stderr_stream) {
  return absl::StrCat(node.logs_dir, "/", task_id,
                      k == 0 ? "" : absl::StrCat(".p", k),
                      stderr_stream ? ".err" : ".out");
}

}  // namespace loom
