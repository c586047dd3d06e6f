// One round of the controller (`Tick`): writes held back, restarts due,
// node liveness (suspect, then down and their tasks lost), and the
// scheduler's pass with its starts and preemptions.

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/server/controller.h"

namespace loom {

void Controller::Tick(absl::Time now) {
  absl::MutexLock lock(&mu_);
  std::vector<const JobRecord*> dirty;
  // Launches the agents confirmed since the last tick.
  for (JobId id : unsaved_) {
    if (auto it = jobs_.find(id); it != jobs_.end())
      dirty.push_back(&it->second);
  }
  unsaved_.clear();
  PurgeRequests(now);
  // Nodes a cluster revision removed go once their jobs have moved.
  ForgetDrainedNodes(now);
  // Checkpoint reports held back by the throttle.
  for (JobId id : checkpoint_throttle_.TakeDue(now)) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || IsFinal(it->second.state)) continue;
    AddCheckpointEvent(it->second);
    dirty.push_back(&it->second);
  }
  // Restarts whose backoff is over go back to the queue.
  for (auto it = backoff_.begin(); it != backoff_.end();) {
    JobRecord& job = jobs_.at(*it++);
    if (job.state != JobState::kPending || !job.not_before ||
        *job.not_before > now) {
      continue;
    }
    QueueAfterBackoff(job, now);
    dirty.push_back(&job);
  }
  // Recoveries onto spares that waited for their nodes after a restart.
  if (!spare_restores_.empty()) StepSpareRestores(now, &dirty);
  // Liveness: silent nodes are suspect (no new work), then down (their
  // tasks are lost); gangs that lost a node are stopped.
  StepLiveness(now, &dirty);
  // Rolling maintenance: nodes cordoned, drained, upgraded, returned.
  StepMaintenances(now, &dirty);
  // Jobs whose dependency is now met join the queue before this pass.
  StepDependencies(now, &dirty);
  // Jobs whose datasets are listed join the queue; stores down are retried.
  StepDatasets(now, &dirty);
  // Arrays: their next elements join the queue; finished arrays end.
  FeedArrays(now, &dirty);
  // Services: replicas started, drained, stopped, replaced; autoscaling.
  if (!services_.empty()) StepServices(now, &dirty);
  // Scheduling.
  PassResult pass = scheduler_->Schedule(now);
  for (JobId id : pass.started) {
    JobRecord& job = jobs_.at(id);
    StartJob(job, now);
    dirty.push_back(&job);
  }
  for (const Preemption& p : pass.preempted) {
    JobRecord& job = jobs_.at(p.victim);
    if (p.immediate) {
      // A spare reclaimed by a job that lost a node: no grace.
      ++counters_.decisions;
      ++counters_.preemptions;
      KillOnSpare(job, p.for_job, now);
      dirty.push_back(&job);
      continue;
    }
    const JobRecord& winner = jobs_.at(p.for_job);
    const SchedJob* w = scheduler_->Find(p.for_job);
    const SchedJob* v = scheduler_->Find(p.victim);
    const bool by_priority = w == nullptr || v == nullptr ||
                             w->request.priority > v->request.priority;
    job.preempted_by = p.for_job;
    ++counters_.decisions;
    ++counters_.preemptions;
    Evict(job,
          by_priority
              ? absl::StrCat("preempted by job ", p.for_job, " (priority ",
                             winner.spec.priority, " over this preemptible ",
                             job.spec.priority, " job)")
              : absl::StrCat("preempted by job ", p.for_job, " of project ",
                             winner.spec.project,
                             ", which reclaims GPUs of its quota (project ",
                             job.spec.project, " is above its quota)"),
          now);
    dirty.push_back(&job);
  }
  // Reserved nodes that lack a gang's datasets start filling them.
  if (!pass.prefetch.empty()) SendPrefetches(pass, now, &dirty);
  // Spares the pass topped up or replaced, into the records.
  SyncSpares(&dirty);
  if (absl::Status st = Persist(dirty); !st.ok()) {
    // Nothing may launch that is not on disk: undo this pass's starts.
    for (JobId id : pass.started) {
      JobRecord& job = jobs_.at(id);
      (void)scheduler_->Requeue(id, now);
      job.state = JobState::kPending;
      job.tasks.clear();
      job.AddEvent(now, absl::StrCat("start postponed: ", st.message()));
    }
    actions_.erase(std::remove_if(actions_.begin(), actions_.end(),
                                  [](const AgentAction& a) {
                                    return a.kind == AgentAction::Kind::kLaunch;
                                  }),
                   actions_.end());
  }
}

void Controller::QueueAfterBackoff(JobRecord& job, absl::Time now) {
  if (absl::Status out = QueueSpec(job, now); !out.ok()) {
    FailUnqueued(job, "cannot be queued again: ", out, now);
  }
  job.not_before.reset();
  backoff_.erase(job.id);
}

void Controller::FailUnqueued(JobRecord& job, const char* what,
                              const absl::Status& why, absl::Time now) {
  job.state = JobState::kFailed;
  job.reason = absl::StrCat(what, why.message());
  job.end_time = now;
  job.AddEvent(now, job.reason);
  NoteJobChanged(job);
}

void Controller::NodeLost(int n, absl::Time now,
                          std::vector<const JobRecord*>* dirty) {
  ++counters_.failures["node_down"];
  for (auto& [id, job] : jobs_) {
    // By index: the end of the run may clear `tasks` (a requeue).
    for (size_t k = 0; k < job.tasks.size(); ++k) {
      TaskRecord& t = job.tasks[k];
      if (t.node != cluster_->nodes[n].name || !TaskLive(t)) continue;
      LostWithNode(job, t,
                   absl::StrCat("task ", t.index, " was lost with its node ",
                                t.node, " (", nodes_[n].reason, ")"),
                   now);
      dirty->push_back(&job);
    }
  }
}

}  // namespace loom
