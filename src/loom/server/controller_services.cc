// Inference services (docs/services.md): apply, read, scale, delete; the
// reconciler's step in `Tick` (replicas started, drained, stopped, replaced
// after a failure; rolling updates; autoscaling), and the gateway's side of
// the API: the backends it must serve and the statistics it reports.
// Replicas are jobs of one task (`JobRecord::service`), scheduled, launched,
// metered and requeued after a node loss as any job.

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fmt/format.h"
#include "loom/common/units.h"
#include "loom/core/job_name.h"
#include "loom/core/job_spec_fit.h"
#include "loom/core/service_ports.h"
#include "loom/sched/placement.h"
#include "loom/server/controller.h"
#include "loom/server/job_events_store.h"
#include "loom/server/service_plan.h"

namespace loom {
namespace {

// A gateway's report counts for this long.
constexpr absl::Duration kGatewayFresh = absl::Seconds(5);
// The most services one server keeps.
constexpr size_t kMaxServices = 1000;

nlohmann::json ProbeLaunchJson(const ProbeSpec& p) {
  return {{"http", p.http},
          {"period_ms", absl::ToInt64Milliseconds(p.period)},
          {"timeout_ms", absl::ToInt64Milliseconds(p.timeout)},
          {"failures", p.failures},
          {"initial_delay_ms", absl::ToInt64Milliseconds(p.initial_delay)}};
}

// The probes of a replica's launch body (docs/agent.md).
nlohmann::json ReplicaProbesJson(const ServiceSpec& spec) {
  nlohmann::json j = nlohmann::json::object();
  if (spec.readiness) j["readiness"] = ProbeLaunchJson(*spec.readiness);
  if (spec.liveness) j["liveness"] = ProbeLaunchJson(*spec.liveness);
  return j;
}

std::string_view PhaseName(ReplicaView::Phase p) {
  switch (p) {
    case ReplicaView::Phase::kPending:
      return "pending";
    case ReplicaView::Phase::kStarting:
      return "starting";
    case ReplicaView::Phase::kReady:
      return "ready";
    case ReplicaView::Phase::kDraining:
      return "draining";
    case ReplicaView::Phase::kStopping:
      return "stopping";
  }
  return "unknown";
}

}  // namespace

std::string ReplicaServerName(JobId job) { return absl::StrCat("j", job); }

absl::StatusOr<nlohmann::json> Controller::ApplyService(ServiceSpec spec,
                                                        absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (spec.gpus < 1) {
    return absl::InvalidArgumentError(
        "resources.gpus: a replica needs at least 1 GPU (loom schedules GPU "
        "work; partial GPUs come with MIG and shared GPUs)");
  }
  absl::StatusOr<JobRequest> req = ToReplicaRequest(spec, *cluster_, 0, now);
  if (!req.ok()) return req.status();
  if (spec.container.has_value()) {
    if (absl::Status st =
            CheckShmSize(spec.container->shm_size_bytes, spec.memory_bytes,
                         spec.gpu_model, *cluster_);
        !st.ok()) {
      return st;
    }
  }
  std::string why;
  if (!CouldEverRun(*cluster_, req->shape, &why)) {
    return absl::FailedPreconditionError(absl::StrCat("infeasible: ", why));
  }
  auto it = services_.find(spec.name);
  ServiceRecord s;
  bool created = false;
  if (it == services_.end()) {
    if (services_.size() >= kMaxServices) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "limit: the server keeps at most ", kMaxServices, " services"));
    }
    created = true;
    s.name = spec.name;
    s.created = now;
    s.desired = spec.replicas.min;
  } else {
    s = it->second;
    if (s.deleting) {
      return absl::FailedPreconditionError(
          absl::StrCat("service ", spec.name,
                       " is being deleted; apply it again once "
                       "`loom service show ",
                       spec.name, "` says it is gone"));
    }
    if (s.spec.user != spec.user && !spec.user.empty() &&
        !s.spec.user.empty()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "service ", spec.name, " belongs to user ", s.spec.user));
    }
  }
  // Its port: as written, or the one it had, or the lowest free one of the
  // cluster's range. One it takes anew (or for another project) must be a
  // service port of the cluster or the project's; one it keeps stays when
  // an operator narrows them.
  int port = spec.port.value_or(created ? 0 : s.port);
  if (port != 0 &&
      (created || port != s.port || spec.project != s.spec.project)) {
    if (absl::Status st = CheckServicePort(*cluster_, spec.project, port);
        !st.ok()) {
      return st;
    }
  }
  std::set<int> taken;
  for (const auto& [name, other] : services_) {
    if (name != spec.name && other.port == port && port != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("port: ", port, " is the port of service ", name));
    }
    taken.insert(other.port);
  }
  if (port == 0) {
    const ServicePortRange range = cluster_->services.port_range;
    for (int p = range.first; p <= range.last; ++p) {
      if (!taken.contains(p)) {
        port = p;
        break;
      }
    }
    if (port == 0) {
      return absl::ResourceExhaustedError(
          absl::StrCat("limit: port: every port of services.port_range (",
                       ServicePortRangeText(range),
                       ") is taken; give the service a `port`"));
    }
  }
  const std::string revision = ReplicaTemplateDigest(spec);
  const bool changed = created || !(s.spec == spec) || s.port != port;
  if (!changed) return ServiceJson(s, now);
  if (!created) {
    ++s.generation;
    s.AddEvent(now,
               revision != s.revision
                   ? absl::StrCat("applied generation ", s.generation,
                                  ": new revision ", revision.substr(0, 12),
                                  ", rolling update")
                   : absl::StrCat("applied generation ", s.generation));
  } else {
    s.AddEvent(now, absl::StrCat("created: ", spec.replicas.min,
                                 " replica(s) of revision ",
                                 revision.substr(0, 12), " on port ", port));
  }
  s.revision = revision;
  s.port = port;
  // A fixed count moves `desired`; a range keeps it inside.
  s.desired = spec.replicas.range
                  ? std::clamp(s.desired, spec.replicas.min, spec.replicas.max)
                  : spec.replicas.min;
  s.failures = 0;
  s.next_start.reset();
  s.spec = std::move(spec);
  s.updated = now;
  if (absl::Status st = PersistService(s); !st.ok()) return st;
  ServiceRecord& stored = services_[s.name] = std::move(s);
  return ServiceJson(stored, now);
}

absl::StatusOr<nlohmann::json> Controller::GetService(const std::string& name,
                                                      absl::Time now) const {
  absl::MutexLock lock(&mu_);
  auto it = services_.find(name);
  if (it == services_.end()) {
    return absl::NotFoundError(absl::StrCat("no service ", name));
  }
  return ServiceJson(it->second, now);
}

nlohmann::json Controller::ListServices(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, s] : services_) list.push_back(ServiceJson(s, now));
  return {{"services", std::move(list)}};
}

absl::StatusOr<nlohmann::json> Controller::ScaleService(const std::string& name,
                                                        int replicas,
                                                        absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = services_.find(name);
  if (it == services_.end()) {
    return absl::NotFoundError(absl::StrCat("no service ", name));
  }
  ServiceRecord s = it->second;
  const ReplicaRange& r = s.spec.replicas;
  const int top = r.range ? r.max : kMaxServiceReplicas;
  // A fixed count may go to 0, as `replicas: 0` in a spec (the service
  // stays, with its port, and serves nothing).
  const int bottom = r.range ? 1 : 0;
  if (replicas < bottom || replicas > top) {
    return absl::InvalidArgumentError(absl::StrCat(
        "replicas: must be ", bottom, " to ", top,
        r.range ? " (the service's replicas.max)" : "", ", got ", replicas));
  }
  if (r.range && replicas < r.min) {
    return absl::InvalidArgumentError(
        absl::StrCat("replicas: below the service's replicas.min (", r.min,
                     "), got ", replicas));
  }
  if (s.deleting) {
    return absl::FailedPreconditionError(
        absl::StrCat("service ", name, " is being deleted"));
  }
  s.AddEvent(now, absl::StrCat("scaled by hand: ", s.desired, " -> ", replicas,
                               " replica(s)"));
  s.desired = replicas;
  if (!r.range) s.spec.replicas.min = s.spec.replicas.max = replicas;
  s.updated = now;
  if (absl::Status st = PersistService(s); !st.ok()) return st;
  it->second = std::move(s);
  return ServiceJson(it->second, now);
}

absl::StatusOr<nlohmann::json> Controller::DeleteService(
    const std::string& name, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = services_.find(name);
  if (it == services_.end()) {
    return absl::NotFoundError(absl::StrCat("no service ", name));
  }
  if (it->second.deleting) return ServiceJson(it->second, now);
  ServiceRecord s = it->second;
  s.deleting = true;
  s.updated = now;
  s.AddEvent(now, "delete requested: draining and stopping every replica");
  if (absl::Status st = PersistService(s); !st.ok()) return st;
  it->second = std::move(s);
  return ServiceJson(it->second, now);
}

absl::Status Controller::PersistService(const ServiceRecord& s) {
  absl::StatusOr<int64_t> rev =
      store_->Commit({}, {Mutation::Put(ServiceKey(s.name),
                                        JobStoreText(ServiceRecordToJson(s)))});
  return rev.ok() ? absl::OkStatus() : rev.status();
}

absl::Status Controller::LoadServices() {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(kServicePrefix);
  if (!kvs.ok()) return kvs.status();
  for (const KeyValue& kv : *kvs) {
    nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
    absl::StatusOr<ServiceRecord> s =
        j.is_discarded() ? absl::InvalidArgumentError("not JSON")
                         : ServiceRecordFromJson(j);
    if (!s.ok()) {
      return absl::DataLossError(
          absl::StrCat("service record ", kv.key,
                       " cannot be read: ", s.status().message()));
    }
    services_[s->name] = *std::move(s);
  }
  for (const auto& [id, job] : jobs_) {
    if (!job.service.empty() && !IsFinal(job.state)) {
      service_replicas_[job.service].insert(id);
    }
  }
  return absl::OkStatus();
}

ReplicaView Controller::ViewOf(const ServiceRecord& s, const JobRecord& job,
                               absl::Time now) const {
  ReplicaView v;
  v.job = job.id;
  v.current = job.revision == s.revision;
  v.since = job.submit_time;
  const GatewayStats* g = nullptr;
  if (auto it = gateway_.find(s.name);
      it != gateway_.end() && now - it->second.at < kGatewayFresh) {
    g = &it->second;
  }
  if (g != nullptr) {
    if (auto srv = g->servers.find(ReplicaServerName(job.id));
        srv != g->servers.end()) {
      v.in_backend = srv->second.serving || srv->second.draining;
      // Its sessions end a drain only once the gateway has drained it: a
      // report from before says nothing of the requests still coming.
      if (srv->second.draining && job.drain_since && g->at > *job.drain_since) {
        v.sessions = srv->second.sessions;
      }
    }
  }
  if (job.cancel_requested || job.state == JobState::kStopping) {
    v.phase = ReplicaView::Phase::kStopping;
  } else if (job.drain_since) {
    v.phase = ReplicaView::Phase::kDraining;
    v.since = *job.drain_since;
  } else if (job.state == JobState::kPending || job.state == JobState::kHeld) {
    v.phase = ReplicaView::Phase::kPending;
    if (const SchedJob* sj = scheduler_->Find(job.id)) {
      // A pass looked at it and could not place it.
      v.unschedulable =
          scheduler_->ReasonFor(*sj).code != PendingReason::Code::kNew;
      v.pending_reason = scheduler_->ExplainPending(job.id, now);
    }
  } else {
    const TaskRecord* t = job.tasks.empty() ? nullptr : &job.tasks[0];
    const bool ready = t != nullptr &&
                       t->state == TaskRecord::State::kRunning && t->ready &&
                       t->port.has_value();
    v.phase =
        ready ? ReplicaView::Phase::kReady : ReplicaView::Phase::kStarting;
    if (!ready && t != nullptr) v.not_ready_reason = t->ready_reason;
    v.since = ready && t->ready_since ? *t->ready_since
              : job.start_time        ? *job.start_time
                                      : job.submit_time;
  }
  return v;
}

void Controller::StepServices(absl::Time now,
                              std::vector<const JobRecord*>* dirty) {
  std::vector<std::string> gone;
  for (auto& [name, s] : services_) {
    std::set<JobId>& ids = service_replicas_[name];
    // Replicas that ended: on their own (a failure: backoff), or stopped.
    for (auto it = ids.begin(); it != ids.end();) {
      auto j = jobs_.find(*it);
      if (j != jobs_.end() && !IsFinal(j->second.state)) {
        ++it;
        continue;
      }
      if (j != jobs_.end() && !j->second.cancel_requested &&
          j->second.state != JobState::kCancelled) {
        ++s.failures;
        s.next_start = now + s.spec.restart.BackoffAfter(s.failures);
        s.AddEvent(
            now,
            absl::StrCat("replica job ", j->first, " ended: ",
                         j->second.reason.empty() ? "exited" : j->second.reason,
                         "; the next starts in ",
                         FormatDurationShort(*s.next_start - now)));
        s.dirty = true;
      }
      it = ids.erase(it);
    }
    // A drained replica that went back to the queue (its node was lost)
    // has nothing left to drain: it is removed, not started again.
    for (JobId id : ids) {
      JobRecord& job = jobs_.at(id);
      if (job.drain_since && !job.cancel_requested &&
          (job.state == JobState::kPending || job.state == JobState::kHeld)) {
        (void)CancelLocked(job, now, dirty);
        job.reason = absl::StrCat("removed by service ", name, " (drained)");
        dirty->push_back(&job);
      }
    }
    std::vector<ReplicaView> views;
    for (JobId id : ids) views.push_back(ViewOf(s, jobs_.at(id), now));
    // A replica that became ready after the last failure's backoff resets
    // the failure count (those that served all along say nothing of it).
    for (const ReplicaView& v : views) {
      if (v.current && v.phase == ReplicaView::Phase::kReady &&
          s.failures > 0 && (!s.next_start || v.since >= *s.next_start)) {
        s.failures = 0;
        s.next_start.reset();
        s.dirty = true;
      }
    }
    const bool live =
        gateway_.contains(name) && now - gateway_.at(name).at < kGatewayFresh;
    if (s.spec.autoscale && !s.deleting) Autoscale(s, views, now);
    ServicePlan plan = PlanService(s, views, live, now);
    s.status = plan.status;
    if (live && !gateway_.at(name).error.empty()) {
      const GatewayStats& g = gateway_.at(name);
      s.status = absl::StrCat("not served by gateway ", g.gateway, ": ",
                              g.error, "; ", plan.status);
    }
    for (JobId id : plan.stop) {
      JobRecord& job = jobs_.at(id);
      (void)CancelLocked(job, now, dirty);
      job.reason = absl::StrCat("stopped by service ", name, " (drained)");
      dirty->push_back(&job);
    }
    for (JobId id : plan.drain) {
      JobRecord& job = jobs_.at(id);
      if (job.state == JobState::kPending || job.state == JobState::kHeld) {
        // Never placed: nothing to drain.
        (void)CancelLocked(job, now, dirty);
        job.reason = absl::StrCat("removed by service ", name);
      } else if (!job.drain_since) {
        job.drain_since = now;
        job.AddEvent(
            now, absl::StrCat("draining from service ", name, "'s balancer"));
      }
      dirty->push_back(&job);
    }
    for (int i = 0; i < plan.create; ++i) {
      if (!CreateReplica(s, now, dirty)) break;
    }
    if (s.deleting && ids.empty()) gone.push_back(name);
    if (s.dirty) {
      s.dirty = false;
      (void)PersistService(s);  // retried with the next change
    }
  }
  for (const std::string& name : gone) {
    if (store_->Commit({}, {Mutation::Delete(ServiceKey(name))}).ok()) {
      services_.erase(name);
      service_replicas_.erase(name);
      gateway_.erase(name);
    }
  }
}

bool Controller::CreateReplica(ServiceRecord& s, absl::Time now,
                               std::vector<const JobRecord*>* dirty) {
  JobRecord job;
  job.id = next_id_++;
  job.spec = ReplicaJobSpec(s.spec);
  job.state = JobState::kPending;
  job.submit_time = now;
  job.service = s.name;
  job.revision = s.revision;
  job.replica_probes = ReplicaProbesJson(s.spec);
  job.AddEvent(now, absl::StrCat("replica of service ", s.name, " (revision ",
                                 s.revision.substr(0, 12), ")"));
  if (absl::Status st = QueueSpec(job, now); !st.ok()) {
    s.status = absl::StrCat("cannot start a replica: ", st.message());
    return false;
  }
  const JobId id = job.id;
  service_replicas_[s.name].insert(id);
  auto [it, fresh] = jobs_.emplace(id, std::move(job));
  dirty->push_back(&it->second);
  return fresh;
}

void Controller::Autoscale(ServiceRecord& s,
                           const std::vector<ReplicaView>& views,
                           absl::Time now) {
  const AutoscaleSpec& a = *s.spec.autoscale;
  auto g = gateway_.find(s.name);
  if (g == gateway_.end() || now - g->second.at >= kGatewayFresh ||
      !g->second.error.empty()) {
    s.above_since.reset();
    s.below_since.reset();
    return;
  }
  int serving = 0;
  for (const ReplicaView& v : views) {
    serving += v.current && v.phase == ReplicaView::Phase::kReady;
  }
  serving = std::max(serving, 1);
  const GatewayStats& st = g->second;
  const double measure = a.metric == AutoscaleMetric::kInFlight
                             ? st.in_flight / serving
                         : a.metric == AutoscaleMetric::kRps ? st.rps / serving
                                                             : st.p95_ms;
  s.last_measure = measure;
  // As Kubernetes' HPA: replicas x measure / target, rounded up.
  // Within 10% of the target (HPA's tolerance): no change.
  // Clamped as a double: a tiny target or a huge measurement must not
  // overflow the int.
  const double raw = std::ceil(serving * measure / a.target - 1e-9);
  const int want =
      std::abs(measure / a.target - 1) <= 0.1
          ? s.desired
          : static_cast<int>(std::clamp(
                std::isfinite(raw) ? raw
                                   : static_cast<double>(s.spec.replicas.max),
                static_cast<double>(s.spec.replicas.min),
                static_cast<double>(s.spec.replicas.max)));
  const std::string name(AutoscaleMetricName(a.metric));
  auto decide = [&](std::optional<absl::Time>* since, absl::Duration delay,
                    int to) {
    if (!*since) *since = now;
    if (now - **since < delay) return;
    s.AddEvent(
        now,
        fmt::format("autoscaled: {} {:.2f}{} over {} (target "
                    "{:g}): {} -> {} replica(s)",
                    name, measure,
                    a.metric == AutoscaleMetric::kP95Ms ? "" : " per replica",
                    FormatDurationShort(delay), a.target, s.desired, to));
    s.desired = to;
    s.above_since.reset();
    s.below_since.reset();
    s.dirty = true;
  };
  if (want > s.desired) {
    s.below_since.reset();
    decide(&s.above_since, a.up_delay, want);
  } else if (want < s.desired) {
    s.above_since.reset();
    decide(&s.below_since, a.down_delay, want);
  } else {
    s.above_since.reset();
    s.below_since.reset();
  }
}

nlohmann::json Controller::ServiceJson(const ServiceRecord& s,
                                       absl::Time now) const {
  nlohmann::json replicas = nlohmann::json::array();
  int ready = 0;
  if (auto ids = service_replicas_.find(s.name);
      ids != service_replicas_.end()) {
    for (JobId id : ids->second) {
      const JobRecord& job = jobs_.at(id);
      const ReplicaView v = ViewOf(s, job, now);
      ready += v.current && v.phase == ReplicaView::Phase::kReady;
      nlohmann::json r = {{"job", id},
                          {"revision", job.revision.substr(0, 12)},
                          {"current", v.current},
                          {"phase", std::string(PhaseName(v.phase))},
                          {"since", FormatTimestamp(v.since)},
                          {"in_balancer", v.in_backend}};
      if (!job.tasks.empty()) {
        const TaskRecord& t = job.tasks[0];
        r["node"] = t.node;
        if (t.port) r["address"] = absl::StrCat(NodeHost(t.node), ":", *t.port);
      }
      if (!v.pending_reason.empty()) r["reason"] = v.pending_reason;
      replicas.push_back(std::move(r));
    }
  }
  nlohmann::json j = {
      {"name", s.name},
      {"project", s.spec.project},
      {"user", s.spec.user},
      {"revision", s.revision.substr(0, 12)},
      {"generation", s.generation},
      {"port", s.port},
      {"desired", s.desired},
      {"ready", ready},
      {"min", s.spec.replicas.min},
      {"max",
       s.spec.replicas.range ? s.spec.replicas.max : s.spec.replicas.min},
      {"state", s.deleting ? "deleting" : "active"},
      {"status", s.status},
      {"created", FormatTimestamp(s.created)},
      {"updated", FormatTimestamp(s.updated)},
      {"replicas", std::move(replicas)},
      {"events", s.events.ToJson()},
      {"spec", nlohmann::json::parse(ServiceSpecToJson(s.spec))}};
  if (auto g = gateway_.find(s.name); g != gateway_.end()) {
    j["traffic"] = {{"in_flight", g->second.in_flight},
                    {"rps", g->second.rps},
                    {"p95_ms", g->second.p95_ms},
                    {"requests_total", g->second.requests_total},
                    {"errors_total", g->second.errors_total},
                    {"reported", FormatTimestamp(g->second.at)}};
  }
  if (s.last_measure) j["autoscale_measure"] = *s.last_measure;
  return j;
}

nlohmann::json Controller::GatewayConfig(absl::Time now) const {
  absl::MutexLock lock(&mu_);
  nlohmann::json list = nlohmann::json::array();
  for (const auto& [name, s] : services_) {
    nlohmann::json servers = nlohmann::json::array();
    if (auto ids = service_replicas_.find(name);
        ids != service_replicas_.end()) {
      for (JobId id : ids->second) {
        const JobRecord& job = jobs_.at(id);
        const ReplicaView v = ViewOf(s, job, now);
        const bool serving = v.phase == ReplicaView::Phase::kReady;
        // Drained ones stay (as draining) until they stop, so that their
        // requests in flight finish.
        const bool draining =
            v.phase == ReplicaView::Phase::kDraining ||
            (v.phase == ReplicaView::Phase::kStopping && v.in_backend);
        if ((!serving && !draining) || job.tasks.empty()) continue;
        const TaskRecord& t = job.tasks[0];
        if (!t.port) continue;
        servers.push_back(
            {{"name", ReplicaServerName(id)},
             {"address", absl::StrCat(NodeHost(t.node), ":", *t.port)},
             {"state", serving ? "serving" : "draining"}});
      }
    }
    list.push_back({{"name", name},
                    {"port", s.port},
                    {"revision", s.revision.substr(0, 12)},
                    {"servers", std::move(servers)}});
  }
  return {{"services", std::move(list)}};
}

absl::Status Controller::GatewayReport(const nlohmann::json& body,
                                       absl::Time now) {
  absl::StatusOr<std::map<std::string, GatewayStats>> report =
      ParseGatewayReport(body, now);
  if (!report.ok()) return report.status();
  absl::MutexLock lock(&mu_);
  for (auto& [name, stats] : *report) {
    if (services_.contains(name)) gateway_[name] = std::move(stats);
  }
  return absl::OkStatus();
}

void Controller::NoteReplicaStatus(JobRecord& job, TaskRecord& task,
                                   const nlohmann::json& status, absl::Time now,
                                   std::vector<const JobRecord*>* dirty) {
  if (auto p = status.find("port");
      p != status.end() && p->is_number_integer() && p->get<int64_t>() > 0 &&
      p->get<int64_t>() < 65536 && task.port != p->get<int>()) {
    task.port = p->get<int>();
    job.AddEvent(now, absl::StrCat("replica listens on port ", *task.port));
    dirty->push_back(&job);
  }
  auto why = status.find("ready_reason");
  task.ready_reason = why != status.end() && why->is_string()
                          ? why->get<std::string>().substr(0, 300)
                          : "";
  auto r = status.find("ready");
  const bool ready = r != status.end() && r->is_boolean() && r->get<bool>();
  if (ready != task.ready) {
    task.ready = ready;
    task.ready_since = now;
    job.AddEvent(now, ready ? "ready"
                            : "not ready (its readiness probe "
                              "failed)");
    dirty->push_back(&job);
  }
}

nlohmann::json Controller::LaunchExtras(const JobRecord& job) const {
  nlohmann::json extra = nlohmann::json::object();
  if (job.service.empty()) return extra;
  extra["port"] = true;
  if (job.replica_probes.contains("readiness")) {
    extra["readiness"] = job.replica_probes["readiness"];
  }
  if (job.replica_probes.contains("liveness")) {
    extra["liveness"] = job.replica_probes["liveness"];
  }
  return extra;
}

void Controller::WriteServiceMetrics(MetricsWriter& out, absl::Time now) const {
  struct Row {
    int desired = 0, ready = 0;
    const GatewayStats* g = nullptr;  // a fresh report, or null
  };
  std::map<std::string, Row> rows;
  for (const auto& [name, s] : services_) {
    Row& r = rows[name];
    r.desired = s.desired;
    if (auto ids = service_replicas_.find(name);
        ids != service_replicas_.end()) {
      for (JobId id : ids->second) {
        const ReplicaView v = ViewOf(s, jobs_.at(id), now);
        r.ready += v.phase == ReplicaView::Phase::kReady;
      }
    }
    if (auto g = gateway_.find(name);
        g != gateway_.end() && now - g->second.at < kGatewayFresh) {
      r.g = &g->second;
    }
  }
  out.Family("loom_service_desired_replicas",
             "Replicas a service wants now (its count, or the autoscaler's).",
             MetricType::kGauge);
  for (const auto& [name, r] : rows) {
    out.Sample("loom_service_desired_replicas", {{"service", name}}, r.desired);
  }
  out.Family("loom_service_ready_replicas",
             "Replicas of a service that run and passed their readiness "
             "probe.",
             MetricType::kGauge);
  for (const auto& [name, r] : rows) {
    out.Sample("loom_service_ready_replicas", {{"service", name}}, r.ready);
  }
  // The gateway's measurements (absent while no gateway reports).
  const std::pair<const char*, const char*> gauges[] = {
      {"loom_service_requests_in_flight",
       "Requests at a service's replicas or queued for one, at the gateway."},
      {"loom_service_requests_per_second",
       "Requests per second to a service, at the gateway (last second)."},
      {"loom_service_response_p95_seconds",
       "95th percentile of a service's response times over the last 10 s, "
       "at the gateway."}};
  for (const auto& [metric, help] : gauges) {
    out.Family(metric, help, MetricType::kGauge);
    for (const auto& [name, r] : rows) {
      if (r.g == nullptr) continue;
      const std::string_view m = metric;
      out.Sample(metric, {{"service", name}},
                 m == "loom_service_requests_in_flight" ? r.g->in_flight
                 : m == "loom_service_requests_per_second"
                     ? r.g->rps
                     : r.g->p95_ms / 1000);
    }
  }
  out.Family("loom_service_requests_total",
             "Requests to a service since its gateway started.",
             MetricType::kCounter);
  for (const auto& [name, r] : rows) {
    if (r.g != nullptr) {
      out.Sample("loom_service_requests_total", {{"service", name}},
                 r.g->requests_total);
    }
  }
  out.Family("loom_service_errors_total",
             "5xx answers and failed connections of a service since its "
             "gateway started.",
             MetricType::kCounter);
  for (const auto& [name, r] : rows) {
    if (r.g != nullptr) {
      out.Sample("loom_service_errors_total", {{"service", name}},
                 r.g->errors_total);
    }
  }
  out.Family("loom_service_response_seconds",
             "Response times of a service at its gateway (accept to last "
             "byte), since the gateway started.",
             MetricType::kHistogram);
  for (const auto& [name, r] : rows) {
    if (r.g == nullptr) continue;
    const LatencyBuckets& l = r.g->latency;
    out.HistogramSample("loom_service_response_seconds", {{"service", name}},
                        l.bounds_seconds, l.counts, BucketCounts::kCumulative,
                        l.sum_seconds, l.count);
  }
}

}  // namespace loom
