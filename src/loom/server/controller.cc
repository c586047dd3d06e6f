// The controller's making and its state in the store: loading jobs, node
// settings and idempotency keys at start, and writing what changed. The
// rest of `Controller` is in controller_*.cc, one concern a file.

#include "loom/server/controller.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/sched/placement.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/job_events_store.h"
#include "loom/server/stored_job.h"
#include "loom/server/task_slice.h"

namespace loom {
namespace {

constexpr const char* kNodePrefix = "/nodes/";

}  // namespace

Controller::Controller(Cluster cluster, StateStore* store,
                       ControllerOptions options)
    : store_(store),
      options_(options),
      cluster_(std::make_shared<const Cluster>(std::move(cluster))),
      target_(cluster_),
      requests_(options.idempotency_key_lifetime),
      checkpoint_throttle_(options.checkpoint_write_interval),
      datasets_(store) {
  DatasetLister* lister = options.dataset_lister;
  if (lister == nullptr) {
    default_lister_ = std::make_unique<RcloneDatasetLister>("");
    lister = default_lister_.get();
  }
  dataset_resolver_ =
      std::make_unique<DatasetResolver>(lister, options.dataset_list_timeout);
}

absl::StatusOr<std::unique_ptr<Controller>> Controller::Create(
    Cluster cluster, StateStore* store, ControllerOptions options,
    absl::Time now, AccountingStore* accounting) {
  absl::StatusOr<std::unique_ptr<QueuePolicy>> policy =
      MakeQueuePolicy(options.policy, options.policy_options);
  if (!policy.ok()) return policy.status();
  std::unique_ptr<Controller> c(
      new Controller(std::move(cluster), store, options));
  absl::MutexLock lock(&c->mu_);
  c->accounting_ = accounting;
  c->created_ = now;
  c->counters_.recovery =
      *Histogram::Create({1, 2, 5, 10, 15, 20, 30, 45, 60, 120, 300});
  for (Histogram& h : c->counters_.recovery_phases) {
    h = *Histogram::Create(
        {0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 7.5, 10, 15, 30, 60, 300});
  }
  c->counters_.queue_wait = *Histogram::Create(
      {0.01, 0.1, 1, 10, 60, 300, 900, 3600, 4 * 3600, 24 * 3600});
  c->counters_.image_pull =
      *Histogram::Create({0.1, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600});
  if (absl::Status st = c->LoadClusterRevision(now); !st.ok()) return st;
  for (size_t i = 0; i < c->cluster_->nodes.size(); ++i) {
    c->node_index_[c->cluster_->nodes[i].name] = static_cast<int>(i);
  }
  c->scheduler_ = std::make_unique<Scheduler>(*c->cluster_, *std::move(policy),
                                              options.scheduler_options);
  c->nodes_.resize(c->cluster_->nodes.size());
  // Nodes are not schedulable until their agent registers. Their labels
  // are the declared ones and the topology's until then.
  for (size_t n = 0; n < c->nodes_.size(); ++n) {
    c->scheduler_->SetNodeSchedulable(static_cast<int>(n), false);
    c->scheduler_->SetNodeLabels(static_cast<int>(n),
                                 c->EffectiveLabels(static_cast<int>(n)));
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
    if (!j.is_object()) continue;
    // A field of another type is taken as absent (never an exception).
    auto flag = [&j](const char* key) {
      auto it = j.find(key);
      return it != j.end() && it->is_boolean() && it->get<bool>();
    };
    nodes_[n].cordoned = flag("cordoned");
    nodes_[n].draining = flag("draining");
    nodes_[n].unhealthy = flag("unhealthy");
    if (auto it = j.find("reason"); it != j.end() && it->is_string()) {
      nodes_[n].reason = it->get<std::string>();
    }
    if (auto it = j.find("stack_accepted"); it != j.end() && it->is_object()) {
      for (auto e = it->begin(); e != it->end(); ++e) {
        if (e.value().is_string()) {
          nodes_[n].accepted_stack[e.key()] = e.value().get<std::string>();
        }
      }
    }
  }
  if (absl::Status st = LoadMaintenances(); !st.ok()) return st;
  if (absl::Status st = datasets_.Load(&load_log_); !st.ok()) return st;
  int unreadable = 0;
  if (absl::Status st = ledger_.Load(*store_, &unreadable); !st.ok()) {
    return st;
  }
  if (unreadable > 0) {
    load_log_.push_back(JobStoreText(
        {{"msg", "usage ledger entries that cannot be read were skipped"},
         {"prefix", std::string(kUsagePrefix)},
         {"count", unreadable}}));
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
    JobRecord& job = jobs_[rec->id] = std::move(*rec);
    // Arrays come before their elements (IDs, so keys, in order).
    if (IsArrayJob(job)) RegisterArray(job);
    if (job.array_job != 0) NoteArrayElementLoaded(job);
    next_id_ = std::max(
        next_id_, job.id + 1 +
                      (IsArrayJob(job)
                           ? static_cast<JobId>(arrays_[job.id].indices.size())
                           : 0));
    // A job that ended keeps its state and reason, whatever the cluster
    // has become.
    if (IsFinal(job.state)) continue;
    // An array counts once against its user's limit, not per element.
    if (job.array_job == 0) user_jobs_.Add(job.spec.user, job.id);
    absl::StatusOr<JobRequest> req =
        ToJobRequest(job.spec, *cluster_, job.id, job.submit_time);
    // A run these paths end is charged as any run that ends (the ledger
    // gets it at the next write), so no GPU-second is lost.
    auto end_run = [&job, now] { ChargeRun(job, now, false); };
    if (!req.ok()) {
      // The cluster changed under the job: it can no longer be described.
      end_run();
      job.state = JobState::kFailed;
      job.reason = absl::StrCat("no longer valid on this cluster: ",
                                req.status().message());
      job.end_time = now;
      continue;
    }
    if (job.array_job == 0) {
      unfinished_by_name_[{job.spec.user, job.spec.name}].insert(job.id);
    }
    // Its spares, and after a node loss its last run's nodes, back.
    AddPlacementHints(job, &*req);
    if (job.state == JobState::kPending && job.not_before) {
      backoff_.insert(job.id);  // queued again by Tick when it is due
    } else if (job.state == JobState::kPending && GatedByDependency(job)) {
      WaitForDependency(job.id);  // checked again by the first Tick
    } else if (job.state == JobState::kPending && !job.last_nodes.empty() &&
               job.spec.spares > 0) {
      // It restarts on its survivors and spares, which the scheduler takes
      // only once their agents are back (`StepSpareRestores`).
      spare_restores_[job.id] = now + options_.suspect_after;
    } else if (job.state == JobState::kPending) {
      (void)QueueJob(job, *req, now);
    } else if ((job.state == JobState::kRunning ||
                job.state == JobState::kStopping) &&
               std::any_of(job.tasks.begin(), job.tasks.end(),
                           [&](const TaskRecord& t) {
                             return NodeIndex(t.node) < 0;
                           })) {
      // Its node left the cluster (a revision removed it while it drained):
      // not the job's fault; it runs again elsewhere.
      job.AddEvent(now, "its node is no longer in the cluster; queued again");
      end_run();
      job.state = JobState::kPending;
      job.tasks.clear();
      job.start_time.reset();
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
          p.tasks.push_back(t.slice && t.gpus.size() == 1
                                ? SlicePlacement(n, t.gpus[0], *t.slice)
                                : TaskPlacement{n, mask});
          p.gpu_model = cluster_->nodes[n].gpu_model;
          nodes_[n].master_ports.insert(job.master_port);
        }
      }
      absl::Status st =
          scheduler_->Restore(*req, p, job.start_time.value_or(now), 0, now);
      if (st.ok() && job.spec.spares > 0) with_spares_.insert(job.id);
      if (st.ok() && job.checkpoint_time &&
          job.checkpoint_run == job.restart_count) {
        scheduler_->ReportCheckpoint(job.id, *job.checkpoint_time);
      }
      if (!st.ok()) {
        end_run();
        job.state = JobState::kFailed;
        job.reason =
            absl::StrCat("could not restore after restart: ", st.message());
        job.end_time = now;
      }
    }
  }
  DropOrphanHistories(history_of);
  // Services, after the jobs (their replicas).
  if (absl::Status st = LoadServices(); !st.ok()) return st;
  // Purged jobs (docs/accounting.md) left their IDs behind.
  if (absl::StatusOr<KeyValue> kv = store_->Get(kNextJobIdKey); kv.ok()) {
    JobId next = 0;
    if (absl::SimpleAtoi(kv->value, &next)) next_id_ = std::max(next_id_, next);
  } else if (!absl::IsNotFound(kv.status())) {
    return kv.status();
  }
  // Idempotency keys, with the digests of their requests.
  absl::StatusOr<std::vector<KeyValue>> keys =
      store_->List(IdempotencyStoreKey(""));
  if (!keys.ok()) return keys.status();
  for (const KeyValue& kv : *keys) {
    const std::string key = kv.key.substr(IdempotencyStoreKey("").size());
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
  std::vector<Condition> c;
  m.reserve(jobs.size());
  absl::flat_hash_set<JobId> seen;  // a job may be listed more than once
  std::vector<UsageCharge> charges;
  std::vector<JobId> charged;
  for (const JobRecord* j : jobs) {
    if (!seen.insert(j->id).second) continue;
    // Only the parts that changed: an event alone rewrites the small
    // history, not the record.
    written_.AddWrites(*j, &m);
    // The runs that ended go to the usage ledger with the record that
    // ends them, in one commit.
    if (j->unledgered.empty()) continue;
    charged.push_back(j->id);
    for (const GpuSpan& s : j->unledgered) {
      charges.push_back({j->spec.project, j->spec.user, s});
    }
  }
  if (!charges.empty()) {
    if (absl::Status st = ledger_.AddWrites(*store_, charges, &c, &m);
        !st.ok()) {
      written_.Finish(false);
      return st;
    }
  }
  if (m.empty()) return absl::OkStatus();
  absl::StatusOr<int64_t> rev = store_->Commit(c, m);
  written_.Finish(rev.ok());
  ledger_.Finish(rev.ok());
  if (rev.ok()) {
    for (JobId id : charged) {
      if (auto it = jobs_.find(id); it != jobs_.end()) {
        it->second.unledgered.clear();
      }
    }
  }
  return rev.ok() ? absl::OkStatus() : rev.status();
}

absl::Status Controller::PersistNode(int node) {
  const Node& n = nodes_[node];
  nlohmann::json j = {{"cordoned", n.cordoned},
                      {"draining", n.draining},
                      {"unhealthy", n.unhealthy},
                      {"reason", n.reason}};
  if (!n.accepted_stack.empty()) j["stack_accepted"] = n.accepted_stack;
  absl::StatusOr<int64_t> rev = store_->Commit(
      {}, {Mutation::Put(absl::StrCat(kNodePrefix, cluster_->nodes[node].name),
                         JobStoreText(j))});
  return rev.ok() ? absl::OkStatus() : rev.status();
}

void Controller::UpdateSchedulable(int node) {
  const Node& n = nodes_[node];
  scheduler_->SetNodeSchedulable(
      node, n.state == Node::State::kUp && !n.suspect && !n.cordoned &&
                !n.draining && n.drift.empty() && n.mig_waits.empty());
}

std::vector<AgentAction> Controller::TakeActions() {
  absl::MutexLock lock(&mu_);
  std::vector<AgentAction> out;
  out.swap(actions_);
  return out;
}

}  // namespace loom
