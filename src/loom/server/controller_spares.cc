// Hot spares on the server's side (docs/scheduling.md "Hot spares"): what
// the scheduler holds for a job is written in its record, so that a requeue
// after a node loss, and a restart of the server, give the scheduler the
// survivors and spares of the run that ended; preemptible work on a spare
// that a recovering job reclaims is killed without grace.

#include <algorithm>
#include <csignal>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/server/controller.h"

namespace loom {

std::vector<std::string> Controller::HeldSpares(JobId id) const {
  std::vector<std::string> names;
  const SchedJob* sj = scheduler_->Find(id);
  if (sj == nullptr) return names;
  for (int n : sj->spare_nodes) names.push_back(cluster_->nodes[n].name);
  std::sort(names.begin(), names.end());
  return names;
}

void Controller::AddPlacementHints(const JobRecord& job,
                                   JobRequest* req) const {
  // Data locality and prefetch (docs/scheduling.md): the run's versions.
  for (const JobDataVersion& d : job.data_versions) {
    req->datasets.push_back(d.version);
  }
  // A service's replicas spread over nodes, or leaves (docs/services.md).
  if (!job.service.empty()) {
    req->spread_group = job.service;
    req->service = true;
    if (auto s = services_.find(job.service); s != services_.end()) {
      req->spread_leaf = s->second.spec.spread == ServiceSpread::kLeaf;
    }
  }
  if (job.spec.spares <= 0) return;
  for (const std::string& name : job.spare_nodes) {
    // A node a cluster revision removed is no spare any more.
    if (const int n = NodeIndex(name); n >= 0) req->spare_nodes.push_back(n);
  }
  if (job.state != JobState::kPending ||
      static_cast<int>(job.last_nodes.size()) != req->shape.tasks) {
    return;
  }
  for (const std::string& name : job.last_nodes) {
    req->last_nodes.push_back(name.empty() ? -1 : NodeIndex(name));
  }
}

void Controller::KeepSpareHints(JobRecord& job, std::vector<std::string> held) {
  job.last_nodes.clear();
  job.spare_nodes = std::move(held);
  // Only a run that lost a node restarts on the survivors and spares; any
  // other end releases them (the scheduler did already).
  const bool lost = std::any_of(
      job.tasks.begin(), job.tasks.end(),
      [](const TaskRecord& t) { return t.state == TaskRecord::State::kLost; });
  if (!lost) {
    job.spare_nodes.clear();
    return;
  }
  std::vector<std::string> last(job.tasks.size());
  for (const TaskRecord& t : job.tasks) {
    if (t.index < 0 || t.index >= static_cast<int>(last.size())) return;
    last[t.index] = t.state == TaskRecord::State::kLost ? "" : t.node;
  }
  job.last_nodes = std::move(last);
}

std::string Controller::StartedOnSpares(JobRecord& job) {
  std::vector<std::string> on_spares;
  for (const TaskRecord& t : job.tasks) {
    if (std::find(job.spare_nodes.begin(), job.spare_nodes.end(), t.node) !=
        job.spare_nodes.end()) {
      on_spares.push_back(t.node);
    }
  }
  job.last_nodes.clear();
  job.spare_nodes = HeldSpares(job.id);
  if (job.spec.spares > 0) with_spares_.insert(job.id);
  if (on_spares.empty()) return "";
  return absl::StrCat("; ", on_spares.size(), " of them on its hot spare(s) ",
                      absl::StrJoin(on_spares, ", "),
                      " in place of lost nodes");
}

void Controller::StepSpareRestores(absl::Time now,
                                   std::vector<const JobRecord*>* dirty) {
  for (auto it = spare_restores_.begin(); it != spare_restores_.end();) {
    auto job = jobs_.find(it->first);
    if (job == jobs_.end() || job->second.state != JobState::kPending) {
      spare_restores_.erase(it++);
      continue;
    }
    bool back = true;
    for (const auto* names :
         {&job->second.last_nodes, &job->second.spare_nodes}) {
      for (const std::string& name : *names) {
        const int n = name.empty() ? -1 : NodeIndex(name);
        back = back && (n < 0 || nodes_[n].state == Node::State::kUp);
      }
    }
    if (!back && now < it->second) {
      ++it;
      continue;
    }
    spare_restores_.erase(it++);
    QueueAfterBackoff(job->second, now);
    dirty->push_back(&job->second);
  }
}

void Controller::SyncSpares(std::vector<const JobRecord*>* dirty) {
  for (auto it = with_spares_.begin(); it != with_spares_.end();) {
    auto job = jobs_.find(*it);
    if (job == jobs_.end() || job->second.state != JobState::kRunning) {
      with_spares_.erase(it++);
      continue;
    }
    std::vector<std::string> held = HeldSpares(job->first);
    if (held != job->second.spare_nodes) {
      job->second.spare_nodes = std::move(held);
      dirty->push_back(&job->second);
    }
    ++it;
  }
}

void Controller::KillOnSpare(JobRecord& job, JobId for_job, absl::Time now) {
  if (job.state != JobState::kRunning) return;
  job.state = JobState::kStopping;
  job.preempted = true;
  job.preempted_by = for_job;
  job.reason = absl::StrCat("preempted by job ", for_job,
                            ", which lost a node and restarts on its hot "
                            "spare(s) where this preemptible job runs");
  job.AddEvent(now, absl::StrCat(job.reason,
                                 "; SIGKILL now, without grace (a spare is "
                                 "worth having only when it is free at once)"));
  StopTasks(job, SIGKILL, absl::ZeroDuration());
}

}  // namespace loom
