#include "loom/core/job.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/core/labels.h"

namespace loom {

std::string_view JobKindName(JobKind kind) {
  switch (kind) {
    case JobKind::kTrain:
      return "train";
    case JobKind::kFinetune:
      return "finetune";
    case JobKind::kInference:
      return "inference";
    case JobKind::kBatch:
      return "batch";
  }
  return "batch";
}

absl::StatusOr<JobKind> ParseJobKind(std::string_view name) {
  if (name == "train") return JobKind::kTrain;
  if (name == "finetune") return JobKind::kFinetune;
  if (name == "inference") return JobKind::kInference;
  if (name == "batch") return JobKind::kBatch;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown job kind '", std::string(name),
                   "' (use train, finetune, inference or batch)"));
}

absl::StatusOr<JobShape> ShapeFromTotalGpus(int total_gpus, int gpus_per_node,
                                            int nodes) {
  if (total_gpus <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("gpus: must be positive, got ", total_gpus));
  }
  if (gpus_per_node <= 0) {
    return absl::InvalidArgumentError("gpus per node must be positive");
  }
  JobShape shape;
  if (nodes > 0) {
    if (total_gpus % nodes != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpus: ", total_gpus,
                       " GPUs cannot be spread evenly over ", nodes, " nodes"));
    }
    shape.tasks = nodes;
    shape.gpus_per_task = total_gpus / nodes;
    shape.one_task_per_node = nodes > 1;
    return shape;
  }
  if (nodes < 0) {
    return absl::InvalidArgumentError("nodes: must not be negative");
  }
  if (total_gpus <= gpus_per_node) {
    shape.tasks = 1;
    shape.gpus_per_task = total_gpus;
    return shape;
  }
  if (total_gpus % gpus_per_node != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpus: ", total_gpus,
        " GPUs is more than one node and not a multiple "
        "of ",
        gpus_per_node, " GPUs per node; give --nodes or use whole nodes"));
  }
  shape.tasks = total_gpus / gpus_per_node;
  shape.gpus_per_task = gpus_per_node;
  return shape;
}

absl::Status ValidateJobRequest(const JobRequest& job, const Cluster& cluster) {
  for (const auto& [key, value] : job.node_selector) {
    if (!IsValidLabelKey(key)) {
      return absl::InvalidArgumentError(
          absl::StrCat("node_selector: '", key, "' is not a valid label name"));
    }
  }
  const JobShape& s = job.shape;
  if (s.tasks <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tasks: must be positive, got ", s.tasks));
  }
  if (s.gpus_per_task < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("resources.gpus_per_task: must not be negative, got ",
                     s.gpus_per_task));
  }
  if (s.gpus_per_task > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrCat(
        "resources.gpus_per_task: ", s.gpus_per_task,
        " is more than any node can hold (", kMaxGpusPerNode, ")"));
  }
  if (s.tasks > 1000000) {
    return absl::InvalidArgumentError(
        absl::StrCat("tasks: ", s.tasks, " is absurd"));
  }
  if (s.gpu_model != kAnyGpuModel &&
      (s.gpu_model < 0 ||
       s.gpu_model >= static_cast<int>(cluster.gpu_models.size()))) {
    return absl::InvalidArgumentError("resources.gpu_model: unknown model");
  }
  if (s.cpus_milli_per_task < 0) {
    return absl::InvalidArgumentError(
        "resources.cpus_per_task: must not be negative");
  }
  if (s.nics_per_task < 0 || s.nics_per_task > 1024) {
    return absl::InvalidArgumentError(
        "resources.nics_per_task: must be 0 to 1024");
  }
  if (s.memory_bytes_per_task < 0) {
    return absl::InvalidArgumentError(
        "resources.memory_per_task: must not be negative");
  }
  if (job.time_limit <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("time_limit: must be positive");
  }
  if (s.slice.partial()) {
    if (!s.slice.mig.empty() && s.slice.share_bytes > 0) {
      return absl::InvalidArgumentError(
          "resources: mig and gpu_share exclude each other (a MIG instance "
          "is not shared)");
    }
    if (s.slice.share_bytes < 0) {
      return absl::InvalidArgumentError(
          "resources.gpu_share.memory: must be positive");
    }
    if (s.gpus_per_task != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "resources: a task on part of a GPU (mig or gpu_share) takes one "
          "slice, not ",
          s.gpus_per_task, " GPUs"));
    }
    if (job.spares > 0) {
      return absl::InvalidArgumentError(
          "spares: only for jobs of whole nodes, not of GPU slices");
    }
  }
  if (job.spares < 0 || job.spares > kMaxSpares) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spares: must be 0 to ", kMaxSpares, ", got ", job.spares));
  }
  if (job.spares > 0) {
    // A spare stands in for a node of the job: only whole-node tasks can
    // move onto one (the largest node of a model the job may run on).
    std::vector<int> most(cluster.gpu_models.size(), 0);
    for (const NodeSpec& n : cluster.nodes) {
      if (n.gpu_model >= 0 && n.gpu_model < static_cast<int>(most.size())) {
        most[n.gpu_model] = std::max(most[n.gpu_model], n.gpus);
      }
    }
    bool whole = false;
    for (size_t m = 0; m < most.size(); ++m) {
      whole = whole || ((s.gpu_model == kAnyGpuModel ||
                         s.gpu_model == static_cast<int>(m)) &&
                        most[m] == s.gpus_per_task);
    }
    if (!whole) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spares: only for jobs whose tasks take whole nodes (each task "
          "as many GPUs as a node has); this job's tasks take ",
          s.gpus_per_task, " GPU(s)"));
    }
  }
  const int nodes = static_cast<int>(cluster.nodes.size());
  if (!job.last_nodes.empty() &&
      static_cast<int>(job.last_nodes.size()) != s.tasks) {
    return absl::InvalidArgumentError(
        absl::StrCat("last_nodes: ", job.last_nodes.size(),
                     " entries for a job of ", s.tasks, " tasks"));
  }
  for (int n : job.last_nodes) {
    if (n < -1 || n >= nodes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "last_nodes: node ", n, " does not exist (the cluster has ", nodes,
          " nodes; -1 marks a lost one)"));
    }
  }
  for (int n : job.spare_nodes) {
    if (n < 0 || n >= nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("spare_nodes: node ", n,
                       " does not exist (the cluster has ", nodes, " nodes)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
