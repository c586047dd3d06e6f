// The cluster as code: the cluster spec's revisions in the store, and
// plan, apply, history and rollback against the live one
// (docs/cluster-as-code.md).

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loom/core/cluster_diff.h"
#include "loom/core/cluster_edit.h"
#include "loom/server/controller.h"
#include "loom/server/job_events_store.h"

namespace loom {
namespace {

constexpr const char* kLiveKey = "/cluster/live";
constexpr const char* kRevisionPrefix = "/cluster/revisions/";
constexpr const char* kNodeKeyPrefix = "/nodes/";

std::string RevisionKey(int64_t revision) {
  return absl::StrFormat("%s%020d", kRevisionPrefix, revision);
}

const char* OpSign(ClusterDiffLine::Op op) {
  switch (op) {
    case ClusterDiffLine::Op::kAdd:
      return "+";
    case ClusterDiffLine::Op::kRemove:
      return "-";
    case ClusterDiffLine::Op::kChange:
      return "~";
  }
  return "~";
}

nlohmann::json ChangesJson(const std::vector<ClusterDiffLine>& lines) {
  nlohmann::json out = nlohmann::json::array();
  for (const ClusterDiffLine& l : lines) {
    out.push_back({{"op", OpSign(l.op)},
                   {"kind", l.kind},
                   {"name", l.name},
                   {"details", l.details},
                   {"text", FormatDiffLine(l)}});
  }
  return out;
}

// The stored record of one revision.
struct StoredRevision {
  int64_t revision = 0;
  std::string text;
  std::string source;
  nlohmann::json record;
};

absl::StatusOr<StoredRevision> ReadRevision(StateStore& store,
                                            int64_t revision) {
  absl::StatusOr<KeyValue> kv = store.Get(RevisionKey(revision));
  if (!kv.ok()) {
    if (absl::IsNotFound(kv.status())) {
      return absl::NotFoundError(
          absl::StrCat("no cluster revision ", revision));
    }
    return kv.status();
  }
  nlohmann::json j = nlohmann::json::parse(kv->value, nullptr, false);
  if (!j.is_object() || !j.contains("text") || !j["text"].is_string()) {
    return absl::DataLossError(absl::StrCat("cluster revision ", revision,
                                            " in the store is not readable"));
  }
  StoredRevision r;
  r.revision = revision;
  r.text = j["text"].get<std::string>();
  r.source = j.value("source", std::string("cluster.yaml"));
  r.record = std::move(j);
  return r;
}

}  // namespace

absl::Status Controller::LoadClusterRevision(absl::Time now) {
  absl::StatusOr<KeyValue> live = store_->Get(kLiveKey);
  if (!live.ok() && !absl::IsNotFound(live.status())) return live.status();
  if (live.ok()) {
    nlohmann::json j = nlohmann::json::parse(live->value, nullptr, false);
    const int64_t n = j.is_object() && j.contains("revision") &&
                              j["revision"].is_number_integer()
                          ? j["revision"].get<int64_t>()
                          : 0;
    if (n < 1) {
      return absl::DataLossError(
          absl::StrCat(kLiveKey, " in the store is not readable"));
    }
    absl::StatusOr<StoredRevision> rev = ReadRevision(*store_, n);
    if (!rev.ok()) return rev.status();
    absl::StatusOr<Cluster> cluster = ParseClusterSpec(rev->text, rev->source);
    if (!cluster.ok()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the live cluster revision ", n,
                       " does not parse: ", cluster.status().message()));
    }
    const ClusterSpecText& given = options_.cluster_spec;
    if (!given.text.empty() && given.text != rev->text) {
      load_log_.push_back(JobStoreText(
          {{"level", "warning"},
           {"event", "cluster_spec_differs"},
           {"source", given.source},
           {"revision", n},
           {"msg", absl::StrCat("the cluster spec ", given.source,
                                " differs from the live revision ", n,
                                "; using revision ", n, " (`loom plan -f ",
                                given.source,
                                "` shows the difference, `loom apply` "
                                "makes it live)")}}));
    }
    cluster_ = target_ = std::make_shared<const Cluster>(*std::move(cluster));
    revision_ = n;
    revision_key_version_ = live->version;
    return absl::OkStatus();
  }
  const ClusterSpecText& seed = options_.cluster_spec;
  if (seed.text.empty()) return absl::OkStatus();
  const nlohmann::json record = {
      {"revision", 1},
      {"author", "loom server --cluster"},
      {"time", absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone())},
      {"source", seed.source},
      {"text", seed.text},
      {"changes", nlohmann::json::array({"initial revision"})}};
  absl::StatusOr<int64_t> at = store_->Commit(
      {{kLiveKey, Condition::kMustNotExist}},
      {Mutation::Put(RevisionKey(1), JobStoreText(record)),
       Mutation::Put(kLiveKey, JobStoreText({{"revision", 1}}))});
  if (!at.ok() && absl::IsFailedPrecondition(at.status()) &&
      store_->Get(kLiveKey).ok()) {
    // Another server seeded it first (both started on an empty etcd).
    return LoadClusterRevision(now);
  }
  if (!at.ok()) return at.status();
  revision_ = 1;
  revision_key_version_ = *at;
  return absl::OkStatus();
}

absl::Status Controller::CheckClusterChange(const Cluster& next) const {
  std::map<std::string, std::vector<JobId>> orphans;  // project -> jobs
  std::map<std::string, std::vector<JobId>> models;   // model -> jobs
  for (const auto& [id, job] : jobs_) {
    if (IsFinal(job.state)) continue;
    if (!next.projects.empty() &&
        next.FindProject(job.spec.project) == nullptr) {
      orphans[job.spec.project].push_back(id);
    }
    if (job.spec.gpu_model != "any" &&
        next.FindGpuModel(job.spec.gpu_model) < 0) {
      models[job.spec.gpu_model].push_back(id);
    }
  }
  auto ids = [](const std::vector<JobId>& v) {
    std::vector<JobId> shown(v.begin(),
                             v.begin() + std::min<size_t>(v.size(), 5));
    return absl::StrCat(absl::StrJoin(shown, ", "),
                        v.size() > 5 ? ", ..." : "");
  };
  if (!orphans.empty()) {
    const auto& [project, jobs] = *orphans.begin();
    return absl::FailedPreconditionError(absl::StrCat(
        "projects: project '", project, "' is not in the new spec but has ",
        jobs.size(), " unfinished job(s) (", ids(jobs),
        "); keep the project until they end, or cancel them"));
  }
  if (!models.empty()) {
    const auto& [model, jobs] = *models.begin();
    return absl::FailedPreconditionError(absl::StrCat(
        "gpu_models: GPU model '", model, "' is not in the new spec but ",
        jobs.size(), " unfinished job(s) ask for it (", ids(jobs), ")"));
  }
  return absl::OkStatus();
}

nlohmann::json Controller::ClusterEffects(
    const Cluster& next, const Scheduler::ClusterChange& change) const {
  nlohmann::json drain = nlohmann::json::array();
  std::map<JobId, std::vector<std::string>> moved;
  for (const Scheduler::ClusterChange::Blocked& b : change.blocked) {
    moved[b.job].push_back(b.why);
  }
  for (const auto& [id, why] : moved) {
    drain.push_back({{"job", id}, {"why", absl::StrJoin(why, "; ")}});
  }
  nlohmann::json over = nlohmann::json::array();
  for (const ProjectUsage& u : scheduler_->Usage(absl::InfinitePast())) {
    const ProjectSpec* was = target_->FindProject(u.name);
    const ProjectSpec* now = next.FindProject(u.name);
    const int old_quota = was != nullptr ? was->quota_gpus : 0;
    const int new_quota = now != nullptr ? now->quota_gpus : 0;
    if (u.running_gpus > new_quota && new_quota < old_quota &&
        u.running_gpus > 0) {
      over.push_back({{"project", u.name},
                      {"running_gpus", u.running_gpus},
                      {"quota_gpus", new_quota},
                      {"was", old_quota}});
    }
  }
  nlohmann::json infeasible = nlohmann::json::array();
  for (const auto& u : change.infeasible) {
    infeasible.push_back({{"job", u.job}, {"why", u.why}});
  }
  nlohmann::json feasible = nlohmann::json::array();
  for (JobId id : change.feasible) feasible.push_back(id);
  return {{"drain", std::move(drain)},
          {"over_quota", std::move(over)},
          {"infeasible", std::move(infeasible)},
          {"feasible", std::move(feasible)}};
}

absl::StatusOr<nlohmann::json> Controller::PlanCluster(
    const std::string& text, const std::string& source, absl::Time now) const {
  absl::StatusOr<Cluster> next = ParseClusterSpec(text, source);
  if (!next.ok()) return next.status();
  absl::MutexLock lock(&mu_);
  if (absl::Status st = CheckClusterChange(*next); !st.ok()) return st;
  const Scheduler::ClusterChange change = scheduler_->PreviewCluster(*next);
  return nlohmann::json{{"live_revision", revision_},
                        {"changes", ChangesJson(DiffClusters(*target_, *next))},
                        {"effects", ClusterEffects(*next, change)},
                        {"retiring", retiring_}};
}

absl::StatusOr<nlohmann::json> Controller::ApplyCluster(
    const std::string& text, const std::string& source,
    int64_t expected_revision, const std::string& author, absl::Time now) {
  absl::StatusOr<Cluster> parsed = ParseClusterSpec(text, source);
  if (!parsed.ok()) return parsed.status();
  auto next = std::make_shared<const Cluster>(*std::move(parsed));
  absl::MutexLock lock(&mu_);
  if (expected_revision >= 0 && expected_revision != revision_) {
    return absl::AbortedError(
        absl::StrCat("the live cluster revision is ", revision_, ", not ",
                     expected_revision, " as planned; plan again"));
  }
  if (absl::Status st = CheckClusterChange(*next); !st.ok()) return st;
  const std::vector<ClusterDiffLine> diff = DiffClusters(*target_, *next);
  const Scheduler::ClusterChange change = scheduler_->PreviewCluster(*next);
  nlohmann::json reply = {{"live_revision", revision_},
                          {"changes", ChangesJson(diff)},
                          {"effects", ClusterEffects(*next, change)}};
  if (diff.empty()) {
    reply["revision"] = revision_;
    reply["applied"] = false;
    return reply;
  }
  // Nodes whose jobs cannot stay are kept, drained, until those jobs move.
  std::vector<std::string> busy;
  for (const Scheduler::ClusterChange::Blocked& b : change.blocked) {
    if (std::find(busy.begin(), busy.end(), b.node) == busy.end()) {
      busy.push_back(b.node);
    }
  }
  std::shared_ptr<const Cluster> effective = next;
  if (!busy.empty()) {
    absl::StatusOr<Cluster> kept = KeepNodes(*next, *cluster_, busy);
    if (!kept.ok()) return kept.status();
    effective = std::make_shared<const Cluster>(*std::move(kept));
  }
  if (!scheduler_->PreviewCluster(*effective).blocked.empty()) {
    return absl::InternalError(
        "the cluster with its draining nodes still does not fit the running "
        "jobs; nothing was applied");
  }

  const int64_t revision = revision_ + 1;
  nlohmann::json lines = nlohmann::json::array();
  for (const ClusterDiffLine& l : diff) lines.push_back(FormatDiffLine(l));
  const nlohmann::json record = {
      {"revision", revision},
      {"author", author},
      {"time", absl::FormatTime(absl::RFC3339_sec, now, absl::UTCTimeZone())},
      {"source", source},
      {"text", text},
      {"changes", lines}};
  absl::StatusOr<int64_t> at = store_->Commit(
      {{kLiveKey, revision_key_version_ > 0 ? revision_key_version_
                                            : Condition::kMustNotExist}},
      {Mutation::Put(RevisionKey(revision), JobStoreText(record)),
       Mutation::Put(kLiveKey, JobStoreText({{"revision", revision}}))});
  if (!at.ok()) {
    if (absl::IsFailedPrecondition(at.status())) {
      return absl::AbortedError(
          "the live cluster revision changed in the store meanwhile (another "
          "server applied one); plan again");
    }
    return at.status();
  }
  revision_ = revision;
  revision_key_version_ = *at;
  target_ = next;
  if (absl::Status st = TakeCluster(effective, now); !st.ok()) {
    // Written but not taken: the next start takes it from the store.
    return absl::InternalError(absl::StrCat(
        "revision ", revision, " is stored but could not be taken live: ",
        st.message(), "; restart the server"));
  }
  // Nodes an earlier revision was draining away that this one keeps (a
  // rollback while they drained) are back in service.
  for (const std::string& name : retiring_) {
    if (std::find(busy.begin(), busy.end(), name) != busy.end()) continue;
    if (const int n = NodeIndex(name); n >= 0) {
      nodes_[n].draining = false;
      nodes_[n].reason = "";
      UpdateSchedulable(n);
    }
  }
  retiring_ = busy;
  std::vector<const JobRecord*> dirty;
  for (const std::string& name : busy) {
    const int n = NodeIndex(name);
    if (n < 0) continue;
    const bool stays =
        std::any_of(next->nodes.begin(), next->nodes.end(),
                    [&](const NodeSpec& spec) { return spec.name == name; });
    Node& node = nodes_[n];
    node.draining = true;
    node.reason = absl::StrCat(stays ? "changed" : "removed",
                               " by cluster revision ", revision, ": draining");
    UpdateSchedulable(n);
  }
  std::map<JobId, std::string> evicted;  // each job once, with its reason
  for (const Scheduler::ClusterChange::Blocked& b : change.blocked) {
    evicted.emplace(b.job, b.why);
  }
  for (const auto& [id, why] : evicted) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.preempted_by = 0;
    Evict(it->second,
          absl::StrCat("moved off its node: ", why, " (cluster revision ",
                       revision, ")"),
          now);
    dirty.push_back(&it->second);
  }
  for (const auto& u : change.infeasible) {
    const JobId id = u.job;
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.AddEvent(
        now, absl::StrCat("cannot run on cluster revision ", revision, ": ",
                          scheduler_->ExplainPending(id, now)));
    dirty.push_back(&it->second);
  }
  for (JobId id : change.feasible) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    it->second.AddEvent(
        now, absl::StrCat("can run again on cluster revision ", revision));
    dirty.push_back(&it->second);
  }
  if (!Persist(dirty).ok()) {
    for (const JobRecord* j : dirty) unsaved_.insert(j->id);  // Tick retries
  }
  reply["revision"] = revision;
  reply["applied"] = true;
  reply["retiring"] = retiring_;
  return reply;
}

absl::Status Controller::TakeCluster(std::shared_ptr<const Cluster> effective,
                                     absl::Time now) {
  absl::StatusOr<Scheduler::ClusterChange> taken =
      scheduler_->UpdateCluster(*effective, now);
  if (!taken.ok()) return taken.status();
  std::vector<Node> nodes(effective->nodes.size());
  absl::flat_hash_map<std::string, int> index;
  for (size_t i = 0; i < effective->nodes.size(); ++i) {
    const std::string& name = effective->nodes[i].name;
    index[name] = static_cast<int>(i);
    if (const int old = NodeIndex(name); old >= 0) {
      nodes[i] = std::move(nodes_[old]);
    }
  }
  nodes_ = std::move(nodes);
  node_index_ = std::move(index);
  cluster_ = std::move(effective);
  for (size_t n = 0; n < nodes_.size(); ++n) {
    // The pool's declared stack may have changed: drifted, or outdated.
    UpdateDrift(static_cast<int>(n));
    UpdateSchedulable(static_cast<int>(n));
    // Declared labels, the pool and the switches may have changed.
    scheduler_->SetNodeLabels(static_cast<int>(n),
                              EffectiveLabels(static_cast<int>(n)));
  }
  return absl::OkStatus();
}

void Controller::ForgetDrainedNodes(absl::Time now) {
  if (retiring_.empty()) return;
  std::vector<std::string> still;
  for (const std::string& name : retiring_) {
    const int n = NodeIndex(name);
    if (n >= 0 && !scheduler_->JobsOnNode(n).empty()) still.push_back(name);
  }
  if (still.size() == retiring_.size()) return;
  std::shared_ptr<const Cluster> effective = target_;
  if (!still.empty()) {
    absl::StatusOr<Cluster> kept = KeepNodes(*target_, *cluster_, still);
    if (!kept.ok()) return;
    effective = std::make_shared<const Cluster>(*std::move(kept));
  }
  std::vector<Mutation> forget;
  for (const std::string& name : retiring_) {
    if (std::find(still.begin(), still.end(), name) != still.end()) continue;
    const bool stays =
        std::any_of(target_->nodes.begin(), target_->nodes.end(),
                    [&](const NodeSpec& n) { return n.name == name; });
    if (stays) {
      // Changed, not removed: it takes its new shape and is no longer
      // drained for the change.
      Node& node = nodes_[NodeIndex(name)];
      node.draining = false;
      node.reason = "";
    } else {
      forget.push_back(Mutation::Delete(absl::StrCat(kNodeKeyPrefix, name)));
    }
  }
  if (!TakeCluster(effective, now).ok()) return;
  retiring_ = std::move(still);
  if (!forget.empty()) (void)store_->Commit({}, forget);
}

absl::StatusOr<nlohmann::json> Controller::ClusterHistory() const {
  absl::StatusOr<std::vector<KeyValue>> all = store_->List(kRevisionPrefix);
  if (!all.ok()) return all.status();
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  for (auto it = all->rbegin(); it != all->rend(); ++it) {
    nlohmann::json j = nlohmann::json::parse(it->value, nullptr, false);
    if (!j.is_object()) continue;
    j.erase("text");
    j["live"] = j.value("revision", int64_t{0}) == revision_;
    out.push_back(std::move(j));
  }
  return nlohmann::json{{"live_revision", revision_},
                        {"revisions", std::move(out)}};
}

absl::StatusOr<nlohmann::json> Controller::ClusterRevision(
    int64_t revision) const {
  absl::StatusOr<StoredRevision> r = ReadRevision(*store_, revision);
  if (!r.ok()) return r.status();
  return r->record;
}

absl::StatusOr<nlohmann::json> Controller::RollbackCluster(
    int64_t to, int64_t expected_revision, const std::string& author,
    absl::Time now) {
  int64_t live = 0;
  {
    absl::MutexLock lock(&mu_);
    live = revision_;
  }
  if (to == 0) to = live - 1;
  if (to < 1) {
    return absl::FailedPreconditionError(
        absl::StrCat("there is no revision before the live one (", live,
                     ") to roll back to"));
  }
  absl::StatusOr<StoredRevision> r = ReadRevision(*store_, to);
  if (!r.ok()) return r.status();
  absl::StatusOr<nlohmann::json> applied = ApplyCluster(
      r->text, r->source, expected_revision >= 0 ? expected_revision : live,
      absl::StrCat(author, " (rollback to ", to, ")"), now);
  if (applied.ok()) (*applied)["rollback_to"] = to;
  return applied;
}

}  // namespace loom
