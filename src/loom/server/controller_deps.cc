// Job dependencies (`dependency:`, Slurm's `--dependency`; docs/
// scheduling.md): a pending job whose dependency is not met waits outside
// the scheduler until it is. Each waiting job is listed under the jobs it
// waits for (`dep_waiters_`); when one of those starts or ends, its waiters
// are checked again at the next tick, never every job every tick.

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "loom/core/job_dependency.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

using DepKind = JobDependency::Kind;
using DepResult = DependencyCheck::Result;

// One condition (a kind and one job) against the job it names (null: none).
DependencyCheck CheckDependee(DepKind kind, JobId id, const JobRecord* other) {
  DependencyCheck c;
  if (other == nullptr) {
    c.result = DepResult::kNever;
    c.reason = absl::StrCat("job ", id, " does not exist");
    return c;
  }
  const JobState s = other->state;
  const std::string state(JobStateName(s));
  const bool failed = s == JobState::kFailed || s == JobState::kCancelled;
  auto wait = [&](std::string reason) {
    c.result = DepResult::kWaiting;
    c.reason = std::move(reason);
    c.watch.push_back(id);
  };
  auto never = [&](std::string_view kind_name) {
    c.result = DepResult::kNever;
    c.reason = absl::StrCat(
        "job ", id,
        s == JobState::kCancelled ? " was cancelled" : absl::StrCat(" ", state),
        " (", std::string(kind_name), ")");
  };
  switch (kind) {
    case DepKind::kAfter:
      // Started once (a restart waiting in the queue has too), or ended.
      if (!(IsFinal(s) || s == JobState::kRunning || s == JobState::kStopping ||
            other->restart_count > 0)) {
        wait(absl::StrCat("waiting for job ", id, " to start"));
      }
      break;
    case DepKind::kAfterAny:
      if (!IsFinal(s)) {
        wait(absl::StrCat("waiting for job ", id, " (", state, ") to end"));
      }
      break;
    case DepKind::kAfterOk:
      if (failed) {
        never("afterok");
      } else if (s != JobState::kSucceeded) {
        wait(absl::StrCat("waiting for job ", id, " (", state, ") to succeed"));
      }
      break;
    case DepKind::kAfterNotOk:
      if (s == JobState::kSucceeded) {
        never("afternotok");
      } else if (!failed) {
        wait(absl::StrCat("waiting for job ", id, " (", state, ") to fail"));
      }
      break;
    case DepKind::kSingleton:
      break;  // the controller's (it needs the job's name)
  }
  return c;
}

}  // namespace

bool Controller::GatedByDependency(const JobRecord& job) const {
  // Only a job's first run waits: a restart or a requeue had its
  // dependency met already.
  return !job.spec.dependency.empty() && job.restart_count == 0 &&
         !job.start_time.has_value();
}

DependencyCheck Controller::CheckDependency(const JobRecord& job) const {
  DependencyCheck out;
  absl::StatusOr<JobDependency> dep = ParseDependency(job.spec.dependency);
  if (!dep.ok()) {  // a stored spec was checked when it was read
    out.result = DepResult::kNever;
    out.reason =
        absl::StrCat("dependency never satisfied: ", dep.status().message());
    return out;
  }
  std::vector<DependencyCheck> parts;
  for (const JobDependency::Term& term : dep->terms) {
    if (term.kind == DepKind::kSingleton) {
      DependencyCheck c;
      auto it = unfinished_by_name_.find({job.spec.user, job.spec.name});
      if (it != unfinished_by_name_.end() && !it->second.empty() &&
          *it->second.begin() < job.id) {
        const JobId first = *it->second.begin();
        auto other = jobs_.find(first);
        c.result = DepResult::kWaiting;
        c.reason =
            absl::StrCat("waiting for job ", first, " of the same name (",
                         other != jobs_.end()
                             ? std::string(JobStateName(other->second.state))
                             : std::string("unknown"),
                         ") to end (singleton)");
        c.watch.push_back(first);
      }
      parts.push_back(std::move(c));
      continue;
    }
    for (JobId id : term.jobs) {
      std::optional<JobRecord> purged;
      absl::StatusOr<const JobRecord*> other = DependeeOf(id, &purged);
      if (!other.ok()) {
        DependencyCheck c;
        c.result = DepResult::kWaiting;
        c.retry = true;
        c.reason = absl::StrCat("waiting for job ", id,
                                ": its record cannot be read now (",
                                other.status().message(), ")");
        parts.push_back(std::move(c));
        continue;
      }
      parts.push_back(CheckDependee(term.kind, id, *other));
    }
    for (const ArrayElementRef& ref : term.elements) {
      // An element is watched by its own ID, made or not; one not made
      // yet is pending (or was cancelled) in its array.
      absl::StatusOr<JobId> id = ElementIdLocked(ref);
      auto it = id.ok() ? jobs_.find(*id) : jobs_.end();
      std::optional<JobRecord> unmade;
      int pos = 0;
      const JobRecord* array = nullptr;
      bool unreadable = false;
      if (id.ok() && it == jobs_.end() &&
          (array = ArrayOfId(*id, &pos)) != nullptr) {
        unmade.emplace();
        unmade->id = *id;
        unmade->state = arrays_.at(array->id).cancelled.contains(pos)
                            ? JobState::kCancelled
                            : JobState::kPending;
        if (unmade->state == JobState::kPending && IsFinal(array->state)) {
          // An ended array being moved to accounting: this element is
          // there already.
          std::optional<JobRecord> purged;
          absl::StatusOr<const JobRecord*> row = DependeeOf(*id, &purged);
          unreadable = !row.ok();
          if (row.ok() && *row != nullptr) unmade->state = (*row)->state;
        }
      }
      DependencyCheck c = CheckDependee(term.kind, id.ok() ? *id : 0,
                                        it != jobs_.end() ? &it->second
                                        : unmade          ? &*unmade
                                                          : nullptr);
      c.retry = unreadable;
      // Said as the user wrote it.
      c.reason = absl::StrReplaceAll(
          c.reason,
          {{absl::StrCat("job ", id.ok() ? *id : 0, " "),
            absl::StrCat("job ", ArrayElementName(ref.array_job, ref.index),
                         " ")}});
      parts.push_back(std::move(c));
    }
  }
  const DependencyCheck* first_wait = nullptr;
  const DependencyCheck* first_never = nullptr;
  int waits = 0;
  int met = 0;
  for (const DependencyCheck& c : parts) {
    if (c.result == DepResult::kMet) ++met;
    if (c.result == DepResult::kWaiting) {
      ++waits;
      out.retry = out.retry || c.retry;
      if (first_wait == nullptr) first_wait = &c;
      out.watch.insert(out.watch.end(), c.watch.begin(), c.watch.end());
    }
    if (c.result == DepResult::kNever && first_never == nullptr) {
      first_never = &c;
    }
  }
  if (dep->any ? met > 0 : (waits == 0 && first_never == nullptr)) {
    out.result = DepResult::kMet;
    out.watch.clear();
    return out;
  }
  if (first_never != nullptr && (!dep->any || waits == 0)) {
    // All must hold and one never will; or any one would do and none will.
    out.result = DepResult::kNever;
    out.reason =
        absl::StrCat("dependency never satisfied: ", first_never->reason);
    out.watch.clear();
    return out;
  }
  out.result = DepResult::kWaiting;
  out.reason = first_wait->reason;
  if (waits > 1) {
    absl::StrAppend(&out.reason, dep->any ? " (or " : " (and ", waits - 1,
                    " more)");
  }
  return out;
}

void Controller::WaitForDependency(JobId id) {
  dep_waiting_.insert(id);
  dep_recheck_.insert(id);
}

void Controller::NoteJobChanged(const JobRecord& job) {
  ArrayElementChanged(job);
  if (IsFinal(job.state)) {
    auto it = unfinished_by_name_.find({job.spec.user, job.spec.name});
    if (it != unfinished_by_name_.end()) {
      it->second.erase(job.id);
      if (it->second.empty()) unfinished_by_name_.erase(it);
    }
  }
  auto it = dep_waiters_.find(job.id);
  if (it == dep_waiters_.end()) return;
  dep_recheck_.insert(it->second.begin(), it->second.end());
  dep_waiters_.erase(it);
}

void Controller::StepDependencies(absl::Time now,
                                  std::vector<const JobRecord*>* dirty) {
  // A job cancelled here may release others: until none is left. Those
  // that could not be judged (a store error) are checked at the next tick.
  std::vector<JobId> retry;
  while (!dep_recheck_.empty()) {
    const JobId id = *dep_recheck_.begin();
    dep_recheck_.erase(dep_recheck_.begin());
    if (!dep_waiting_.contains(id)) continue;
    auto it = jobs_.find(id);
    if (it == jobs_.end() || it->second.state != JobState::kPending) {
      dep_waiting_.erase(id);
      continue;
    }
    JobRecord& job = it->second;
    DependencyCheck c = CheckDependency(job);
    if (c.retry) retry.push_back(id);
    if (c.result == DepResult::kWaiting) {
      for (JobId w : c.watch) {
        std::vector<JobId>& waiters = dep_waiters_[w];
        if (std::find(waiters.begin(), waiters.end(), id) == waiters.end()) {
          waiters.push_back(id);
        }
      }
      continue;
    }
    if (c.result == DepResult::kNever) {
      if (job.spec.kill_on_invalid_dep) {
        dep_waiting_.erase(id);
        job.state = JobState::kCancelled;
        job.reason = c.reason;
        job.end_time = now;
        job.AddEvent(now, absl::StrCat("cancelled: ", c.reason));
        NoteJobChanged(job);
        dirty->push_back(&job);
      } else if (job.reason != c.reason) {
        // Pending for good (until cancelled), as Slurm's
        // DependencyNeverSatisfied.
        job.reason = c.reason;
        job.AddEvent(now, c.reason);
        dirty->push_back(&job);
      }
      continue;
    }
    dep_waiting_.erase(id);
    job.reason.clear();
    if (absl::Status out = QueueSpec(job, now); !out.ok()) {
      FailUnqueued(job, "cannot be queued: ", out, now);
    } else {
      job.AddEvent(now, absl::StrCat("dependency satisfied (",
                                     job.spec.dependency, "); queued"));
    }
    dirty->push_back(&job);
  }
  dep_recheck_.insert(retry.begin(), retry.end());
}

absl::Status Controller::CheckDependencyJobs(const JobSpec& spec) const {
  if (spec.dependency.empty()) return absl::OkStatus();
  absl::StatusOr<JobDependency> dep = ParseDependency(spec.dependency);
  if (!dep.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dependency: ", dep.status().message()));
  }
  for (const JobDependency::Term& term : dep->terms) {
    for (JobId id : term.jobs) {
      std::optional<JobRecord> purged;
      absl::StatusOr<const JobRecord*> other = DependeeOf(id, &purged);
      if (!other.ok()) {
        return absl::UnavailableError(
            absl::StrCat("dependency: job ", id,
                         " cannot be read now: ", other.status().message()));
      }
      if (*other == nullptr) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dependency: '", spec.dependency, "': there is no job ", id));
      }
    }
    for (const ArrayElementRef& ref : term.elements) {
      if (absl::StatusOr<JobId> id = ElementIdLocked(ref); !id.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dependency: '", spec.dependency, "': ", id.status().message()));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace loom
