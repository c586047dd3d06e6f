// Job arrays in the controller (controller.h "Arrays", docs/scheduling.md
// "Arrays"): one record per array; its elements are made a window at a
// time, queued in the scheduler, and counted as they end; cancel, hold and
// release of the array or of one element, made or not.

#include <algorithm>
#include <climits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/job_id.h"
#include "loom/core/job_array.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

// How many elements of one array wait in the scheduler at once, when %max
// does not say fewer: enough that a pass can start many, few enough that
// a 100,000-element array costs the scheduler one group of this size.
constexpr int kArrayWindow = 256;

int ArrayPosition(const std::vector<int>& indices, int index) {
  auto it = std::lower_bound(indices.begin(), indices.end(), index);
  if (it == indices.end() || *it != index) return -1;
  return static_cast<int>(it - indices.begin());
}

std::string ArrayIndicesAt(const std::vector<int>& indices,
                           const absl::btree_set<int>& positions) {
  std::vector<int> v;
  v.reserve(positions.size());
  for (int p : positions) v.push_back(indices[p]);
  return FormatIndexRanges(v);
}

}  // namespace

void Controller::RegisterArray(const JobRecord& array) {
  ArrayRun run;
  if (absl::StatusOr<ArraySpec> spec = ParseArraySpec(array.spec.array);
      spec.ok()) {
    run.indices = std::move(spec->indices);
    run.max_running = spec->max_running;
  }
  if (!array.array_cancelled.empty()) {
    if (absl::StatusOr<ArraySpec> c = ParseArraySpec(array.array_cancelled);
        c.ok()) {
      for (int i : c->indices) {
        if (int p = ArrayPosition(run.indices, i); p >= 0) {
          run.cancelled.insert(p);
        }
      }
    }
  }
  if (!IsFinal(array.state)) {
    for (int p = 0; p < static_cast<int>(run.indices.size()); ++p) {
      if (!run.cancelled.contains(p)) run.unfed.insert(run.unfed.end(), p);
    }
  }
  arrays_[array.id] = std::move(run);
}

void Controller::NoteArrayElementLoaded(const JobRecord& element) {
  auto it = arrays_.find(element.array_job);
  if (it == arrays_.end()) return;  // its array is gone: a job of its own
  ArrayRun& run = it->second;
  run.unfed.erase(static_cast<int>(element.id - element.array_job - 1));
  switch (element.state) {
    case JobState::kSucceeded:
      ++run.succeeded;
      break;
    case JobState::kFailed:
      ++run.failed;
      break;
    case JobState::kCancelled:
      ++run.cancelled_elements;
      break;
    default:
      ++run.active;
      if (element.state == JobState::kHeld) ++run.held;
  }
}

absl::StatusOr<SubmitOutcome> Controller::QueueJob(const JobRecord& job,
                                                   const JobRequest& req,
                                                   absl::Time now) {
  if (IsArrayJob(job)) {
    arrays_to_feed_.insert(job.id);
    return SubmitOutcome{};
  }
  if (HoldForDatasets(job)) return SubmitOutcome{};
  return scheduler_->Submit(req, now);
}

absl::Status Controller::QueueSpec(const JobRecord& job, absl::Time now) {
  absl::StatusOr<JobRequest> req =
      ToJobRequest(job.spec, *cluster_, job.id, job.submit_time);
  if (!req.ok()) return req.status();
  AddPlacementHints(job, &*req);
  absl::StatusOr<SubmitOutcome> out = QueueJob(job, *req, now);
  if (!out.ok()) return out.status();
  if (out->kind == SubmitOutcome::Kind::kInfeasible) {
    return absl::FailedPreconditionError(out->reason);
  }
  return absl::OkStatus();
}

JobRecord Controller::MakeElement(const JobRecord& array, int position,
                                  bool held, absl::Time now) const {
  const ArrayRun& run = arrays_.at(array.id);
  JobRecord e;
  e.id = array.id + 1 + position;
  e.spec = array.spec;
  e.spec.array.clear();
  // The array waited for its dependency; its elements need not.
  e.spec.dependency.clear();
  e.spec.kill_on_invalid_dep = false;
  e.spec.hold = held;
  e.state = held ? JobState::kHeld : JobState::kPending;
  e.submit_time = array.submit_time;  // its place in the queue: the array's
  e.array_job = array.id;
  e.array_index = run.indices[position];
  e.AddEvent(now, absl::StrCat(held ? "held" : "queued", " as element ",
                               ArrayElementName(array.id, e.array_index),
                               " of array ", array.id));
  return e;
}

const JobRecord* Controller::ArrayOfId(JobId id, int* position) const {
  auto it = arrays_.lower_bound(id);
  if (it == arrays_.begin()) return nullptr;
  --it;
  const int64_t p = id - it->first - 1;
  if (p < 0 || p >= static_cast<int64_t>(it->second.indices.size())) {
    return nullptr;
  }
  auto job = jobs_.find(it->first);
  if (job == jobs_.end()) return nullptr;
  *position = static_cast<int>(p);
  return &job->second;
}

void Controller::FeedArrays(absl::Time now,
                            std::vector<const JobRecord*>* dirty) {
  while (!arrays_to_feed_.empty()) {
    const JobId id = *arrays_to_feed_.begin();
    arrays_to_feed_.erase(arrays_to_feed_.begin());
    auto j = jobs_.find(id);
    auto r = arrays_.find(id);
    if (j == jobs_.end() || r == arrays_.end()) continue;
    JobRecord& array = j->second;
    ArrayRun& run = r->second;
    if (array.state == JobState::kPending && !dep_waiting_.contains(id) &&
        !array.cancel_requested) {
      const int cap = run.max_running > 0 ? run.max_running : INT_MAX;
      while (!run.unfed.empty() && run.active - run.held < cap &&
             static_cast<int>(run.queued.size()) < kArrayWindow) {
        const int pos = *run.unfed.begin();
        JobRecord e = MakeElement(array, pos, false, now);
        if (absl::Status out = QueueSpec(e, now); !out.ok()) {
          // The cluster changed under the array: none of its elements can
          // be queued any more. The made ones go on; the rest are never
          // made, and the array ends failed once they have.
          array.reason =
              absl::StrCat("elements cannot be queued: ", out.message());
          array.AddEvent(now, array.reason);
          for (int p : run.unfed) run.cancelled.insert(p);
          run.unfed.clear();
          array.array_cancelled = ArrayIndicesAt(run.indices, run.cancelled);
          ++run.failed;  // so that it does not end "cancelled"
          dirty->push_back(&array);
          break;
        }
        run.unfed.erase(run.unfed.begin());
        run.queued.insert(pos);
        ++run.active;
        jobs_.emplace(e.id, std::move(e));
      }
    }
    FinishArrayIfDone(array, now, dirty);
  }
}

void Controller::FinishArrayIfDone(JobRecord& array, absl::Time now,
                                   std::vector<const JobRecord*>* dirty) {
  const ArrayRun& run = arrays_.at(array.id);
  if (IsFinal(array.state) || !run.unfed.empty() || run.active > 0) return;
  const int cancelled =
      run.cancelled_elements + static_cast<int>(run.cancelled.size());
  // As a dependency sees it: succeeded only if every element did.
  if (run.failed > 0) {
    array.state = JobState::kFailed;
  } else if (cancelled > 0 || array.cancel_requested) {
    array.state = JobState::kCancelled;
  } else {
    array.state = JobState::kSucceeded;
  }
  array.end_time = now;
  const std::string counts =
      absl::StrCat(run.succeeded, " succeeded, ", run.failed, " failed, ",
                   cancelled, " cancelled");
  if (array.state != JobState::kSucceeded && array.reason.empty()) {
    array.reason = counts;
  } else if (array.state == JobState::kSucceeded) {
    array.reason.clear();
  }
  array.AddEvent(now, absl::StrCat(std::string(JobStateName(array.state)),
                                   ": every element ended (", counts, ")"));
  NoteJobChanged(array);
  dirty->push_back(&array);
}

void Controller::ArrayElementChanged(const JobRecord& element) {
  if (element.array_job == 0) return;
  auto it = arrays_.find(element.array_job);
  if (it == arrays_.end()) return;
  ArrayRun& run = it->second;
  const int pos = static_cast<int>(element.id - element.array_job - 1);
  if (!IsFinal(element.state)) {
    // Started: the window has room for the next one.
    if (run.queued.erase(pos) > 0) arrays_to_feed_.insert(element.array_job);
    return;
  }
  run.queued.erase(pos);
  run.active = std::max(0, run.active - 1);
  if (element.state == JobState::kSucceeded) {
    ++run.succeeded;
  } else if (element.state == JobState::kFailed) {
    ++run.failed;
  } else {
    ++run.cancelled_elements;
  }
  arrays_to_feed_.insert(element.array_job);
}

absl::Status Controller::WithdrawQueued(JobId array, absl::Time now) {
  ArrayRun& run = arrays_.at(array);
  if (run.queued.empty()) return absl::OkStatus();
  // A queued element may have been written (an event of a cluster
  // change): its record goes too, or a restart would queue it again.
  std::vector<Mutation> deletes;
  for (int pos : run.queued) {
    const JobId e = array + 1 + pos;
    deletes.push_back(Mutation::Delete(JobKey(e)));
    deletes.push_back(Mutation::Delete(EventsKey(e)));
  }
  absl::StatusOr<int64_t> rev = store_->Commit({}, deletes);
  if (!rev.ok()) return rev.status();
  for (int pos : run.queued) {
    const JobId e = array + 1 + pos;
    (void)scheduler_->Cancel(e, now);
    jobs_.erase(e);
    written_.Forget(e);
    run.unfed.insert(pos);
    run.active = std::max(0, run.active - 1);
  }
  run.queued.clear();
  return absl::OkStatus();
}

absl::Status Controller::CancelArray(JobRecord& array, absl::Time now,
                                     std::vector<const JobRecord*>* dirty) {
  ArrayRun& run = arrays_.at(array.id);
  const size_t unmade = run.unfed.size();
  for (int p : run.unfed) {
    run.cancelled.insert(p);
    NoteUnmadeEnded(array.id + 1 + p);
  }
  run.unfed.clear();
  array.array_cancelled = ArrayIndicesAt(run.indices, run.cancelled);
  array.cancel_requested = true;
  array.reason = "cancelled";
  dep_waiting_.erase(array.id);
  int stopping = 0, queued = 0;
  for (size_t p = 0; p < run.indices.size(); ++p) {
    auto it = jobs_.find(array.id + 1 + static_cast<JobId>(p));
    if (it == jobs_.end() || IsFinal(it->second.state)) continue;
    const bool was_pending = it->second.state == JobState::kPending ||
                             it->second.state == JobState::kHeld;
    if (absl::Status st = CancelLocked(it->second, now, dirty); !st.ok()) {
      return st;
    }
    ++(was_pending ? queued : stopping);
  }
  array.AddEvent(now, absl::StrCat("cancel requested: ", unmade + queued,
                                   " pending element(s) cancelled, ", stopping,
                                   " running element(s) stopping"));
  dirty->push_back(&array);
  FinishArrayIfDone(array, now, dirty);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Controller::TouchUnmadeElement(JobId id,
                                                              bool cancel,
                                                              absl::Time now) {
  int pos = 0;
  const JobRecord* found = ArrayOfId(id, &pos);
  if (found == nullptr) {
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  JobRecord& array = jobs_.at(found->id);
  ArrayRun& run = arrays_.at(array.id);
  const std::string name = ArrayElementName(array.id, run.indices[pos]);
  if (run.cancelled.contains(pos)) {
    JobRecord e = MakeElement(array, pos, false, now);
    e.state = JobState::kCancelled;
    e.reason = "cancelled while pending";
    if (!cancel) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", name, " is cancelled, not pending"));
    }
    return JobJson(e, now);
  }
  if (!run.unfed.contains(pos) || IsFinal(array.state)) {
    return absl::NotFoundError(absl::StrCat("no job ", name));
  }
  const JobRecord before = array;
  if (cancel) {
    run.unfed.erase(pos);
    run.cancelled.insert(pos);
    array.array_cancelled = ArrayIndicesAt(run.indices, run.cancelled);
    array.AddEvent(now, absl::StrCat("element ", name, " cancelled"));
    if (absl::Status st = Persist({&array}); !st.ok()) {
      run.cancelled.erase(pos);
      run.unfed.insert(pos);
      array = before;
      return st;
    }
    arrays_to_feed_.insert(array.id);  // it may have been the last one
    NoteUnmadeEnded(id);
    JobRecord e = MakeElement(array, pos, false, now);
    e.state = JobState::kCancelled;
    e.reason = "cancelled while pending";
    return JobJson(e, now);
  }
  // Held: the element is made, held, and written.
  JobRecord e = MakeElement(array, pos, true, now);
  if (absl::Status st = Persist({&e}); !st.ok()) return st;
  run.unfed.erase(pos);
  ++run.active;
  ++run.held;
  JobRecord& made = jobs_[e.id] = std::move(e);
  return JobJson(made, now);
}

absl::StatusOr<nlohmann::json> Controller::Hold(JobId id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return TouchUnmadeElement(id, false, now);
  JobRecord& job = it->second;
  if (job.state == JobState::kHeld) return JobJson(job, now);
  if (job.state != JobState::kPending) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", std::string(JobStateName(job.state)),
                     "; only a pending job can be held"));
  }
  int pos = -1;
  if (job.array_job != 0) pos = static_cast<int>(id - job.array_job - 1);
  if (IsArrayJob(job)) {
    if (absl::Status st = WithdrawQueued(id, now); !st.ok()) return st;
  } else if (backoff_.erase(id) > 0) {
    job.not_before.reset();
  } else if (!dep_waiting_.erase(id)) {
    (void)scheduler_->Cancel(id, now);
  }
  dep_waiting_.erase(id);
  job.state = JobState::kHeld;
  job.AddEvent(now, "held");
  if (job.array_job != 0) {
    if (auto r = arrays_.find(job.array_job); r != arrays_.end()) {
      r->second.queued.erase(pos);
      ++r->second.held;
    }
  }
  // Written at once; a failed write is retried with the next one, and
  // the hold holds meanwhile (held is the safe side).
  (void)Persist({&job});
  return JobJson(job, now);
}

absl::StatusOr<JobId> Controller::ResolveJobRef(std::string_view text) const {
  if (text.find('_') == std::string_view::npos) {
    absl::StatusOr<int64_t> id = ParseJobId(text);
    if (!id.ok()) return id.status();
    return *id;
  }
  absl::StatusOr<ArrayElementRef> ref = ParseArrayElementRef(text);
  if (!ref.ok()) return ref.status();
  absl::MutexLock lock(&mu_);
  return ElementIdLocked(*ref);
}

absl::StatusOr<JobId> Controller::ElementIdLocked(
    const ArrayElementRef& ref) const {
  const std::string name = ArrayElementName(ref.array_job, ref.index);
  auto it = arrays_.find(ref.array_job);
  if (it == arrays_.end()) {
    return absl::NotFoundError(
        absl::StrCat("no job ", name, ": job ", ref.array_job,
                     jobs_.contains(ref.array_job) ? " is not an array"
                                                   : " does not exist"));
  }
  const int pos = ArrayPosition(it->second.indices, ref.index);
  if (pos < 0) {
    return absl::NotFoundError(absl::StrCat(
        "no job ", name, ": array ", ref.array_job, " has no index ", ref.index,
        " (its indices: ", FormatIndexRanges(it->second.indices), ")"));
  }
  return ref.array_job + 1 + pos;
}

void Controller::NoteUnmadeEnded(JobId element) {
  auto it = dep_waiters_.find(element);
  if (it == dep_waiters_.end()) return;
  dep_recheck_.insert(it->second.begin(), it->second.end());
  dep_waiters_.erase(it);
}

void Controller::AddArrayJson(const JobRecord& array, absl::Time now,
                              nlohmann::json* j) const {
  auto it = arrays_.find(array.id);
  if (it == arrays_.end()) return;
  const ArrayRun& run = it->second;
  absl::btree_set<int> pending = run.unfed;
  pending.insert(run.queued.begin(), run.queued.end());
  const int cancelled =
      run.cancelled_elements + static_cast<int>(run.cancelled.size());
  const int running =
      run.active - run.held - static_cast<int>(run.queued.size());
  (*j)["array"] = {{"indices", FormatIndexRanges(run.indices)},
                   {"elements", run.indices.size()},
                   {"max_running", run.max_running},
                   {"pending", ArrayIndicesAt(run.indices, pending)},
                   {"pending_count", pending.size()},
                   {"active", std::max(0, running)},
                   {"held", run.held},
                   {"succeeded", run.succeeded},
                   {"failed", run.failed},
                   {"cancelled", cancelled}};
  if (array.state != JobState::kPending || dep_waiting_.contains(array.id)) {
    return;
  }
  std::string reason;
  if (run.max_running > 0 && run.active - run.held >= run.max_running &&
      !run.unfed.empty()) {
    reason =
        absl::StrCat("array limit: ", run.max_running, " element(s) at once (%",
                     run.max_running, ") are queued or running");
  } else if (!run.queued.empty()) {
    const int first = *run.queued.begin();
    reason = absl::StrCat(
        "element ", ArrayElementName(array.id, run.indices[first]), ": ",
        scheduler_->ExplainPending(array.id + 1 + first, now));
  } else if (pending.empty()) {
    reason = "every element is queued or running";
  } else {
    reason = "its next elements are queued at the next tick";
  }
  (*j)["reason"] = reason;
}

}  // namespace loom
