#include "loom/server/controller.h"

#include <algorithm>
#include <bit>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "loom/common/units.h"
#include "loom/common/utf8.h"
#include "loom/core/retry.h"
#include "loom/sched/placement.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/job_events_store.h"
#include "loom/server/stored_job.h"

namespace loom {
namespace {

constexpr const char* kNodePrefix = "/nodes/";
// Ends the reason of a job whose launch an agent refused (HTTP 400).
constexpr const char* kNotAgainAfterRefusal =
    "; not queued again: the agent refused the task as specified, and would "
    "refuse it again";

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

std::string TaskId(JobId job, int index, int restart) {
  return fmt::format("{}.{}.{}", job, index, restart);
}

std::optional<JobId> JobOfTask(const std::string& task_id) {
  JobId id = 0;
  const size_t dot = task_id.find('.');
  if (dot == std::string::npos ||
      !absl::SimpleAtoi(task_id.substr(0, dot), &id)) {
    return std::nullopt;
  }
  return id;
}

std::string HostOf(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

// GPU-seconds of the job's current run up to `now` (0 when not started).
double CurrentRunGpuSeconds(const JobRecord& job, absl::Time now) {
  if (!job.start_time) return 0;
  int gpus = 0;
  for (const TaskRecord& t : job.tasks) gpus += static_cast<int>(t.gpus.size());
  return gpus * std::max(0.0, absl::ToDoubleSeconds(now - *job.start_time));
}

// Checks the types of an agent's registration or heartbeat body before any
// of it is used, so that a malformed body changes nothing (found by
// fuzz/server_api_fuzzer: a wrong type used to throw half-way through).
absl::Status CheckAgentBody(const nlohmann::json& body, bool registering) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError("body: must be a JSON object");
  }
  auto string_field = [&](const nlohmann::json& o, const char* key,
                          const std::string& where) -> absl::Status {
    auto it = o.find(key);
    if (it != o.end() && !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, key, ": must be a string"));
    }
    return absl::OkStatus();
  };
  for (const char* key : {"name", "address", "hostname"}) {
    if (absl::Status st = string_field(body, key, ""); !st.ok()) return st;
  }
  if (auto it = body.find("emulated"); it != body.end() && !it->is_boolean()) {
    return absl::InvalidArgumentError("emulated: must be true or false");
  }
  if (registering) {
    if (auto it = body.find("gpus"); it != body.end()) {
      if (!it->is_array()) {
        return absl::InvalidArgumentError("gpus: must be a list");
      }
      for (const nlohmann::json& g : *it) {
        if (!g.is_object()) {
          return absl::InvalidArgumentError("gpus: each must be an object");
        }
        if (absl::Status st = string_field(g, "model", "gpus[]."); !st.ok()) {
          return st;
        }
      }
    }
  }
  if (auto it = body.find("tasks"); it != body.end()) {
    if (!it->is_array()) {
      return absl::InvalidArgumentError("tasks: must be a list");
    }
    for (const nlohmann::json& t : *it) {
      if (!t.is_object()) {
        return absl::InvalidArgumentError("tasks: each must be an object");
      }
      for (const char* key : {"task_id", "state"}) {
        if (absl::Status st = string_field(t, key, "tasks[]."); !st.ok()) {
          return st;
        }
      }
    }
  }
  if (auto it = body.find("health");
      it != body.end() && !it->is_object() && !it->is_null()) {
    return absl::InvalidArgumentError("health: must be an object");
  }
  return absl::OkStatus();
}

// JSON text for the store: bytes that are not UTF-8 (an agent's message, a
// user's string) become U+FFFD instead of throwing.
std::string StoreText(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool TaskLive(const TaskRecord& t) {
  return t.state == TaskRecord::State::kLaunching ||
         t.state == TaskRecord::State::kRunning;
}

}  // namespace

Controller::Controller(Cluster cluster, StateStore* store,
                       ControllerOptions options)
    : cluster_(std::move(cluster)),
      store_(store),
      options_(options),
      requests_(options.idempotency_key_lifetime),
      checkpoint_throttle_(options.checkpoint_write_interval) {
  for (size_t i = 0; i < cluster_.nodes.size(); ++i) {
    node_index_[cluster_.nodes[i].name] = static_cast<int>(i);
  }
}

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(
    Cluster cluster, StateStore* store, ControllerOptions options,
    absl::Time now) {
  absl::StatusOr<std::unique_ptr<QueuePolicy>> policy =
      MakeQueuePolicy(options.policy, options.policy_options);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Controller> c(
      new Controller(std::move(cluster), store, options));
  absl::MutexLock lock(&c->mu_);
  c->created_ = now;
  c->recovery_ =
      *Histogram::Create({1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300});
  c->queue_wait_ = *Histogram::Create(
      {0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600});
  c->scheduler_ = std::make_unique<Scheduler>(c->cluster_, *std::move(policy),
                                              options.scheduler_options);
  c->nodes_.resize(c->cluster_.nodes.size());
  // Nodes are not schedulable until their agent registers.
  for (size_t n = 0; n < c->nodes_.size(); ++n) {
    c->scheduler_->SetNodeSchedulable(static_cast<int>(n), false);
  }
  if (absl::Status st = c->Load(now); !st.ok()) return st;
  return c;
}

int Controller::NodeIndex(const std::string& name) const {
  auto it = node_index_.find(name);
  return it == node_index_.end() ? -1 : it->second;
}

absl::Status Controller::Load(absl::Time now) {
  absl::StatusOr<std::vector<KeyValue>> nodes = store_->List(kNodePrefix);
  if (!nodes.ok()) return nodes.status();
  for (const KeyValue& kv : *nodes) {
    const int n = NodeIndex(kv.key.substr(std::string(kNodePrefix).size()));
    if (n < 0) continue;  // a node no longer in the cluster spec
    nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
    if (j.is_discarded()) continue;
    nodes_[n].cordoned = j.value("cordoned", false);
    nodes_[n].draining = j.value("draining", false);
    nodes_[n].reason = j.value("reason", "");
    nodes_[n].unhealthy = j.value("unhealthy", false);
  }
  // Histories first: a job submitted meanwhile then has its record listed
  // (its history is written later) rather than a history without a record.
  absl::StatusOr<std::vector<KeyValue>> histories = store_->List(kEventsPrefix);
  if (!histories.ok()) return histories.status();
  absl::flat_hash_map<JobId, const KeyValue*> history_of;
  for (const KeyValue& kv : *histories) {
    if (std::optional<JobId> id = IdOfEventsKey(kv.key)) {
      history_of[*id] = &kv;
    } else {
      load_log_.push_back(DroppedHistoryLogLine(kv, "not an events key"));
    }
  }
  absl::StatusOr<std::vector<KeyValue>> jobs = store_->List("/jobs/");
  if (!jobs.ok()) return jobs.status();
  for (const KeyValue& kv : *jobs) {
    // A record that cannot be read never stops the server: it becomes a
    // failed job, its bytes are kept under /quarantine/, and it is logged.
    std::string log_line;
    absl::StatusOr<StoredJob> stored =
        LoadStoredJob(*store_, kv, now, &log_line);
    if (!log_line.empty()) load_log_.push_back(std::move(log_line));
    if (!stored.ok()) continue;  // not a job key
    JobRecord* rec = &stored->record;
    LoadHistory(kv, *stored, history_of);
    next_id_ = std::max(next_id_, rec->id + 1);
    JobRecord& job = jobs_[rec->id] = std::move(*rec);
    // A job that ended keeps its state and reason, whatever the cluster
    // has become.
    if (IsFinal(job.state)) continue;
    user_jobs_.Add(job.spec.user, job.id);
    absl::StatusOr<JobRequest> req =
        ToJobRequest(job.spec, cluster_, job.id, job.submit_time);
    if (!req.ok()) {
      // The cluster changed under the job: it can no longer be described.
      job.state = JobState::kFailed;
      job.reason = absl::StrCat("no longer valid on this cluster: ",
                                req.status().message());
      job.end_time = now;
      continue;
    }
    if (job.state == JobState::kPending && job.not_before) {
      backoff_.insert(job.id);  // queued again by Tick when it is due
    } else if (job.state == JobState::kPending) {
      (void)scheduler_->Submit(*req, now);
    } else if (job.state == JobState::kRunning ||
               job.state == JobState::kStopping) {
      Placement p;
      p.gpu_model = -1;
      for (const TaskRecord& t : job.tasks) {
        const int n = NodeIndex(t.node);
        uint32_t mask = 0;
        for (int g : t.gpus) mask |= 1u << g;
        if (n >= 0) {
          p.tasks.push_back({n, mask});
          p.gpu_model = cluster_.nodes[n].gpu_model;
          nodes_[n].master_ports.insert(job.master_port);
        }
      }
      absl::Status st =
          scheduler_->Restore(*req, p, job.start_time.value_or(now), 0, now);
      if (st.ok() && job.checkpoint_time &&
          job.checkpoint_run == job.restart_count) {
        scheduler_->ReportCheckpoint(job.id, *job.checkpoint_time);
      }
      if (!st.ok()) {
        job.state = JobState::kFailed;
        job.reason =
            absl::StrCat("could not restore after restart: ", st.message());
        job.end_time = now;
      }
    }
  }
  DropOrphanHistories(history_of);
  // Idempotency keys, with the digests of their requests.
  absl::StatusOr<std::vector<KeyValue>> keys = store_->List(RequestKey(""));
  if (!keys.ok()) return keys.status();
  for (const KeyValue& kv : *keys) {
    const std::string key = kv.key.substr(RequestKey("").size());
    JobId job = 0;
    absl::SimpleAtoi(kv.value, &job);
    auto it = jobs_.find(job);
    absl::StatusOr<IdempotencyRecord> r = ParseIdempotencyValue(
        kv, it != jobs_.end() ? it->second.submit_time : now);
    if (r.ok()) requests_.Put(key, *std::move(r));
  }
  return absl::OkStatus();
}

absl::Status Controller::Persist(const std::vector<const JobRecord*>& jobs) {
  if (jobs.empty()) return absl::OkStatus();
  std::vector<Mutation> m;
  m.reserve(jobs.size());
  absl::flat_hash_set<JobId> seen;  // a job may be listed more than once
  for (const JobRecord* j : jobs) {
    if (!seen.insert(j->id).second) continue;
    // Only the parts that changed: an event alone rewrites the small
    // history, not the record.
    written_.AddWrites(*j, &m);
  }
  if (m.empty()) return absl::OkStatus();
  absl::StatusOr<int64_t> rev = store_->Commit({}, m);
  written_.Finish(rev.ok());
  return rev.ok() ? absl::OkStatus() : rev.status();
}

absl::Status Controller::PersistNode(int node) {
  const Node& n = nodes_[node];
  nlohmann::json j = {{"cordoned", n.cordoned},
                      {"draining", n.draining},
                      {"unhealthy", n.unhealthy},
                      {"reason", n.reason}};
  absl::StatusOr<int64_t> rev = store_->Commit(
      {}, {Mutation::Put(absl::StrCat(kNodePrefix, cluster_.nodes[node].name),
                         StoreText(j))});
  return rev.ok() ? absl::OkStatus() : rev.status();
}

void Controller::UpdateSchedulable(int node) {
  const Node& n = nodes_[node];
  scheduler_->SetNodeSchedulable(node, n.state == Node::State::kUp &&
                                           !n.suspect && !n.cordoned &&
                                           !n.draining);
}

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
  // Checks need no lock (the cluster is constant).
  absl::StatusOr<JobRequest> req = ToJobRequest(spec, cluster_, 0, now);
  if (!req.ok()) return req.status();
  std::string why;
  if (!CouldEverRun(cluster_, req->shape, &why)) {
    return absl::FailedPreconditionError(absl::StrCat("infeasible: ", why));
  }
  JobId id;
  {
    absl::MutexLock lock(&mu_);
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
    id = next_id_++;  // an id whose write fails is skipped, never reused
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
  std::string record_text = StoreText(JobRecordToJson(job));
  std::string history_text = StoreText(JobHistoryToJson(job));
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
  if (job.state == JobState::kPending) {
    absl::StatusOr<SubmitOutcome> out = scheduler_->Submit(*req, now);
    if (!out.ok()) return out.status();
  }
  written_.Set(id, std::move(record_text), std::move(history_text));
  JobRecord& stored = jobs_[id] = std::move(job);
  return JobJson(stored, now);
}

absl::StatusOr<nlohmann::json> Controller::Cancel(JobId id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("no job ", id));
  }
  JobRecord& job = it->second;
  if (IsFinal(job.state)) return JobJson(job, now);
  JobRecord before = job;
  if (job.state == JobState::kHeld || job.state == JobState::kPending) {
    if (job.state == JobState::kPending) (void)scheduler_->Cancel(id, now);
    backoff_.erase(id);
    job.not_before.reset();
    job.state = JobState::kCancelled;
    job.reason = "cancelled while pending";
    job.end_time = now;
    job.AddEvent(now, "cancelled");
  } else if (!job.cancel_requested) {
    job.cancel_requested = true;
    job.state = JobState::kStopping;
    job.reason = "cancelled";
    job.AddEvent(now, absl::StrCat("cancel requested: sending ",
                                   SignalName(job.spec.cancel_signal)));
    StopTasks(job, job.spec.cancel_signal, job.spec.cancel_grace);
  }
  if (absl::Status st = Persist({&job}); !st.ok()) {
    job = before;
    return st;
  }
  return JobJson(job, now);
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
        ToJobRequest(job.spec, cluster_, job.id, job.submit_time);
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
    absl::StatusOr<SubmitOutcome> out = scheduler_->Submit(req, now);
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
  if (it == jobs_.end()) {
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
    nlohmann::json j = JobJson(job, now);
    j.erase("events");
    j.erase("spec");
    out.push_back(std::move(j));
    if (f.limit > 0 && static_cast<int>(out.size()) >= f.limit) break;
  }
  return {{"jobs", std::move(out)}};
}

absl::StatusOr<std::string> Controller::NodeAddress(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  if (nodes_[n].address.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("node ", name, " has never registered: no agent address"));
  }
  return nodes_[n].address;
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
                                                               int task) const {
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

absl::StatusOr<std::string> Controller::JobUser(JobId id) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(id);
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

void Controller::StartJob(JobRecord& job, absl::Time now) {
  const SchedJob* sj = scheduler_->Find(job.id);
  const Placement& p = sj->placement;
  job.state = JobState::kRunning;
  job.start_time = now;
  job.running_time.reset();
  job.tasks.clear();
  ++decisions_;
  if (job.restart_count == 0) {
    queue_wait_.Observe(absl::ToDoubleSeconds(now - job.submit_time));
  }
  job.switch_level = p.switch_level;
  job.switch_name =
      p.switch_index >= 0 ? cluster_.topology.sw(p.switch_index).name : "";
  // MASTER_PORT: a port of the rank-0 node not used by another live job.
  Node& master = nodes_[p.tasks[0].node];
  int port = options_.master_port_base +
             static_cast<int>(job.id % options_.master_port_count);
  for (int i = 0;
       i < options_.master_port_count && master.master_ports.contains(port);
       ++i) {
    port = options_.master_port_base +
           (port - options_.master_port_base + 1) % options_.master_port_count;
  }
  master.master_ports.insert(port);
  job.master_port = port;

  for (size_t i = 0; i < p.tasks.size(); ++i) {
    TaskRecord t;
    t.index = static_cast<int>(i);
    t.node = cluster_.nodes[p.tasks[i].node].name;
    for (int g = 0; g < kMaxGpusPerNode; ++g) {
      if (p.tasks[i].gpu_mask & (1u << g)) t.gpus.push_back(g);
    }
    t.task_id = TaskId(job.id, t.index, job.restart_count);
    t.state = TaskRecord::State::kLaunching;
    job.tasks.push_back(std::move(t));
  }
  for (const TaskRecord& t : job.tasks)
    actions_.push_back(LaunchAction(job, t));
  job.AddEvent(now, absl::StrCat("started on ", p.nodes, " node(s)",
                                 job.switch_name.empty()
                                     ? ""
                                     : absl::StrCat(" under ", job.switch_name),
                                 " (", job.tasks.size(), " task(s))"));
}

AgentAction Controller::LaunchAction(const JobRecord& job,
                                     const TaskRecord& t) const {
  const int procs = job.spec.processes_per_task;
  // No dir and no root: the agent gives the job one on each node.
  const std::string ckpt =
      !job.spec.checkpoint.dir.empty() ? job.spec.checkpoint.dir
      : options_.checkpoint_root.empty()
          ? ""
          : absl::StrCat(options_.checkpoint_root, "/", job.id);
  const int master = NodeIndex(job.tasks[0].node);
  nlohmann::json env = job.spec.env;
  env["CUDA_VISIBLE_DEVICES"] = absl::StrJoin(t.gpus, ",");
  env["MASTER_ADDR"] = master >= 0 ? HostOf(nodes_[master].address) : "";
  env["MASTER_PORT"] = std::to_string(job.master_port);
  env["WORLD_SIZE"] = std::to_string(job.tasks.size() * procs);
  env["NODE_RANK"] = std::to_string(t.index);
  env["LOCAL_WORLD_SIZE"] = std::to_string(procs);
  env["LOOM_JOB_ID"] = std::to_string(job.id);
  env["LOOM_TASK_INDEX"] = std::to_string(t.index);
  env["LOOM_RESTART_COUNT"] = std::to_string(job.restart_count);
  if (!ckpt.empty()) env["LOOM_CHECKPOINT_DIR"] = ckpt;
  AgentAction a;
  a.kind = AgentAction::Kind::kLaunch;
  a.node = t.node;
  const int n = NodeIndex(t.node);
  a.address = n >= 0 ? nodes_[n].address : "";
  a.task_id = t.task_id;
  a.job = job.id;
  a.run = job.restart_count;
  a.body = {{"task_id", t.task_id},
            {"node", t.node},
            {"job_id", job.id},
            {"user", job.spec.user},
            {"task_index", t.index},
            {"argv", job.spec.command},
            {"env", env},
            {"working_dir", job.spec.working_dir},
            {"gpus", t.gpus},
            {"processes", procs},
            {"rank_base", t.index * procs}};
  return a;
}

void Controller::StopTasks(JobRecord& job, int signal, absl::Duration grace) {
  for (const TaskRecord& t : job.tasks) {
    if (!TaskLive(t)) continue;
    const int n = NodeIndex(t.node);
    if (n < 0 || nodes_[n].state == Node::State::kDown) continue;
    AgentAction a;
    a.kind = AgentAction::Kind::kStop;
    a.node = t.node;
    a.address = nodes_[n].address;
    a.task_id = t.task_id;
    a.job = job.id;
    a.body = {{"signal", signal},
              {"grace_ms", absl::ToInt64Milliseconds(grace)}};
    actions_.push_back(std::move(a));
  }
}

void Controller::TaskEnded(JobRecord& job, TaskRecord& task, absl::Time now,
                           const std::string& why) {
  const bool failed = task.state == TaskRecord::State::kLost ||
                      task.exit_code.value_or(0) != 0 || task.signal;
  if (failed && job.state == JobState::kRunning) {
    if (task.state != TaskRecord::State::kLost) ++failures_["task_failed"];
    job.state = JobState::kStopping;
    job.reason =
        !why.empty() ? why
        : task.state == TaskRecord::State::kLost
            ? absl::StrCat("task ", task.index, " on ", task.node, " was lost")
        : task.signal ? absl::StrCat("task ", task.index, " killed by ",
                                     SignalName(*task.signal))
                      : absl::StrCat("task ", task.index, " exited with code ",
                                     task.exit_code.value_or(-1));
    job.AddEvent(now, job.reason + "; stopping the other tasks");
    StopTasks(job, job.spec.cancel_signal, job.spec.cancel_grace);
  }
  if (std::any_of(job.tasks.begin(), job.tasks.end(), TaskLive)) return;
  FinishJob(job, now);
}

void Controller::FinishJob(JobRecord& job, absl::Time now) {
  bool ok = true;
  std::optional<int> code;
  for (const TaskRecord& t : job.tasks) {
    if (t.state == TaskRecord::State::kLost) {
      ok = false;
      continue;
    }
    const int c = t.signal ? 128 + *t.signal : t.exit_code.value_or(0);
    if (c != 0) {
      ok = false;
      if (!code) code = c;
    }
  }
  job.exit_code = code.value_or(ok ? 0 : 1);
  job.gpu_seconds += CurrentRunGpuSeconds(job, now);
  if (!job.tasks.empty()) {
    const int master = NodeIndex(job.tasks[0].node);
    if (master >= 0) nodes_[master].master_ports.erase(job.master_port);
  }
  (void)scheduler_->Finish(job.id, now);
  const bool preempted = job.preempted && !job.cancel_requested;
  RetryDecision retry;
  if (job.launch_refused && !job.cancel_requested) {
    ok = false;
    if (job.exit_code == 0) job.exit_code = 1;
    absl::StrAppend(&job.reason, kNotAgainAfterRefusal);
  } else if (preempted || (!ok && !job.cancel_requested)) {
    retry = DecideRetry(job.spec.restart, job.spec.requeue,
                        preempted ? RunEnd::kRequeued : RunEnd::kFailed,
                        job.restarts_used, job.requeues);
    if (!retry.again && preempted) {
      // Asked to stop, so its exit code says nothing: it did not finish.
      ok = false;
      if (job.exit_code == 0) job.exit_code = 1;
    }
    if (!retry.why_not.empty()) {
      absl::StrAppend(&job.reason, "; not queued again: ", retry.why_not);
    }
  }
  if (retry.again) {
    // The restart policy: the whole gang goes back to the queue after the
    // backoff, with LOOM_RESTART_COUNT one higher and new task ids. A
    // preempted (or moved) job follows `requeue` and does not use up its
    // restarts.
    const std::string why = job.reason.empty()
                                ? absl::StrCat("exit code ", *job.exit_code)
                                : job.reason;
    const absl::Duration wait = retry.wait;
    if (preempted) {
      ++job.requeues;
    } else {
      ++job.restarts_used;
      failed_at_[job.id] = now;  // recovery time: until it runs again
    }
    ++job.restart_count;
    job.preempted = false;
    job.state = JobState::kPending;
    job.not_before = now + wait;
    job.reason = preempted
                     ? absl::StrCat("requeued: ", why)
                     : absl::StrCat("restart ", job.restarts_used, " of ",
                                    job.spec.restart.max, " after: ", why);
    job.AddEvent(now, absl::StrCat(job.reason, "; queued again in ",
                                   FormatDurationShort(wait)));
    job.tasks.clear();
    job.exit_code.reset();
    job.start_time.reset();
    job.running_time.reset();
    backoff_.insert(job.id);
    return;
  }
  if (job.cancel_requested) {
    job.state = JobState::kCancelled;
  } else if (ok) {
    job.state = JobState::kSucceeded;
    job.reason = "";
  } else {
    job.state = JobState::kFailed;
  }
  job.end_time = now;
  job.AddEvent(now, absl::StrCat(std::string(JobStateName(job.state)),
                                 " (exit code ", *job.exit_code, ")"));
}

nlohmann::json Controller::TaskReports(const std::string& node_name,
                                       const nlohmann::json& tasks,
                                       bool registering, absl::Time now,
                                       std::vector<const JobRecord*>* dirty) {
  nlohmann::json stop = nlohmann::json::array();
  nlohmann::json ack = nlohmann::json::array();
  absl::flat_hash_set<std::string> reported;
  for (const nlohmann::json& t : tasks) {
    const std::string task_id = t.value("task_id", "");
    const std::string state = t.value("state", "");
    reported.insert(task_id);
    std::optional<JobId> jid = JobOfTask(task_id);
    JobRecord* job = nullptr;
    TaskRecord* task = nullptr;
    if (jid) {
      auto it = jobs_.find(*jid);
      if (it != jobs_.end()) {
        job = &it->second;
        for (TaskRecord& r : job->tasks) {
          if (r.task_id == task_id && r.node == node_name) task = &r;
        }
      }
    }
    if (state != "running") ack.push_back(task_id);
    if (task == nullptr || !TaskLive(*task)) {
      // Not a task this node should run (any more): stop it.
      if (state == "running") stop.push_back(task_id);
      continue;
    }
    if (state == "running") {
      if (task->state == TaskRecord::State::kLaunching) {
        task->state = TaskRecord::State::kRunning;
        NoteRunning(*job, now);
        dirty->push_back(job);
      }
      continue;
    }
    task->state = state == "exited" ? TaskRecord::State::kExited
                                    : TaskRecord::State::kLost;
    if (t.contains("exit_code") && t["exit_code"].is_number_integer()) {
      task->exit_code = t["exit_code"].get<int>();
    }
    if (t.contains("signal") && t["signal"].is_number_integer() &&
        t["signal"].get<int>() != 0) {
      task->signal = t["signal"].get<int>();
    }
    TaskEnded(*job, *task, now);
    dirty->push_back(job);
  }
  if (registering) {
    // Tasks this node should run that its agent does not know: lost. A task
    // still `launching` may never have reached the agent (a server killed
    // between writing the start and sending the launch): send the launch
    // again; the agent answers 409 for a task id it already has.
    for (auto& [id, job] : jobs_) {
      for (TaskRecord& task : job.tasks) {
        if (task.node != node_name || !TaskLive(task) ||
            reported.contains(task.task_id)) {
          continue;
        }
        if (task.state == TaskRecord::State::kLaunching) {
          actions_.push_back(LaunchAction(job, task));
          continue;
        }
        task.state = TaskRecord::State::kLost;
        TaskEnded(job, task, now);
        dirty->push_back(&job);
      }
    }
  }
  return {{"stop", std::move(stop)}, {"ack", std::move(ack)}};
}

absl::StatusOr<nlohmann::json> Controller::Register(const nlohmann::json& body,
                                                    absl::Time now) {
  if (absl::Status st = CheckAgentBody(body, true); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const std::string name = body.value("name", "");
  const int n = NodeIndex(name);
  if (n < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "name: node '", name, "' is not in the cluster spec of this server"));
  }
  const NodeSpec& spec = cluster_.nodes[n];
  const nlohmann::json gpus = body.value("gpus", nlohmann::json::array());
  if (!gpus.is_array() || static_cast<int>(gpus.size()) != spec.gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "gpus: node ", name, " reports ", gpus.is_array() ? gpus.size() : 0,
        " GPUs; the cluster spec says ", spec.gpus));
  }
  for (const nlohmann::json& g : gpus) {
    if (g.value("model", "") != cluster_.gpu_models[spec.gpu_model].name) {
      return absl::InvalidArgumentError(
          absl::StrCat("gpus: node ", name, " has a ", g.value("model", "?"),
                       " GPU; the cluster spec says ",
                       cluster_.gpu_models[spec.gpu_model].name));
    }
  }
  const std::string address = body.value("address", "");
  if (address.empty()) {
    return absl::InvalidArgumentError("address: required (host:port)");
  }
  Node& node = nodes_[n];
  node.address = address;
  node.hostname = body.value("hostname", "");
  node.emulated = body.value("emulated", false);
  node.last_heartbeat = now;
  node.state = Node::State::kUp;
  node.suspect = false;
  if (node.reason.rfind("no heartbeat", 0) == 0 ||
      node.reason.rfind("no agent registered", 0) == 0) {
    node.reason.clear();
  }
  std::vector<const JobRecord*> dirty;
  nlohmann::json reply = TaskReports(
      name, body.value("tasks", nlohmann::json::array()), true, now, &dirty);
  UpdateSchedulable(n);
  ApplyHealth(n, body, now, &dirty);
  (void)Persist(dirty);
  reply["heartbeat_interval_ms"] =
      absl::ToInt64Milliseconds(options_.heartbeat_interval);
  reply["fence_after_ms"] = absl::ToInt64Milliseconds(options_.fence_after);
  return reply;
}

absl::StatusOr<nlohmann::json> Controller::Heartbeat(const nlohmann::json& body,
                                                     absl::Time now) {
  if (absl::Status st = CheckAgentBody(body, false); !st.ok()) return st;
  absl::MutexLock lock(&mu_);
  const std::string name = body.value("name", "");
  const int n = NodeIndex(name);
  if (n < 0) {
    return absl::NotFoundError(absl::StrCat("unknown node '", name, "'"));
  }
  Node& node = nodes_[n];
  if (node.state != Node::State::kUp) {
    // Down (or never registered): the agent must register again, so that
    // its tasks are reconciled before it gets new work.
    return absl::FailedPreconditionError(
        absl::StrCat("node ", name, " is not registered; register again"));
  }
  node.last_heartbeat = now;
  if (node.suspect) {
    node.suspect = false;
    UpdateSchedulable(n);
  }
  std::vector<const JobRecord*> dirty;
  nlohmann::json reply = TaskReports(
      name, body.value("tasks", nlohmann::json::array()), false, now, &dirty);
  ApplyHealth(n, body, now, &dirty);
  if (absl::Status st = Persist(dirty); !st.ok()) {
    // Do not acknowledge exits that are not on disk: the agent reports
    // them again.
    reply["ack"] = nlohmann::json::array();
  }
  return reply;
}

void Controller::NoteRunning(JobRecord& job, absl::Time now) {
  if (job.running_time.has_value()) return;
  for (const TaskRecord& t : job.tasks) {
    if (t.state != TaskRecord::State::kRunning) return;
  }
  job.running_time = now;
  if (auto it = failed_at_.find(job.id); it != failed_at_.end()) {
    recovery_.Observe(absl::ToDoubleSeconds(now - it->second));
    failed_at_.erase(it);
  }
  job.AddEvent(
      now, absl::StrCat("running: all ", job.tasks.size(), " task(s) started"));
}

void Controller::ActionDone(const AgentAction& action,
                            const absl::Status& status, absl::Time now) {
  if (action.kind != AgentAction::Kind::kLaunch) return;
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(action.job);
  if (it == jobs_.end()) return;
  JobRecord& job = it->second;
  for (TaskRecord& t : job.tasks) {
    if (t.task_id != action.task_id || !TaskLive(t)) continue;
    if (status.ok()) {
      // The agent answered once every process was exec'd. Not persisted
      // here (one write per task would cost a sync each): the next tick
      // writes it, and a restarted server learns it from heartbeats anyway.
      if (t.state == TaskRecord::State::kLaunching) {
        t.state = TaskRecord::State::kRunning;
        NoteRunning(job, now);
        unsaved_.insert(job.id);
      }
      return;
    }
    t.state = TaskRecord::State::kLost;
    // InvalidArgument: the agent refused the task as specified (HTTP 400),
    // so another run would be refused too; anything else (no answer, an
    // agent error) may pass.
    const bool refused = absl::IsInvalidArgument(status);
    if (refused) job.launch_refused = true;
    const std::string why =
        absl::StrCat("launch of task ", t.index, " on ", t.node,
                     refused ? " refused: " : " failed: ", status.message());
    // The agent's reason (an unknown user, a bad working directory) says
    // more than "lost". TaskEnded records it when it stops the gang.
    if (job.state != JobState::kRunning) job.AddEvent(now, why);
    TaskEnded(job, t, now, why);
    (void)Persist({&job});
    return;
  }
}

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
  // Checkpoint reports held back by the throttle.
  for (JobId id : checkpoint_throttle_.TakeDue(now)) {
    auto it = jobs_.find(id);
    if (it == jobs_.end() || IsFinal(it->second.state)) continue;
    AddCheckpointEvent(it->second);
    dirty.push_back(&it->second);
  }
  // Restarts whose backoff is over go back to the queue.
  for (auto it = backoff_.begin(); it != backoff_.end();) {
    JobRecord& job = jobs_.at(*it);
    if (job.state != JobState::kPending || !job.not_before ||
        *job.not_before > now) {
      ++it;
      continue;
    }
    absl::StatusOr<JobRequest> req =
        ToJobRequest(job.spec, cluster_, job.id, job.submit_time);
    absl::StatusOr<SubmitOutcome> out =
        req.ok() ? scheduler_->Submit(*req, now)
                 : absl::StatusOr<SubmitOutcome>(req.status());
    if (out.ok() && out->kind == SubmitOutcome::Kind::kInfeasible) {
      out = absl::FailedPreconditionError(out->reason);
    }
    if (!out.ok()) {
      job.state = JobState::kFailed;
      job.reason =
          absl::StrCat("cannot be queued again: ", out.status().message());
      job.end_time = now;
      job.AddEvent(now, job.reason);
    }
    job.not_before.reset();
    dirty.push_back(&job);
    backoff_.erase(it++);
  }
  // Liveness: silent nodes are suspect (no new work), then down (their
  // tasks are lost). A node not heard from since this server started is
  // down once a whole timeout has passed: its tasks were fenced by then.
  for (size_t n = 0; n < nodes_.size(); ++n) {
    Node& node = nodes_[n];
    if (node.state == Node::State::kUnknown) {
      if (now - created_ > options_.heartbeat_timeout &&
          !scheduler_->JobsOnNode(static_cast<int>(n)).empty()) {
        node.state = Node::State::kDown;
        node.reason =
            absl::StrCat("no agent registered within ",
                         absl::FormatDuration(options_.heartbeat_timeout),
                         " of this server's start");
        NodeLost(static_cast<int>(n), now, &dirty);
      }
      continue;
    }
    if (node.state != Node::State::kUp) continue;
    const absl::Duration silent = now - node.last_heartbeat;
    if (silent > options_.heartbeat_timeout) {
      node.state = Node::State::kDown;
      node.suspect = false;
      node.reason =
          absl::StrCat("no heartbeat for ", FormatDurationShort(silent));
      UpdateSchedulable(static_cast<int>(n));
      NodeLost(static_cast<int>(n), now, &dirty);
    } else if (!node.suspect && silent > options_.suspect_after) {
      node.suspect = true;
      UpdateSchedulable(static_cast<int>(n));
    }
  }
  // Scheduling.
  PassResult pass = scheduler_->Schedule(now);
  for (JobId id : pass.started) {
    JobRecord& job = jobs_.at(id);
    StartJob(job, now);
    dirty.push_back(&job);
  }
  for (const Preemption& p : pass.preempted) {
    JobRecord& job = jobs_.at(p.victim);
    const JobRecord& winner = jobs_.at(p.for_job);
    const SchedJob* w = scheduler_->Find(p.for_job);
    const SchedJob* v = scheduler_->Find(p.victim);
    const bool by_priority = w == nullptr || v == nullptr ||
                             w->request.priority > v->request.priority;
    job.preempted_by = p.for_job;
    ++decisions_;
    ++preemptions_;
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

void Controller::Evict(JobRecord& job, const std::string& why, absl::Time now) {
  if (job.state != JobState::kRunning) return;
  job.state = JobState::kStopping;
  job.preempted = true;
  job.reason = why;
  const SchedJob* sj = scheduler_->Find(job.id);
  const double lost = sj != nullptr ? sj->WorkAtRisk(now) / 3600.0 : 0;
  job.AddEvent(now, absl::StrCat(why, "; sending ",
                                 SignalName(job.spec.checkpoint.signal),
                                 " (checkpoint now), SIGKILL after ",
                                 FormatDurationShort(job.spec.checkpoint.grace),
                                 "; ", fmt::format("{:.2f}", lost),
                                 " GPU-hours since the last checkpoint"));
  StopTasks(job, job.spec.checkpoint.signal, job.spec.checkpoint.grace);
}

void Controller::NodeLost(int n, absl::Time now,
                          std::vector<const JobRecord*>* dirty) {
  ++failures_["node_down"];
  for (auto& [id, job] : jobs_) {
    for (TaskRecord& t : job.tasks) {
      if (t.node != cluster_.nodes[n].name || !TaskLive(t)) continue;
      t.state = TaskRecord::State::kLost;
      TaskEnded(job, t, now);
      dirty->push_back(&job);
    }
  }
}

void Controller::ApplyHealth(int n, const nlohmann::json& body, absl::Time now,
                             std::vector<const JobRecord*>* dirty) {
  constexpr size_t kMaxProblems = 16;
  constexpr size_t kMaxProblemLength = 300;
  auto health = body.find("health");
  if (health == body.end() || !health->is_object()) return;
  auto list = health->find("problems");
  if (list == health->end() || !list->is_array()) return;
  std::vector<std::string> problems;
  for (const nlohmann::json& p : *list) {
    if (!p.is_string() || problems.size() >= kMaxProblems) continue;
    const std::string problem = p.get<std::string>();
    problems.emplace_back(TruncateUtf8(problem, kMaxProblemLength));
  }
  Node& node = nodes_[n];
  node.health = problems;
  if (problems.empty() || node.unhealthy) return;
  // Drained until an operator uncordons it (as Slurm's DRAIN by a health
  // check program): a GPU that failed once is not trusted to be back.
  ++failures_["unhealthy"];
  node.unhealthy = true;
  node.draining = true;
  node.reason = absl::StrCat("unhealthy: ", absl::StrJoin(problems, "; "));
  (void)PersistNode(n);
  UpdateSchedulable(n);
  const std::string& name = cluster_.nodes[n].name;
  for (auto& [id, job] : jobs_) {
    if (job.state != JobState::kRunning) continue;
    if (std::none_of(job.tasks.begin(), job.tasks.end(),
                     [&](const TaskRecord& t) {
                       return t.node == name && TaskLive(t);
                     })) {
      continue;
    }
    job.preempted_by = 0;
    Evict(job, absl::StrCat("moved off ", name, ": ", node.reason), now);
    dirty->push_back(&job);
  }
}

std::vector<AgentAction> Controller::TakeActions() {
  absl::MutexLock lock(&mu_);
  std::vector<AgentAction> out;
  out.swap(actions_);
  return out;
}

nlohmann::json Controller::JobJson(const JobRecord& job, absl::Time now) const {
  std::string reason = job.reason;
  if (job.state == JobState::kPending && job.not_before) {
    reason = absl::StrCat(job.reason, "; queued again at ",
                          FormatTimestamp(*job.not_before));
  } else if (job.state == JobState::kPending) {
    reason = scheduler_->ExplainPending(job.id, now);
  } else if (job.state == JobState::kHeld) {
    reason = "held: waiting for `loom release`";
  }
  const SchedJob* sj = scheduler_->Find(job.id);
  return JobApiJson(job, cluster_, reason, sj ? &sj->request.shape : nullptr,
                    [this](const std::string& node) {
                      const int n = NodeIndex(node);
                      return n >= 0 ? HostOf(nodes_[n].address) : std::string();
                    });
}

std::string Controller::NodeStateName(int n) const {
  const Node& node = nodes_[n];
  if (node.state == Node::State::kDown) return "down";
  if (node.state == Node::State::kUnknown) return "unknown";
  if (node.suspect) return "suspect";
  if (node.draining) {
    return scheduler_->JobsOnNode(n).empty() ? "drained" : "draining";
  }
  if (node.cordoned) return "cordoned";
  return "up";
}

Controller::Utilization Controller::CurrentUtilization() const {
  absl::MutexLock lock(&mu_);
  Utilization u;
  for (size_t n = 0; n < nodes_.size(); ++n) {
    u.total_gpus += cluster_.nodes[n].gpus;
    u.allocated_gpus += cluster_.nodes[n].gpus -
                        scheduler_->state().FreeGpus(static_cast<int>(n));
  }
  u.pending_jobs =
      scheduler_->pending_count() + static_cast<int>(backoff_.size());
  u.running_jobs = scheduler_->running_count();
  return u;
}

void Controller::WriteMetrics(MetricsWriter& out, absl::Time now) const {
  absl::MutexLock lock(&mu_);
  // Jobs by state and project; pending jobs by reason; GPU-seconds.
  std::map<std::pair<std::string, std::string>, int> by_state;
  std::map<std::string, int> pending;
  std::map<std::pair<std::string, std::string>, double> gpu_seconds;
  for (const auto& [id, job] : jobs_) {
    ++by_state[{std::string(JobStateName(job.state)), job.spec.project}];
    double s = job.gpu_seconds;
    if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
      s += CurrentRunGpuSeconds(job, now);
    }
    gpu_seconds[{job.spec.project, job.spec.user}] += s;
    if (job.state == JobState::kHeld) {
      ++pending["held"];
    } else if (job.state == JobState::kPending && job.not_before) {
      ++pending["restart_backoff"];
    } else if (job.state == JobState::kPending) {
      const SchedJob* sj = scheduler_->Find(job.id);
      ++pending[sj != nullptr
                    ? PendingReasonCodeName(scheduler_->ReasonFor(*sj).code)
                    : "unknown"];
    }
  }
  out.Family("loom_jobs", "Jobs by state and project.", MetricType::kGauge);
  for (const auto& [key, n] : by_state) {
    out.Sample("loom_jobs", {{"state", key.first}, {"project", key.second}}, n);
  }
  out.Family("loom_pending_jobs",
             "Jobs that wait (pending or held), by the reason's code.",
             MetricType::kGauge);
  for (const auto& [reason, n] : pending) {
    out.Sample("loom_pending_jobs", {{"reason", reason}}, n);
  }
  out.Family("loom_gpu_seconds_total",
             "GPU-seconds allocated to jobs, by project and user.",
             MetricType::kCounter);
  for (const auto& [key, s] : gpu_seconds) {
    out.Sample("loom_gpu_seconds_total",
               {{"project", key.first}, {"user", key.second}}, s);
  }
  // GPUs by pool, model and state; nodes by state.
  struct Gpus {
    int total = 0, allocated = 0, free = 0, unavailable = 0;
  };
  std::map<std::pair<std::string, std::string>, Gpus> gpus;
  std::map<std::string, int> nodes;
  for (const std::string& s : {"up", "suspect", "cordoned", "draining",
                               "drained", "down", "unknown"}) {
    nodes[s] = 0;
  }
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const int n = static_cast<int>(i);
    const NodeSpec& spec = cluster_.nodes[n];
    const std::string state = NodeStateName(n);
    ++nodes[state];
    Gpus& g = gpus[{cluster_.pools[spec.pool].name,
                    cluster_.gpu_models[spec.gpu_model].name}];
    const int free = scheduler_->state().FreeGpus(n);
    g.total += spec.gpus;
    g.allocated += spec.gpus - free;
    (state == "up" ? g.free : g.unavailable) += free;
  }
  out.Family("loom_gpus",
             "GPUs by pool, model and state: allocated to jobs, free (on "
             "nodes that take work) or unavailable (free, on nodes that are "
             "down, suspect, cordoned or drained).",
             MetricType::kGauge);
  for (const auto& [key, g] : gpus) {
    for (const auto& [state, v] :
         {std::pair<const char*, int>{"total", g.total},
          {"allocated", g.allocated},
          {"free", g.free},
          {"unavailable", g.unavailable}}) {
      out.Sample(
          "loom_gpus",
          {{"pool", key.first}, {"gpu_model", key.second}, {"state", state}},
          v);
    }
  }
  out.Family("loom_nodes", "Nodes by state.", MetricType::kGauge);
  for (const auto& [state, n] : nodes) {
    out.Sample("loom_nodes", {{"state", state}}, n);
  }
  // Decisions, failures, recovery.
  out.Family("loom_scheduling_decisions_total",
             "Scheduling decisions since the server started: job starts and "
             "preemptions.",
             MetricType::kCounter);
  out.Sample("loom_scheduling_decisions_total", {}, decisions_);
  out.Family("loom_preemptions_total",
             "Jobs preempted since the server started.", MetricType::kCounter);
  out.Sample("loom_preemptions_total", {}, preemptions_);
  out.Family("loom_failures_detected_total",
             "Failures detected since the server started: node_down (no "
             "heartbeat), task_failed (a task exited non-zero or was killed), "
             "unhealthy (a node failed its health checks).",
             MetricType::kCounter);
  for (const char* kind : {"node_down", "task_failed", "unhealthy"}) {
    auto it = failures_.find(kind);
    out.Sample("loom_failures_detected_total", {{"kind", kind}},
               it == failures_.end() ? 0 : it->second);
  }
  out.Family("loom_recovery_seconds",
             "From a job's failure to every task of its next run running.",
             MetricType::kHistogram);
  out.HistogramSample("loom_recovery_seconds", {}, recovery_);
  out.Family("loom_queue_wait_seconds",
             "From submission to the first start of a job.",
             MetricType::kHistogram);
  out.HistogramSample("loom_queue_wait_seconds", {}, queue_wait_);
}

nlohmann::json Controller::NodeJson(int n, absl::Time now) const {
  const NodeSpec& spec = cluster_.nodes[n];
  const Node& node = nodes_[n];
  const std::vector<JobId> jobs = scheduler_->JobsOnNode(n);
  const std::string state = NodeStateName(n);
  return {{"name", spec.name},
          {"state", state},
          {"reason", node.suspect ? absl::StrCat("no heartbeat for ",
                                                 FormatDurationShort(
                                                     now - node.last_heartbeat))
                                  : node.reason},
          {"health", node.health},
          {"address", node.address},
          {"hostname", node.hostname},
          {"pool", cluster_.pools[spec.pool].name},
          {"gpu_model", cluster_.gpu_models[spec.gpu_model].name},
          {"gpus", spec.gpus},
          {"gpus_allocated", spec.gpus - scheduler_->state().FreeGpus(n)},
          {"cpus", spec.cpus_milli / 1000.0},
          {"memory_bytes", spec.memory_bytes},
          {"leaf", cluster_.topology.sw(cluster_.topology.leaf_of(n)).name},
          {"emulated", node.emulated},
          {"last_heartbeat",
           node.last_heartbeat == absl::InfinitePast()
               ? nlohmann::json(nullptr)
               : nlohmann::json(FormatTimestamp(node.last_heartbeat))},
          {"jobs", jobs}};
}

nlohmann::json Controller::ListNodes(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (size_t n = 0; n < nodes_.size(); ++n) {
    out.push_back(NodeJson(static_cast<int>(n), now));
  }
  return {{"nodes", std::move(out)}};
}

absl::StatusOr<nlohmann::json> Controller::GetNode(const std::string& name,
                                                   absl::Time now) const {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  return NodeJson(n, now);
}

absl::StatusOr<nlohmann::json> Controller::SetNodeMode(const std::string& name,
                                                       const std::string& op,
                                                       absl::Time now) {
  absl::MutexLock lock(&mu_);
  const int n = NodeIndex(name);
  if (n < 0) return absl::NotFoundError(absl::StrCat("no node '", name, "'"));
  Node& node = nodes_[n];
  const Node before = node;
  if (op == "cordon") {
    node.cordoned = true;
    node.reason = "cordoned";
  } else if (op == "uncordon") {
    node.cordoned = false;
    node.draining = false;
    node.unhealthy = false;  // drained again if its checks still fail
    node.reason = "";
  } else if (op == "drain") {
    node.draining = true;
    node.reason = "drained by an operator";
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown node operation '", op, "'"));
  }
  if (absl::Status st = PersistNode(n); !st.ok()) {
    node = before;
    return st;
  }
  UpdateSchedulable(n);
  return NodeJson(n, now);
}

nlohmann::json Controller::ListProjects(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  absl::flat_hash_map<std::string, std::pair<int, int>> counts;
  for (const auto& [id, job] : jobs_) {
    auto& c = counts[job.spec.project];
    if (job.state == JobState::kPending || job.state == JobState::kHeld) {
      ++c.first;
    }
    if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
      ++c.second;
    }
  }
  std::map<std::string, nlohmann::json> out;
  for (const ProjectSpec& p : cluster_.projects) {
    out[p.name] = {{"name", p.name},
                   {"quota_gpus", p.quota_gpus},
                   {"weight", p.weight},
                   {"running_gpus", 0},
                   {"gpu_seconds", 0.0}};
  }
  for (const ProjectUsage& u : scheduler_->Usage(now)) {
    nlohmann::json& j = out[u.name];
    j["name"] = u.name;
    if (!j.contains("quota_gpus")) {
      j["quota_gpus"] = 0;
      j["weight"] = u.weight;
    }
    j["running_gpus"] = u.running_gpus;
    j["gpu_seconds"] = u.gpu_seconds;
  }
  nlohmann::json list = nlohmann::json::array();
  for (auto& [name, j] : out) {
    auto it = counts.find(name);
    j["pending_jobs"] = it == counts.end() ? 0 : it->second.first;
    j["running_jobs"] = it == counts.end() ? 0 : it->second.second;
    list.push_back(std::move(j));
  }
  return {{"projects", std::move(list)}};
}

}  // namespace loom
