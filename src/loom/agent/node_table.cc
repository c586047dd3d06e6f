#include "loom/agent/node_table.h"

#include <sys/stat.h>

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/data_dir.h"
#include "loom/agent/dataset_filler.h"
#include "loom/agent/emulated_mig_control.h"
#include "loom/agent/fake_task_launcher.h"
#include "loom/agent/json_values.h"
#include "loom/agent/shim_task_launcher.h"
#include "loom/common/atomic_file.h"

namespace loom {
namespace {

// `status` with "node NAME: " before its message.
absl::Status InNode(const AgentNode& node, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("node ", node.name, ": ",
                                                  Str(status.message())));
}

// What container tasks need of a node: its image store and, for emulated
// GPUs, stand-in device files (`AgentNode::device_dir`).
absl::Status InitContainers(const NodeTableOptions& options,
                            const AgentLog& log, AgentNode& node) {
  absl::StatusOr<std::unique_ptr<image::ImageStore>> store =
      image::ImageStore::Open({.root = absl::StrCat(node.root, "/images"),
                               .budget_bytes = options.image_budget_bytes},
                              options.image_source);
  if (!store.ok()) return store.status();
  node.images = *std::move(store);
  node.prepulls =
      std::make_unique<ImagePrepulls>(node.images.get(), node.name, log);
  if (!node.emulated) return absl::OkStatus();
  node.device_dir = absl::StrCat(node.root, "/dev");
  if (absl::Status s = EnsureDirectory(node.device_dir, kAgentDirMode);
      !s.ok()) {
    return s;
  }
  std::vector<std::string> names = {"nvidiactl", "nvidia-uvm"};
  for (const GpuDevice& g : node.gpus) {
    names.push_back(absl::StrCat("nvidia", g.index));
  }
  // The emulated NICs' verbs devices (nic_step.h).
  if (!node.nics.empty()) {
    if (absl::Status s = EnsureDirectory(
            absl::StrCat(node.device_dir, "/infiniband"), kAgentDirMode);
        !s.ok()) {
      return s;
    }
    names.push_back("infiniband/rdma_cm");
  }
  for (const NicDevice& nic : node.nics) {
    if (!nic.uverbs.empty()) {
      names.push_back(absl::StrCat("infiniband/", nic.uverbs));
    }
  }
  for (const std::string& name : names) {
    const std::string path = absl::StrCat(node.device_dir, "/", name);
    if (absl::Status s = WriteFileAtomically(
            path,
            absl::StrCat("stand-in for /dev/", name, " of emulated node ",
                         node.name, "\n"),
            0666);
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

// A node's directories, GPUs and launcher.
absl::Status InitNode(const NodeTableOptions& options, const HostInfo& host,
                      const std::vector<GpuDevice>& real_gpus,
                      const AgentLog& log, AgentNode& node) {
  node.root = options.fleet
                  ? absl::StrCat(options.data_dir, "/nodes/", node.name)
                  : options.data_dir;
  node.tasks_dir = absl::StrCat(node.root, "/tasks");
  node.units_dir = options.fake_tasks ? "" : absl::StrCat(node.root, "/units");
  node.logs_dir = absl::StrCat(node.root, "/logs");
  // Modes: data_dir.h.
  const std::pair<std::string, mode_t> dirs[] = {
      {options.fleet ? absl::StrCat(options.data_dir, "/nodes") : "",
       kAgentDirMode},
      {node.root, kAgentDirMode},
      {node.tasks_dir, kPrivateDirMode},
      {node.units_dir, kPrivateDirMode},
      {node.logs_dir, kPrivateDirMode}};
  for (const auto& [dir, mode] : dirs) {
    if (dir.empty()) continue;
    if (absl::Status s = EnsureDirectory(dir, mode); !s.ok()) {
      return InNode(node, s);
    }
  }
  node.host = host;
  if (options.emulation) {
    const GpuEmulation& e = *options.emulation;
    EmulatedGpuProbe probe(e, node.name);
    node.gpus = probe.Probe().value();
    node.nics = EmulatedNicProbe(e).Probe(node.gpus).value();
    node.mig =
        std::make_shared<EmulatedMigControl>(node.name, node.gpus, e.mig_log);
    node.SetSoftware(probe.Software());
    node.emulated = true;
    if (e.cpus > 0) node.host.cpus = e.cpus;
    if (e.memory_bytes > 0) node.host.memory_bytes = e.memory_bytes;
  } else {
    node.gpus = real_gpus;
    node.nics = options.real_nics;
    node.mig = options.real_mig;
    node.SetSoftware(options.real_software);
  }

  if (options.launcher_factory) {
    absl::StatusOr<std::unique_ptr<TaskLauncher>> launcher =
        options.launcher_factory(node.name, node.tasks_dir);
    if (!launcher.ok()) return launcher.status();
    node.launcher = std::move(*launcher);
  } else if (options.fake_tasks) {
    FakeTaskLauncherOptions fake;
    if (options.now) fake.now = options.now;
    node.launcher = std::make_unique<FakeTaskLauncher>(std::move(fake));
  } else {
    if (options.use_cgroups) {
      node.cgroups = std::make_unique<CgroupV1Manager>();
      auto groups = TaskGroups::Create(node.tasks_dir);
      if (groups.ok()) node.groups = *std::move(groups);
      if (!groups.ok()) log("info", node.name, NoGroupsNote(groups.status()));
    }
    ShimTaskLauncherOptions shim;
    shim.state_dir = node.tasks_dir;
    shim.cgroups = node.cgroups.get();
    shim.groups = node.groups.get();
    if (options.now) shim.now = options.now;
    shim.lease_path = LeasePath(node);
    absl::StatusOr<std::unique_ptr<ShimTaskLauncher>> launcher =
        ShimTaskLauncher::Create(std::move(shim));
    if (!launcher.ok()) return launcher.status();
    node.launcher = std::move(*launcher);
  }
  if (options.image_source != nullptr && !options.fake_tasks) {
    if (absl::Status s = InitContainers(options, log, node); !s.ok()) {
      return InNode(node, s);
    }
  }
  if (!options.fake_tasks) {
    // Root's alone (an older agent's 0711 is tightened): a task sees its
    // versions only through the bind its launch makes (data_step.h), so a
    // user reads a cached copy only in a job allowed to read its source.
    const std::string dir = absl::StrCat(node.root, "/datasets");
    if (absl::Status s = EnsureDirectory(dir, kPrivateDirMode); !s.ok()) {
      return InNode(node, s);
    }
    if (options.dataset_filler) {
      node.dataset_filler = options.dataset_filler(node.name);
    } else {
      node.dataset_filler = std::make_unique<RcloneDatasetFiller>(
          RcloneDatasetFillerOptions{.config = options.rclone_config});
    }
    node.datasets = std::make_unique<DatasetCache>(
        DatasetCacheOptions{dir, options.dataset_cache_bytes},
        node.dataset_filler.get());
    node.dataset_prefetches = std::make_unique<DatasetPrefetches>(
        node.datasets.get(), node.name, log);
  }
  return absl::OkStatus();
}

}  // namespace

bool ValidNodeName(std::string_view name) {
  if (name.empty() || name.size() > 253) return false;
  if (!absl::ascii_isalnum(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
           c == '_' || c == '-';
  });
}

absl::StatusOr<std::unique_ptr<NodeTable>> NodeTable::Create(
    const NodeTableOptions& options, const std::vector<std::string>& names,
    const HostInfo& host, const std::vector<GpuDevice>& real_gpus,
    const AgentLog& log) {
  std::unique_ptr<NodeTable> table(new NodeTable());
  for (const std::string& name : names) {
    auto node = std::make_unique<AgentNode>();
    node->index = table->nodes_.size();
    node->name = name;
    if (absl::Status s = InitNode(options, host, real_gpus, log, *node);
        !s.ok()) {
      return s;
    }
    table->by_name_[name] = node.get();
    table->nodes_.push_back(std::move(node));
  }
  return table;
}

std::vector<std::string> NodeTable::names() const {
  std::vector<std::string> names;
  names.reserve(nodes_.size());
  for (const auto& n : nodes_) names.push_back(n->name);
  return names;
}

absl::StatusOr<AgentNode*> NodeTable::Resolve(const std::string& name) const {
  if (name.empty()) {
    if (nodes_.size() == 1) return nodes_.front().get();
    return absl::InvalidArgumentError(absl::StrCat(
        "node: this agent serves ", nodes_.size(),
        " emulated nodes; name one (\"node\" in the body or ?node=NAME)"));
  }
  auto it = by_name_.find(name);
  if (it == by_name_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "this agent does not serve node '", name, "' (it serves ",
        nodes_.size() <= 4
            ? absl::StrJoin(names(), ", ")
            : absl::StrCat(nodes_.size(), " nodes: ", nodes_.front()->name,
                           " .. ", nodes_.back()->name),
        ")"));
  }
  return it->second;
}

absl::StatusOr<std::vector<AgentNode*>> NodeTable::Select(
    const std::string& name) const {
  std::vector<AgentNode*> out;
  if (name.empty()) {
    for (const auto& node : nodes_) out.push_back(node.get());
    return out;
  }
  absl::StatusOr<AgentNode*> node = Resolve(name);
  if (!node.ok()) return node.status();
  out.push_back(*node);
  return out;
}

absl::StatusOr<AgentNode*> NodeTable::ForTask(
    const std::string& name, const std::string& task_id) const {
  if (!name.empty() || nodes_.size() == 1) return Resolve(name);
  for (const auto& node : nodes_) {
    absl::MutexLock lock(&node->mu);
    if (node->units.contains(task_id)) return node.get();
  }
  for (const auto& node : nodes_) {
    struct stat st;
    if (::stat(TaskLogPath(*node, task_id, 0, false).c_str(), &st) == 0) {
      return node.get();
    }
  }
  return absl::NotFoundError(absl::StrCat(
      "task ", task_id, " is not known on any node of this agent"));
}

}  // namespace loom
