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
