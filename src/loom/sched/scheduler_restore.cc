// Scheduler::Restore: a restarted controller re-instating running jobs.

#include <algorithm>
#include <bit>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"

namespace loom {
namespace {

// Whether the slice task `t` can be had on its GPU now: the GPU whole and
// free, or of the task's kind with the instance free (or room to create it
// beside the instances in use), or the share's memory left.
absl::Status CheckSliceFree(const ClusterState& state, const TaskPlacement& t) {
  if (!t.partial() || t.slice_gpu >= state.NodeGpus(t.node) ||
      t.gpu_mask != 0) {
    return absl::InvalidArgumentError("not a slice of one of its GPUs");
  }
  const GpuPart& part = state.Part(t.node, t.slice_gpu);
  const bool mig = t.mig_profile >= 0;
  if (mig &&
      t.mig_profile >= static_cast<int>(state.MigProfilesOn(t.node).size())) {
    return absl::InvalidArgumentError(
        "the node's GPUs have no such MIG profile");
  }
  if (part.mode == GpuMode::kWhole) {
    if (!((state.FreeMask(t.node) >> t.slice_gpu) & 1)) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", t.slice_gpu, " is not free"));
    }
    return absl::OkStatus();
  }
  if (mig != (part.mode == GpuMode::kMig)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "GPU ", t.slice_gpu, " is ", mig ? "shared" : "MIG-partitioned"));
  }
  if (!mig) {
    if (part.capacity - part.used < t.share_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("GPU ", t.slice_gpu, " has no room for the share"));
    }
    return absl::OkStatus();
  }
  const std::vector<MigProfile>& profiles = state.MigProfilesOn(t.node);
  if (t.mig_profile >= static_cast<int>(profiles.size())) {
    return absl::InvalidArgumentError("unknown MIG profile");
  }
  std::vector<MigInstance> in_use = {{t.mig_profile, t.mig_start}};
  for (size_t i = 0; i < part.layout.size(); ++i) {
    if (part.owners[i] != 0) in_use.push_back(part.layout[i]);
  }
  if (!ValidateMigLayout(profiles, in_use).ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("MIG instance at slice ", t.mig_start, " of GPU ",
                     t.slice_gpu, " is not free"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Scheduler::Restore(const JobRequest& job,
                                const Placement& placement,
                                absl::Time start_time,
                                double attained_gpu_seconds, absl::Time now) {
  if (absl::Status st = ValidateJobRequest(job, *cluster_); !st.ok()) return st;
  if (jobs_.contains(job.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job.id, " is already known to the scheduler"));
  }
  const JobShape& shape = job.shape;
  if (static_cast<int>(placement.tasks.size()) != shape.tasks) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", job.id, ": placement has ", placement.tasks.size(),
                     " tasks, the job ", shape.tasks));
  }
  // Check every task against the free GPUs, counting tasks that share a node.
  absl::flat_hash_map<int, uint32_t> taken;
  for (const TaskPlacement& t : placement.tasks) {
    if (t.node < 0 || t.node >= state_->num_nodes()) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.id, ": node ", t.node, " does not exist"));
    }
    const std::string& name = cluster_->nodes[t.node].name;
    if (state_->NodeModel(t.node) != placement.gpu_model ||
        (shape.gpu_model != kAnyGpuModel &&
         shape.gpu_model != placement.gpu_model)) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id, ": node ", name, " has the wrong GPU model"));
    }
    if (shape.slice.partial()) {
      if (absl::Status st = CheckSliceFree(*state_, t); !st.ok()) {
        return absl::FailedPreconditionError(absl::StrCat(
            "job ", job.id, ": a task on ", name, ": ", st.message()));
      }
      continue;
    }
    if (std::popcount(t.gpu_mask) != shape.gpus_per_task) {
      return absl::FailedPreconditionError(absl::StrCat(
          "job ", job.id, ": a task on ", name, " has ",
          std::popcount(t.gpu_mask), " GPUs, not ", shape.gpus_per_task));
    }
    uint32_t& used = taken[t.node];
    if ((t.gpu_mask & ~state_->FreeMask(t.node)) != 0 || (used & t.gpu_mask)) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", job.id, ": a GPU on ", name, " is not free"));
    }
    used |= t.gpu_mask;
  }
  SchedJob& sj = jobs_[job.id];
  sj.request = job;
  sj.project = InternProject(job.project);
  sj.selector = node_labels_.Intern(job.node_selector);
  sj.placement = placement;
  DescribePlacement(cluster_->topology, &sj.placement);
  sj.phase = JobPhase::kRunning;
  sj.start_time = start_time;
  sj.queued_since = job.submit_time;
  sj.expected_end = job.time_limit == absl::InfiniteDuration()
                        ? absl::InfiniteFuture()
                        : start_time + job.time_limit;
  sj.attained_gpu_seconds = attained_gpu_seconds;
  sj.runs = 1;
  Accrue(sj.project, now);
  projects_[sj.project].running_gpus += shape.TotalGpus();
  state_->Allocate(job.id, sj.placement, shape, sj.expected_end);
  running_count_ += 1;
  policy_->Started(sj);
  if (job.spares > 0 &&
      state_->NodeGpus(sj.placement.tasks[0].node) == shape.gpus_per_task) {
    NodeMask own(state_->num_nodes());
    for (const TaskPlacement& t : sj.placement.tasks) own.Insert(t.node);
    for (int n : job.spare_nodes) {
      if (static_cast<int>(sj.spare_nodes.size()) < job.spares &&
          SpareEligible(sj, sj.placement.gpu_model, n, &own)) {
        AddSpare(sj, n);
        own.Insert(n);
      }
    }
    if (static_cast<int>(sj.spare_nodes.size()) < job.spares) {
      short_of_spares_.insert(job.id);
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
