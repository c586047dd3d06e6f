// The controller's job API (docs/api.md): submissions (with their
// idempotency keys and per-user limits), cancel, release, checkpoint
// reports, and reads of jobs and of where their tasks run.

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/core/job_array.h"
#include "loom/core/job_spec_fit.h"
#include "loom/sched/placement.h"
#include "loom/server/controller.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/job_events_store.h"

namespace loom {
namespace {

std::string RequestKey(const std::string& request_id) {
  return IdempotencyStoreKey(request_id);
}

// How often `Tick` purges expired idempotency keys, and how many at a time.
constexpr absl::Duration kPurgeEvery = absl::Minutes(1);
constexpr size_t kPurgeBatch = 1000;

absl::Status KeyReusedError(const std::string& request_id, JobId job) {
  return absl::AlreadyExistsError(
      absl::StrCat("Idempotency-Key ", request_id,
                   " was already used for a different request (job ", job,
                   "); send a new key for a new job"));
}

absl::Status ValidateRequestId(const std::string& id) {
  if (id.size() > 256) {
    return absl::InvalidArgumentError(
        "Idempotency-Key: at most 128 characters");
  }
  for (char c : id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' &&
        c != '_' && c != '.' && c != ':') {
      return absl::InvalidArgumentError(
          "Idempotency-Key: only letters, digits and . _ : - are allowed");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> Controller::Submit(JobSpec spec,
                                                  const std::string& user,
                                                  absl::Time now,
                                                  const std::string& request_id,
                                                  bool* created) {
  if (created != nullptr) *created = false;
  if (spec.user.empty()) spec.user = user.empty() ? "default" : user;
  std::string digest;
  // The version of an expired record of the key, which this submission
  // replaces (0: none).
  int64_t expired_version = 0;
  if (!request_id.empty()) {
    if (absl::Status st = ValidateRequestId(request_id); !st.ok()) return st;
    digest = RequestDigest(spec);
    absl::MutexLock lock(&mu_);
    if (const IdempotencyRecord* r = requests_.Find(request_id, now)) {
      if (!r->digest.empty() && r->digest != digest) {
        return KeyReusedError(request_id, r->job);
      }
      auto job = jobs_.find(r->job);
      if (job != jobs_.end()) return JobJson(job->second, now);
    }
    expired_version = requests_.ExpiredVersion(request_id, now);
  }
  if (spec.container.has_value() && spec.container->image_digest.empty()) {
    return absl::FailedPreconditionError(
        "container.image: not resolved to a digest before submit");
  }
  // Checks need no lock (the cluster is constant).
  absl::StatusOr<JobRequest> req = ToJobRequest(spec, *cluster_, 0, now);
  if (!req.ok()) return req.status();
  if (absl::Status st = CheckSpecFitsNodes(spec, *cluster_); !st.ok()) {
    return st;
  }
  std::string why;
  if (!CouldEverRun(*cluster_, req->shape, &why)) {
    return absl::FailedPreconditionError(absl::StrCat("infeasible: ", why));
  }
  int64_t array_elements = 0;
  if (!spec.array.empty()) {
    absl::StatusOr<ArraySpec> array = ParseArraySpec(spec.array);
    if (!array.ok()) return array.status();
    array_elements = static_cast<int64_t>(array->indices.size());
  }
  JobId id;
  {
    absl::MutexLock lock(&mu_);
    if (absl::Status st = CheckDependencyJobs(spec); !st.ok()) return st;
    if (absl::Status st = datasets_.Resolve(&spec.data); !st.ok()) return st;
    if (absl::Status st = CheckJobDatasets(cluster_->datasets, spec.data);
        !st.ok()) {
      return st;
    }
    const std::map<JobId, JobRecord>& jobs = jobs_;
    if (user_jobs_.AtLimit(
            spec.user, options_.max_jobs_per_user, [&jobs](JobId j) {
              auto it = jobs.find(j);
              return it != jobs.end() && IsFinal(it->second.state);
            })) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "limit: user ", spec.user, " has ", options_.max_jobs_per_user,
          " unfinished jobs (held, pending, running or stopping), the most a "
          "user may have (the server's --max-jobs-per-user); cancel some or "
          "wait for them to end"));
    }
    // An id whose write fails is skipped, never reused. An array takes
    // one more per element: theirs (controller_arrays.cc).
    id = next_id_;
    next_id_ += 1 + array_elements;
    user_jobs_.Add(spec.user, id);  // reserved while it is written
  }
  req->id = id;
  JobRecord job;
  job.id = id;
  job.spec = std::move(spec);
  job.state = job.spec.hold ? JobState::kHeld : JobState::kPending;
  job.submit_time = now;
  job.request_id = request_id;
  job.AddEvent(now, job.spec.hold ? "submitted held" : "submitted");
  // The job is on disk before anyone hears of its id; the id is unique
  // because the key must not exist yet. Written without holding `mu_`, so
  // that concurrent submissions share one sync (the store's group commit)
  // and heartbeats do not wait for the disk.
  std::vector<Condition> conditions = {{JobKey(id), Condition::kMustNotExist}};
  std::string record_text = JobStoreText(JobRecordToJson(job));
  std::string history_text = JobStoreText(JobHistoryToJson(job));
  std::vector<Mutation> mutations = {
      Mutation::Put(JobKey(id), record_text),
      Mutation::Put(EventsKey(id), history_text)};
  if (!request_id.empty()) {
    // The key claims the id for good, also across leaders.
    conditions.push_back(
        {RequestKey(request_id),
         expired_version > 0 ? expired_version : Condition::kMustNotExist});
    mutations.push_back(Mutation::Put(
        RequestKey(request_id), IdempotencyStoreValue({id, digest, now})));
  }
  absl::StatusOr<int64_t> rev = store_->Commit(conditions, mutations);
  if (!rev.ok() && !request_id.empty() &&
      rev.status().code() == absl::StatusCode::kFailedPrecondition &&
      absl::StrContains(rev.status().message(), RequestKey(request_id))) {
    // The same submission raced in from another connection.
    absl::StatusOr<KeyValue> first = store_->Get(RequestKey(request_id));
    absl::StatusOr<IdempotencyRecord> r =
        first.ok() ? ParseIdempotencyValue(*first, now)
                   : absl::StatusOr<IdempotencyRecord>(first.status());
    {
      absl::MutexLock lock(&mu_);
      user_jobs_.Remove(job.spec.user, id);
    }
    if (r.ok() && !r->digest.empty() && r->digest != digest) {
      return KeyReusedError(request_id, r->job);
    }
    if (r.ok()) {
      absl::MutexLock lock(&mu_);
      auto job = jobs_.find(r->job);
      if (job != jobs_.end()) return JobJson(job->second, now);
    }
    return absl::UnavailableError(
        absl::StrCat("a submission with Idempotency-Key ", request_id,
                     " is still being written; retry"));
  }
  if (!rev.ok()) {
    absl::MutexLock lock(&mu_);
    user_jobs_.Remove(job.spec.user, id);
    return rev.status();
  }
  absl::MutexLock lock(&mu_);
  if (created != nullptr) *created = true;
  if (!request_id.empty()) requests_.Put(request_id, {id, digest, now, *rev});
  if (IsArrayJob(job)) RegisterArray(job);
  if (job.state == JobState::kPending && GatedByDependency(job)) {
    WaitForDependency(id);  // queued by `Tick` once its dependency is met
  } else if (job.state == JobState::kPending) {
    absl::StatusOr<SubmitOutcome> out = QueueJob(job, *req, now);
    if (!out.ok()) return out.status();
  }
  unfinished_by_name_[{job.spec.user, job.spec.name}].insert(id);
  written_.Set(id, std::move(record_text), std::move(history_text));
  JobRecord& stored = jobs_[id] = std::move(job);
  return JobJson(stored, now);
}

bool Controller::KnowsRequest(const std::string& request_id,
                              absl::Time now) const {
  if (request_id.empty()) return false;
  absl::MutexLock lock(&mu_);
  const IdempotencyRecord* r = requests_.Find(request_id, now);
  return r != nullptr && jobs_.count(r->job) > 0;
}

absl::StatusOr<nlohmann::json> Controller::Cancel(JobId id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return TouchUnmadeElement(id, true, now);
  JobRecord& job = it->second;
  if (IsFinal(job.state)) return JobJson(job, now);
  std::vector<const JobRecord*> dirty;
  if (IsArrayJob(job)) {
    // Its elements change with it; a failed write is retried with the
    // next one (the cancel is not undone: elements are already stopping).
    absl::Status st = CancelArray(job, now, &dirty);
    if (st.ok()) st = Persist(dirty);
    if (!st.ok()) return st;
    return JobJson(job, now);
  }
  JobRecord before = job;
  (void)CancelLocked(job, now, &dirty);
  if (absl::Status st = Persist(dirty); !st.ok()) {
    job = before;
    return st;
  }
  return JobJson(job, now);
}

absl::Status Controller::CancelLocked(JobRecord& job, absl::Time now,
                                      std::vector<const JobRecord*>* dirty) {
  const JobId id = job.id;
  if (IsFinal(job.state)) return absl::OkStatus();
  if (job.state == JobState::kHeld || job.state == JobState::kPending) {
    if (job.state == JobState::kPending) (void)scheduler_->Cancel(id, now);
    if (job.state == JobState::kHeld && job.array_job != 0) {
      if (auto r = arrays_.find(job.array_job); r != arrays_.end()) {
        r->second.held = std::max(0, r->second.held - 1);
      }
    }
    backoff_.erase(id);
    dep_waiting_.erase(id);
    ForgetDatasets(id);
    job.not_before.reset();
    job.state = JobState::kCancelled;
    job.reason = "cancelled while pending";
    job.end_time = now;
    job.AddEvent(now, "cancelled");
    NoteJobChanged(job);
  } else if (!job.cancel_requested) {
    job.cancel_requested = true;
    job.state = JobState::kStopping;
    job.reason = "cancelled";
    job.AddEvent(now, absl::StrCat("cancel requested: sending ",
                                   SignalName(job.spec.cancel_signal)));
    StopTasks(job, job.spec.cancel_signal, job.spec.cancel_grace);
  }
  dirty->push_back(&job);
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> Controller::Release(JobId id, absl::Time now) {
  std::vector<absl::Status> errors;
  ReleaseMany({id}, now, &errors);
  if (!errors[0].ok()) return errors[0];
  absl::MutexLock lock(&mu_);
  return JobJson(jobs_.at(id), now);
}

void Controller::ReleaseMany(const std::vector<JobId>& ids, absl::Time now,
                             std::vector<absl::Status>* errors) {
  absl::MutexLock lock(&mu_);
  errors->assign(ids.size(), absl::OkStatus());
  std::vector<const JobRecord*> changed;
  std::vector<std::pair<size_t, JobRequest>> requests;
  std::vector<JobEvents> events_before;  // one per entry of `requests`
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = jobs_.find(ids[i]);
    if (it == jobs_.end()) {
      (*errors)[i] = absl::NotFoundError(absl::StrCat("no job ", ids[i]));
      continue;
    }
    JobRecord& job = it->second;
    if (job.state != JobState::kHeld) {
      (*errors)[i] = absl::FailedPreconditionError(
          absl::StrCat("job ", ids[i], " is ",
                       std::string(JobStateName(job.state)), ", not held"));
      continue;
    }
    absl::StatusOr<JobRequest> req =
        ToJobRequest(job.spec, *cluster_, job.id, job.submit_time);
    if (!req.ok()) {
      (*errors)[i] = req.status();
      continue;
    }
    events_before.push_back(job.events);
    job.state = JobState::kPending;
    job.AddEvent(now, "released");
    changed.push_back(&job);
    requests.emplace_back(i, *std::move(req));
  }
  // One write for all of them; on failure none is released.
  if (absl::Status st = Persist(changed); !st.ok()) {
    for (size_t k = 0; k < requests.size(); ++k) {
      auto& [i, req] = requests[k];
      JobRecord& job = jobs_.at(req.id);
      job.state = JobState::kHeld;
      job.events = std::move(events_before[k]);
      (*errors)[i] = st;
    }
    return;
  }
  for (auto& [i, req] : requests) {
    const JobRecord& job = jobs_.at(req.id);
    if (job.array_job != 0) {
      if (auto r = arrays_.find(job.array_job); r != arrays_.end()) {
        r->second.held = std::max(0, r->second.held - 1);
      }
    }
    if (GatedByDependency(job)) {
      WaitForDependency(req.id);
      continue;
    }
    absl::StatusOr<SubmitOutcome> out = QueueJob(job, req, now);
    if (!out.ok()) (*errors)[i] = out.status();
  }
}

absl::StatusOr<nlohmann::json> Controller::Checkpoint(
    JobId id, std::optional<int64_t> step, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  JobRecord& job = it->second;
  if (job.state != JobState::kRunning && job.state != JobState::kStopping) {
    return absl::FailedPreconditionError(
        absl::StrCat("job ", id, " is ", std::string(JobStateName(job.state)),
                     "; only a running or stopping job saves checkpoints"));
  }
  const bool write = checkpoint_throttle_.ShouldWrite(id, now);
  // A copy only for a write that may have to be undone (a record can be
  // large, and reports can be many).
  std::optional<JobRecord> before;
  if (write) before = job;
  job.checkpoint_time = now;
  job.checkpoint_step = step;
  job.checkpoint_run = job.restart_count;
  scheduler_->ReportCheckpoint(id, now);
  // The first checkpoint of a recovered run is its first progress.
  if (job.recovery && !job.recovery->progress) {
    NoteProgress(job, now);
    if (job.recovery->progress) unsaved_.insert(id);
  }
  if (!write) return JobJson(job, now);  // held: `Tick` writes it when due
  AddCheckpointEvent(job);
  if (absl::Status st = Persist({&job}); !st.ok()) {
    job = *std::move(before);
    return st;
  }
  return JobJson(job, now);
}

void Controller::PurgeRequests(absl::Time now) {
  if (now - last_purge_ < kPurgeEvery) return;
  last_purge_ = now;
  requests_.PurgeExpired(*store_, now, kPurgeBatch);
}

void Controller::AddCheckpointEvent(JobRecord& job) {
  const absl::Time t = job.checkpoint_time.value_or(absl::UnixEpoch());
  job.AddEvent(t,
               job.checkpoint_step ? absl::StrCat("checkpoint saved (step ",
                                                  *job.checkpoint_step, ")")
                                   : std::string("checkpoint saved"),
               "checkpoint saved");
}

absl::StatusOr<nlohmann::json> Controller::GetJob(JobId id,
                                                  absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  int pos = 0;
  if (const JobRecord* array = nullptr;
      it == jobs_.end() && (array = ArrayOfId(id, &pos)) != nullptr) {
    // An element not made yet: pending (or cancelled) in its array.
    const ArrayRun& run = arrays_.at(array->id);
    if (run.unfed.contains(pos) || run.cancelled.contains(pos)) {
      JobRecord e = MakeElement(*array, pos, false, now);
      e.events = JobEvents();
      if (run.cancelled.contains(pos)) {
        e.state = JobState::kCancelled;
        e.reason = "cancelled while pending";
      }
      nlohmann::json j = JobJson(e, now);
      if (e.state == JobState::kPending) {
        j["reason"] = absl::StrCat(
            "an element of array ", array->id,
            ", not queued yet: ", JobJson(*array, now).value("reason", ""));
      }
      return j;
    }
  }
  if (it == jobs_.end()) {
    std::optional<JobRecord> purged;
    if (absl::StatusOr<const JobRecord*> other = DependeeOf(id, &purged);
        other.ok() && *other != nullptr) {
      return absl::NotFoundError(absl::StrCat(
          "job ", id, " ", std::string(JobStateName(purged->state)),
          " and has left the live state (job retention ",
          absl::FormatDuration(options_.job_retention),
          "); its record is in accounting: loom sacct -j ", id));
    }
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  return JobJson(it->second, now);
}

absl::Status Controller::CheckRun(JobId id, int64_t run) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  return CheckLiveRun(it->second, run);
}

nlohmann::json Controller::ListJobs(const JobQuery& f, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [id, job] : jobs_) {
    if (!JobMatches(f, job)) continue;
    // An array's elements that have not started are its `pending`; an
    // array shows while it has some, or once it has ended.
    if (job.array_job != 0 && job.state == JobState::kPending) {
      auto r = arrays_.find(job.array_job);
      if (r != arrays_.end() &&
          r->second.queued.contains(static_cast<int>(id - job.array_job - 1))) {
        continue;
      }
    }
    if (IsArrayJob(job) && !IsFinal(job.state)) {
      auto r = arrays_.find(id);
      if (r != arrays_.end() && r->second.unfed.empty() &&
          r->second.queued.empty() && job.state == JobState::kPending) {
        continue;
      }
    }
    nlohmann::json j = JobJson(job, now);
    j.erase("events");
    j.erase("spec");
    out.push_back(std::move(j));
    if (f.limit > 0 && static_cast<int>(out.size()) >= f.limit) break;
  }
  return {{"jobs", std::move(out)}};
}

absl::StatusOr<std::pair<std::string, std::string>> Controller::TaskLocation(
    JobId id, int task) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  for (const TaskRecord& t : it->second.tasks) {
    if (t.index != task) continue;
    const int n = NodeIndex(t.node);
    if (n < 0 || nodes_[n].address.empty()) {
      return absl::UnavailableError(
          absl::StrCat("node ", t.node, " has no agent address"));
    }
    return std::make_pair(nodes_[n].address, t.task_id);
  }
  return absl::NotFoundError(
      it->second.tasks.empty()
          ? absl::StrCat("job ", id, " has not started, so it has no logs")
          : absl::StrCat("job ", id, " has no task ", task));
}

absl::StatusOr<Controller::TaskLogSource> Controller::TaskLogs(JobId id,
                                                               int task,
                                                               int run) const {
  {
    absl::MutexLock lock(&mu_);
    auto it = jobs_.find(id);
    if (it != jobs_.end()) {
      const JobRecord& job = it->second;
      int want = run;
      if (want < 0 && job.tasks.empty() && !job.past_runs.empty()) {
        want = job.past_runs.back().run;  // waiting to run again
      }
      if (want >= 0 && !(!job.tasks.empty() && want == job.restart_count)) {
        return PastRunLogs(job, task, want);
      }
    }
  }
  absl::StatusOr<std::pair<std::string, std::string>> where =
      TaskLocation(id, task);
  if (!where.ok()) return where.status();
  TaskLogSource out;
  out.address = where->first;
  out.task_id = where->second;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end())
    return absl::NotFoundError(absl::StrCat("no job ", id));
  for (const TaskRecord& t : it->second.tasks) {
    if (t.task_id != out.task_id) continue;
    out.node = t.node;
    out.live = TaskLive(t);
  }
  return out;
}

absl::StatusOr<Controller::TaskLogSource> Controller::PastRunLogs(
    const JobRecord& job, int task, int run) const {
  const PastRun* past = nullptr;
  for (const PastRun& r : job.past_runs) {
    if (r.run == run) past = &r;
  }
  if (past == nullptr) {
    std::vector<int> kept;
    for (const PastRun& r : job.past_runs) kept.push_back(r.run);
    if (!job.tasks.empty()) kept.push_back(job.restart_count);
    return absl::NotFoundError(absl::StrCat(
        "job ", job.id, " has no run ", run, " whose logs are kept",
        kept.empty()
            ? std::string(job.restart_count == 0 ? " (it has not run yet)"
                                                 : " (none is kept)")
            : absl::StrCat(" (runs kept: ", absl::StrJoin(kept, ", "), ")")));
  }
  if (task < 0 || static_cast<size_t>(task) >= past->nodes.size()) {
    return absl::NotFoundError(
        absl::StrCat("run ", run, " of job ", job.id, " has no task ", task));
  }
  const std::string& node = past->nodes[task];
  const int n = NodeIndex(node);
  if (n < 0 || nodes_[n].address.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "node ", node.empty() ? std::string("(unknown)") : node,
        ", where task ", task, " of run ", run, " ran, has no agent address"));
  }
  TaskLogSource out;
  out.address = nodes_[n].address;
  out.task_id = TaskIdOf(job.id, task, run);
  out.node = node;
  out.live = false;
  return out;
}

absl::StatusOr<std::string> Controller::JobUser(JobId id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  int pos = 0;
  if (const JobRecord* array = nullptr;
      it == jobs_.end() && (array = ArrayOfId(id, &pos)) != nullptr) {
    return array->spec.user;  // an element not made yet
  }
  if (it == jobs_.end())
    return absl::NotFoundError(absl::StrCat("no job ", id));
  return it->second.spec.user;
}

bool Controller::TaskMayWrite(JobId id, const std::string& task_id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return false;
  for (const TaskRecord& t : it->second.tasks) {
    if (t.task_id == task_id) return TaskLive(t);
  }
  return false;
}

nlohmann::json Controller::JobJson(const JobRecord& job, absl::Time now) const {
  std::string reason = job.reason;
  if (job.state == JobState::kPending && job.not_before) {
    reason = absl::StrCat(job.reason, "; queued again at ",
                          FormatTimestamp(*job.not_before));
  } else if (job.state == JobState::kPending && WaitsForDatasets(job.id)) {
    reason = job.reason.empty() ? "listing its datasets" : job.reason;
  } else if (job.state == JobState::kPending && dep_waiting_.contains(job.id)) {
    reason = CheckDependency(job).reason;
    if (reason.empty())
      reason = "dependency satisfied: queued at the next tick";
  } else if (job.state == JobState::kPending) {
    reason = scheduler_->ExplainPending(job.id, now);
  } else if (job.state == JobState::kHeld) {
    reason = "held: waiting for `loom release`";
  } else if (job.state == JobState::kRunning && !job.running_time) {
    // Starting: the task whose node has the most of its image left to pull.
    const TaskRecord* slowest = nullptr;
    int pulling = 0;
    for (const TaskRecord& t : job.tasks) {
      if (!t.pull || t.state != TaskRecord::State::kLaunching) continue;
      ++pulling;
      if (slowest == nullptr ||
          t.pull->bytes_total - t.pull->bytes_done >
              slowest->pull->bytes_total - slowest->pull->bytes_done) {
        slowest = &t;
      }
    }
    if (slowest != nullptr) {
      const TaskPull& p = *slowest->pull;
      reason = absl::StrCat(
          p.phase == "dataset" || !job.spec.container ? "filling dataset cache"
          : p.phase == "unpacking"                    ? "unpacking image"
                                                      : "pulling image",
          p.bytes_total > 0
              ? absl::StrCat(": ", FormatBytesOf(p.bytes_done, p.bytes_total))
              : "",
          " on ", slowest->node,
          pulling > 1
              ? absl::StrCat(" (", pulling - 1, " more task(s) pulling)")
              : "");
    }
  }
  const SchedJob* sj = scheduler_->Find(job.id);
  nlohmann::json j =
      JobApiJson(job, *cluster_, reason, sj ? &sj->request.shape : nullptr,
                 [this](const std::string& node) { return NodeHost(node); });
  if (!job.spec.dependency.empty()) j["dependency"] = job.spec.dependency;
  if (IsArrayJob(job)) AddArrayJson(job, now, &j);
  j["goodput"] = GoodputJson(job, now);
  return j;
}

}  // namespace loom
