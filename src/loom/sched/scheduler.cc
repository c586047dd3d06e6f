#include "loom/sched/scheduler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "loom/core/labels.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler_internal.h"
#include "loom/sched/slice_placement.h"

namespace loom {

using sched_internal::AdvanceUsage;
using sched_internal::SpansNodes;

namespace sched_internal {

bool SpansNodes(const ClusterState& st, const Cluster& c, const JobShape& s) {
  if (s.slice.partial() || s.tasks <= 1) return false;
  int most = 0;
  for (GpuModelId m : CandidateModels(c, s)) {
    most = std::max(most, st.MaxNodeGpus(m));
  }
  return !s.OnOneNode(most);
}

ProjectUsage AdvanceUsage(ProjectUsage u, absl::Time now,
                          absl::Duration half_life) {
  if (u.updated == absl::InfinitePast()) {
    u.updated = now;
    return u;
  }
  const double dt = std::max(0.0, absl::ToDoubleSeconds(now - u.updated));
  u.gpu_seconds += u.running_gpus * dt;
  if (half_life == absl::InfiniteDuration()) {
    u.decayed_gpu_seconds += u.running_gpus * dt;
  } else {
    const double h = absl::ToDoubleSeconds(half_life);
    const double f = std::exp2(-dt / h);
    u.decayed_gpu_seconds = u.decayed_gpu_seconds * f +
                            u.running_gpus * h / std::log(2.0) * (1 - f);
  }
  u.updated = std::max(u.updated, now);
  return u;
}

}  // namespace sched_internal

Scheduler::Scheduler(const Cluster& cluster,
                     std::unique_ptr<QueuePolicy> policy,
                     SchedulerOptions options)
    : cluster_(std::make_unique<const Cluster>(cluster)),
      options_(options),
      policy_(std::move(policy)),
      state_(std::make_unique<ClusterState>(*cluster_,
                                            policy_->UsesReservations())),
      node_labels_(cluster) {
  ApplyProjectSpecs();
}

void Scheduler::ApplyProjectSpecs() {
  for (ProjectUsage& u : projects_) {
    u.weight = 1.0;
    u.quota_gpus = 0;
  }
  for (const ProjectSpec& p : cluster_->projects) {
    int i = InternProject(p.name);
    projects_[i].weight = p.weight > 0 ? p.weight : 1.0;
    projects_[i].quota_gpus = std::max(0, p.quota_gpus);
  }
}

int Scheduler::InternProject(const std::string& name) {
  auto [it, inserted] =
      project_index_.emplace(name, static_cast<int>(projects_.size()));
  if (inserted) {
    ProjectUsage u;
    u.name = name;
    projects_.push_back(u);
  }
  return it->second;
}

void Scheduler::Accrue(int project, absl::Time now) {
  projects_[project] =
      AdvanceUsage(projects_[project], now, options_.usage_half_life);
}

void Scheduler::StartJob(SchedJob& job, Placement placement, absl::Time now,
                         PassResult* result) {
  const JobId id = job.request.id;
  claims_.erase(id);
  prefetched_.erase(id);
  Accrue(job.project, now);
  job.placement = std::move(placement);
  job.phase = JobPhase::kRunning;
  job.start_time = now;
  job.expected_end = job.request.time_limit == absl::InfiniteDuration()
                         ? absl::InfiniteFuture()
                         : now + job.request.time_limit;
  job.runs += 1;
  state_->Allocate(id, job.placement, job.request.shape, job.expected_end);
  projects_[job.project].running_gpus += job.request.shape.TotalGpus();
  pending_count_ -= 1;
  running_count_ += 1;
  result->started.push_back(id);
  policy_->Started(job);
  if (job.request.spares > 0 || !job.spare_nodes.empty()) {
    job.recovery_base.clear();
    recovering_.erase(id);
    // Spares it now runs on (a recovery) are spares no more.
    for (const TaskPlacement& t : job.placement.tasks) {
      if (SpareOwner(t.node) == id) DropSpare(job, t.node);
    }
    TopUpSpares(job);
  }
}

absl::StatusOr<SubmitOutcome> Scheduler::Submit(const JobRequest& job,
                                                absl::Time now) {
  if (absl::Status st = ValidateJobRequest(job, *cluster_); !st.ok()) return st;
  if (job.shape.gpus_per_task < 1) {
    return absl::InvalidArgumentError(
        "resources.gpus_per_task: must be at least 1");
  }
  if (jobs_.contains(job.id)) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", job.id, " is already known to the scheduler"));
  }
  std::string why;
  if (!CouldEverRun(*cluster_, job.shape, &why)) {
    return SubmitOutcome{SubmitOutcome::Kind::kInfeasible, why};
  }
  // A selector no node matches now is not infeasible: agents report labels
  // as they register, so the job waits with its reason
  // (docs/scheduling.md).
  SchedJob& sj = jobs_[job.id];
  sj.request = job;
  sj.project = InternProject(job.project);
  sj.selector = node_labels_.Intern(job.node_selector);
  sj.queued_since = now;
  pending_count_ += 1;
  if (job.spares > 0 && !job.last_nodes.empty() && !job.spare_nodes.empty()) {
    // The server's recovery path: the run ended, the job comes back with
    // the nodes it ran on and the spares it held.
    std::vector<int> base = job.last_nodes;
    NodeMask own(state_->num_nodes());
    GpuModelId model = job.shape.gpu_model;
    for (int& n : base) {
      if (n >= 0 && !state_->Schedulable(n)) n = -1;
      if (n < 0) continue;
      own.Insert(n);
      if (model == kAnyGpuModel) model = state_->NodeModel(n);
    }
    for (int n : job.spare_nodes) {
      if (model == kAnyGpuModel && state_->Schedulable(n)) {
        model = state_->NodeModel(n);
      }
      if (static_cast<int>(sj.spare_nodes.size()) < job.spares &&
          model != kAnyGpuModel && SpareEligible(sj, model, n, &own)) {
        AddSpare(sj, n);
        own.Insert(n);
      }
    }
    if (std::find(base.begin(), base.end(), -1) != base.end() &&
        BeginRecovery(sj, std::move(base))) {
      return SubmitOutcome{};
    }
    ReleaseSpares(sj);
  }
  policy_->Enqueue(sj);
  return SubmitOutcome{};
}

void Scheduler::StopRunning(SchedJob& job, absl::Time now) {
  Accrue(job.project, now);
  projects_[job.project].running_gpus -= job.request.shape.TotalGpus();
  job.attained_gpu_seconds = job.AttainedAt(now);
  state_->Release(job.request.id, job.placement, job.request.shape);
  job.placement = Placement{};
  if (job.preempted_by != 0) {
    auto it = awaiting_victims_.find(job.preempted_by);
    if (it != awaiting_victims_.end() && --it->second <= 0) {
      if (auto c = claims_.find(job.preempted_by); c != claims_.end()) {
        c->second.released = pass_;
      }
      awaiting_victims_.erase(it);
    }
  }
  job.preempted_by = 0;
  running_count_ -= 1;
  policy_->Stopped(job);
}

absl::Status Scheduler::Finish(JobId id, absl::Time now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id, " is not live"));
  }
  if (it->second.phase == JobPhase::kPending) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is pending, not running"));
  }
  StopRunning(it->second, now);
  ReleaseSpares(it->second);
  node_labels_.Release(it->second.selector);
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::Status Scheduler::Cancel(JobId id, absl::Time now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id, " is not live"));
  }
  claims_.erase(id);
  prefetched_.erase(id);
  if (it->second.phase == JobPhase::kPending) {
    if (it->second.recovering()) {
      recovering_.erase(id);
    } else if (it->second.infeasible.empty()) {
      policy_->Remove(it->second);
    }
    pending_count_ -= 1;
  } else {
    StopRunning(it->second, now);
  }
  ReleaseSpares(it->second);
  node_labels_.Release(it->second.selector);
  jobs_.erase(it);
  return absl::OkStatus();
}

absl::Status Scheduler::Requeue(JobId id, absl::Time now) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id, " is not live"));
  }
  SchedJob& job = it->second;
  if (job.phase == JobPhase::kPending) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is already pending"));
  }
  // A job with spares that lost nodes restarts on them: the nodes it ran
  // on, -1 for those that are down now.
  std::vector<int> base;
  bool lost = false;
  if (job.request.spares > 0) {
    for (const TaskPlacement& t : job.placement.tasks) {
      const bool up = state_->Schedulable(t.node);
      base.push_back(up ? t.node : -1);
      lost = lost || !up;
    }
  }
  StopRunning(job, now);
  job.recovery_fallback.clear();
  job.phase = JobPhase::kPending;
  job.queued_since = now;
  job.reason = PendingReason{};
  job.reason_pass = 0;
  pending_count_ += 1;
  // It ran here, but the cluster may have changed since it started.
  if (std::string why; !CouldEverRun(*cluster_, job.request.shape, &why)) {
    job.infeasible = why.empty() ? "it does not fit" : why;
    ReleaseSpares(job);
    return absl::OkStatus();
  }
  if (lost && BeginRecovery(job, std::move(base))) return absl::OkStatus();
  ReleaseSpares(job);
  policy_->Enqueue(job);
  return absl::OkStatus();
}

void Scheduler::ReportCheckpoint(JobId id, absl::Time at) {
  auto it = jobs_.find(id);
  if (it != jobs_.end()) it->second.checkpoint_time = at;
}

const SchedJob* Scheduler::Find(JobId id) const {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

PendingReason Scheduler::ReasonFor(const SchedJob& job) const {
  if (job.recovering()) return job.reason;
  if (!job.infeasible.empty()) {
    PendingReason why;
    why.code = PendingReason::Code::kInfeasible;
    return why;
  }
  if (job.reason_pass == pass_) return job.reason;
  if (job.queued_since <= last_pass_time_) {
    if (std::optional<PendingReason> r = policy_->SkippedReason(job, pass_)) {
      return *r;
    }
  }
  // Not looked at in the latest pass: that pass's default reason applies to
  // jobs that were already queued when it ran.
  if (pass_ > 0 && job.queued_since <= last_pass_time_ &&
      default_reason_.code != PendingReason::Code::kNew) {
    return default_reason_;
  }
  return job.reason;
}

std::string Scheduler::ExplainPending(JobId id, absl::Time now) const {
  const SchedJob* job = Find(id);
  if (job == nullptr) return "unknown job";
  if (job->phase == JobPhase::kRunning) return "running";
  if (job->phase == JobPhase::kStopping) {
    return absl::StrCat("stopping: preempted for job ", job->preempted_by);
  }
  if (!job->infeasible.empty()) {
    return absl::StrCat("cannot run on the cluster as it is now: ",
                        job->infeasible);
  }
  std::string text = FormatPendingReason(
      ReasonFor(*job), *cluster_, now,
      FormatSelector(job->request.node_selector), &job->request.shape.slice);
  if (!job->recovery_fallback.empty()) {
    absl::StrAppend(&text, " (queued: no restart on hot spares, ",
                    job->recovery_fallback, ")");
  }
  if (const int none = state_->NodesWithoutNics().Count();
      none > 0 && SpansNodes(*state_, *cluster_, job->request.shape)) {
    absl::StrAppend(&text, "; ", none, none == 1 ? " node has" : " nodes have",
                    " no usable RDMA NIC and take no job of several nodes");
  }
  // Quotas are guaranteed shares, not caps: past its quota a project runs
  // only on GPUs nobody else claims. Say so when that is why it waits.
  const ProjectUsage& p = projects_[job->project];
  const int need = job->request.shape.TotalGpus();
  if (p.quota_gpus > 0 && p.running_gpus + need > p.quota_gpus) {
    absl::StrAppend(&text, "; project ", p.name, " holds ", p.running_gpus,
                    " GPUs of its quota of ", p.quota_gpus, " (this job ", need,
                    " more): past its quota it borrows idle GPUs only");
  }
  return text;
}

std::vector<ProjectUsage> Scheduler::Usage(absl::Time now) const {
  std::vector<ProjectUsage> out;
  out.reserve(projects_.size());
  for (const ProjectUsage& u : projects_) {
    out.push_back(AdvanceUsage(u, now, options_.usage_half_life));
  }
  return out;
}

}  // namespace loom
