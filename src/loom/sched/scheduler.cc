#include "loom/sched/scheduler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "loom/core/labels.h"
#include "loom/sched/placement.h"
#include "loom/sched/slice_placement.h"

namespace loom {
namespace {

// Identical shapes fail identically within a pass (capacity only shrinks
// while a pass runs), so failures are remembered per shape.
struct ShapeKey {
  GpuModelId model;
  int tasks;
  int gpus_per_task;
  int64_t cpus;
  int64_t memory;
  const NodeMask* avoid;
  std::string mig;
  int64_t share;
  template <typename H>
  friend H AbslHashValue(H h, const ShapeKey& k) {
    return H::combine(std::move(h), k.model, k.tasks, k.gpus_per_task, k.cpus,
                      k.memory, k.avoid, k.mig, k.share);
  }
  friend bool operator==(const ShapeKey& a, const ShapeKey& b) {
    return std::tie(a.model, a.tasks, a.gpus_per_task, a.cpus, a.memory,
                    a.avoid, a.mig, a.share) ==
           std::tie(b.model, b.tasks, b.gpus_per_task, b.cpus, b.memory,
                    b.avoid, b.mig, b.share);
  }
};

ShapeKey KeyOf(const JobShape& s, const NodeMask* avoid) {
  return {s.gpu_model,
          s.tasks,
          s.gpus_per_task,
          s.cpus_milli_per_task,
          s.memory_bytes_per_task,
          avoid,
          s.slice.mig,
          s.slice.share_bytes};
}

// Whether the job's tasks cannot all share one node: then its nodes talk
// over RDMA and need usable NICs.
bool SpansNodes(const ClusterState& st, const Cluster& c, const JobShape& s) {
  if (s.slice.partial() || s.tasks <= 1) return false;
  int most = 0;
  for (GpuModelId m : CandidateModels(c, s)) {
    most = std::max(most, st.MaxNodeGpus(m));
  }
  return !s.OnOneNode(most);
}

// Whole GPUs, or parts of GPUs (slice_placement.h) for a slice shape.
std::optional<Placement> Place(const ClusterState& state, const JobShape& shape,
                               const NodeMask* avoid,
                               const NodePreference& prefer, PendingReason* why,
                               const SchedulerOptions& options) {
  if (shape.slice.partial()) {
    return FindSlicePlacement(
        state, shape, avoid, why,
        SliceScoring{options.slice_score, &options.target_workload});
  }
  return FindPlacement(state, shape, avoid, prefer, why);
}

// The locality preference of `request`: nodes holding its datasets (when
// `data_locality` is on; an intersection goes to `*scratch`) and its image.
NodePreference PreferenceFor(const Scheduler& s, const JobRequest& request,
                             bool data_locality, NodeMask* scratch) {
  NodePreference prefer;
  prefer.image = s.NodesWithImage(request.image);
  if (data_locality)
    prefer.data = s.NodesWithDatasets(request.datasets, scratch);
  return prefer;
}

bool Overlaps(const Placement& a, const Placement& b) {
  for (const TaskPlacement& x : a.tasks) {
    for (const TaskPlacement& y : b.tasks) {
      if (x.node == y.node) return true;
    }
  }
  return false;
}

// `u` brought forward to `now`: running GPUs accrue GPU-seconds, decayed
// ones lose half their weight every `half_life`.
ProjectUsage Advance(ProjectUsage u, absl::Time now, absl::Duration half_life) {
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

}  // namespace

// The view of the scheduler that a policy gets during one pass.
class Scheduler::Context : public SchedulingContext {
 public:
  Context(Scheduler* s, absl::Time now, PassResult* result)
      : s_(s), now_(now), result_(result) {}

  absl::Time now() const override { return now_; }
  const SchedJob& job(JobId id) const override { return s_->jobs_.at(id); }
  const ClusterState& state() const override { return *s_->state_; }

  uint64_t pass() const override { return s_->pass_; }

  bool TryStart(JobId id, const NodeMask* avoid,
                PendingReason* why_out) override {
    SchedJob& job = s_->jobs_.at(id);
    const JobShape& shape = job.request.shape;
    // Jobs with different selectors avoid different nodes, so they never
    // share a memo entry (the key holds the combined mask's address). Nodes
    // claimed for other jobs' preemptions are out of bounds too; a mask made
    // for this job alone is not remembered across jobs.
    avoid = AvoidFor(job, avoid);
    avoid = AvoidWithoutNics(job, avoid);
    NodeMask scratch;
    avoid = s_->AvoidClaimed(job, avoid, &scratch);
    const bool own_mask = avoid == &scratch;
    ShapeKey key = KeyOf(shape, avoid);
    if (auto it = failed_.find(key); !own_mask && it != failed_.end()) {
      SetReason(id, it->second);
      if (why_out != nullptr) *why_out = it->second;
      return false;
    }
    PendingReason why;
    // The image and data preferences never change whether a shape fits, so
    // the failure memo above stays keyed by shape alone.
    NodeMask data_scratch;
    const NodePreference prefer = PreferenceFor(
        *s_, job.request, s_->options_.data_locality, &data_scratch);
    std::optional<Placement> p;
    // A replica of a spread group: away from the group's nodes first.
    NodeMask spread_scratch;
    if (const NodeMask* spread = s_->SpreadAvoid(job, avoid, &spread_scratch)) {
      p = Place(*s_->state_, shape, spread, prefer, nullptr, s_->options_);
    }
    if (!p.has_value()) {
      p = Place(*s_->state_, shape, avoid, prefer, &why, s_->options_);
    }
    if (!p.has_value()) {
      if (job.selector != 0) why = SelectorReason(job);
      if (s_->spare_count_ > 0 && !job.request.preemptible) {
        s_->NoteSpares(job, &why);
      }
      if (!own_mask) failed_.emplace(key, why);
      SetReason(id, why);
      if (why_out != nullptr) *why_out = why;
      return false;
    }
    s_->StartJob(job, std::move(*p), now_, result_);
    return true;
  }

  Reservation Reserve(JobId id) override;

  bool PreemptFor(JobId for_job, const std::vector<JobId>& candidates) override;

  void SetReason(JobId id, const PendingReason& reason) override {
    SchedJob& job = s_->jobs_.at(id);
    job.reason = reason;
    job.reason_pass = s_->pass_;
  }

  void SetDefaultReason(const PendingReason& reason) override {
    s_->default_reason_ = reason;
  }

  // The nodes `job` must not use: those its node selector rules out and
  // `avoid` (either may be null). The union of both lives as long as this
  // pass.
  const NodeMask* AvoidFor(const SchedJob& job, const NodeMask* avoid) {
    const NodeMask* excluded = s_->node_labels_.Excluded(job.selector);
    if (excluded == nullptr) return avoid;
    if (avoid == nullptr) return excluded;
    auto [it, inserted] = combined_.try_emplace({job.selector, avoid});
    if (inserted) {
      it->second = *excluded;
      it->second.UnionWith(*avoid);
    }
    return &it->second;
  }

  // `avoid` and, for a job whose tasks span nodes, the nodes without usable
  // NICs (either may be null). Lives as long as this pass.
  const NodeMask* AvoidWithoutNics(const SchedJob& job, const NodeMask* avoid) {
    const NodeMask& none = s_->state_->NodesWithoutNics();
    if (none.Empty() ||
        !SpansNodes(*s_->state_, *s_->cluster_, job.request.shape)) {
      return avoid;
    }
    if (avoid == nullptr) return &none;
    auto [it, inserted] = without_nics_.try_emplace(avoid);
    if (inserted) {
      it->second = none;
      it->second.UnionWith(*avoid);
    }
    return &it->second;
  }

  // Why a job with a node selector does not fit: no node matches it, or
  // the matching ones (so many, so many of them schedulable) lack room.
  PendingReason SelectorReason(const SchedJob& job) const {
    PendingReason why;
    why.gpu_model = job.request.shape.gpu_model;
    const int matching = s_->node_labels_.Matching(job.selector);
    if (matching == 0) {
      why.code = PendingReason::Code::kNoNodeMatchesSelector;
      return why;
    }
    why.code = PendingReason::Code::kNoMatchingNodeFits;
    why.need = job.request.shape.TotalGpus();
    why.have = matching;
    const NodeMask* excluded = s_->node_labels_.Excluded(job.selector);
    for (int n = 0; n < s_->state_->num_nodes(); ++n) {
      if (!excluded->Contains(n) && s_->state_->Schedulable(n)) ++why.usable;
    }
    return why;
  }

  int QuotaGpus(int project) const override {
    return s_->projects_[project].quota_gpus;
  }
  int RunningGpus(int project) const override {
    return s_->projects_[project].running_gpus;
  }

  double NormalizedUsage(int project) const override {
    const ProjectUsage& u = s_->projects_[project];
    return Advance(u, now_, s_->options_.usage_half_life).decayed_gpu_seconds /
           u.weight;
  }

 private:
  Scheduler* s_;
  absl::Time now_;
  PassResult* result_;
  absl::flat_hash_map<ShapeKey, PendingReason> failed_;
  // (selector, policy's avoid) -> both combined (`AvoidFor`).
  absl::node_hash_map<std::pair<int, const NodeMask*>, NodeMask> combined_;
  absl::node_hash_map<const NodeMask*, NodeMask> without_nics_;
};

Reservation Scheduler::Context::Reserve(JobId id) {
  const SchedJob& job = s_->jobs_.at(id);
  const JobShape& shape = job.request.shape;
  const ClusterState& st = *s_->state_;
  const NodeMask* excluded = s_->node_labels_.Excluded(job.selector);
  auto ruled_out = [&](int node) {
    return excluded != nullptr && excluded->Contains(node);
  };
  Reservation best;
  best.nodes = NodeMask(st.num_nodes());
  // Parts of GPUs are not reserved: they free up task by task and are
  // small; such a job waits with its reason (docs/scheduling.md).
  if (shape.slice.partial()) return best;
  // Nodes claimed for another job's preemption are not this job's to
  // reserve.
  NodeMask scratch;
  const NodeMask* claimed = s_->AvoidClaimed(job, nullptr, &scratch);
  for (GpuModelId model : CandidateModels(*s_->cluster_, shape)) {
    const int max_node = st.MaxNodeGpus(model);
    if (max_node < shape.gpus_per_task || !st.tracks_ready_times()) continue;
    Reservation r;
    r.nodes = NodeMask(st.num_nodes());
    r.gpu_model = model;
    r.job = id;
    absl::Time start = absl::InfinitePast();
    if (shape.OnOneNode(max_node)) {
      // One node that will have all the GPUs free.
      for (const ReadyKey& k : st.ReadyIndex(model, shape.TotalGpus())) {
        if (ruled_out(k.node)) continue;
        if (claimed != nullptr && claimed->Contains(k.node)) continue;
        const NodeSpec& n = s_->cluster_->nodes[k.node];
        if (int64_t{shape.tasks} * shape.cpus_milli_per_task > n.cpus_milli ||
            int64_t{shape.tasks} * shape.memory_bytes_per_task >
                n.memory_bytes) {
          continue;
        }
        r.nodes.Insert(k.node);
        start = k.ready;
        r.valid = true;
        break;
      }
    } else {
      // Whole nodes, in the order they are expected to become free.
      int tasks = 0;
      for (const ReadyKey& k : st.ReadyIndex(model, max_node)) {
        if (ruled_out(k.node)) continue;
        if (claimed != nullptr && claimed->Contains(k.node)) continue;
        const NodeSpec& n = s_->cluster_->nodes[k.node];
        int fit = n.gpus / shape.gpus_per_task;
        if (shape.cpus_milli_per_task > 0) {
          fit =
              std::min<int64_t>(fit, n.cpus_milli / shape.cpus_milli_per_task);
        }
        if (shape.memory_bytes_per_task > 0) {
          fit = std::min<int64_t>(fit,
                                  n.memory_bytes / shape.memory_bytes_per_task);
        }
        fit = shape.TasksPerNode(fit);
        if (fit <= 0) continue;
        r.nodes.Insert(k.node);
        start = std::max(start, k.ready);
        tasks += fit;
        if (tasks >= shape.tasks) {
          r.valid = true;
          break;
        }
      }
    }
    if (!r.valid) continue;
    r.start = std::max(start, now_);
    if (!best.valid || r.start < best.start) best = std::move(r);
  }
  if (best.valid) {
    PendingReason why;
    why.code = PendingReason::Code::kReserved;
    why.gpu_model = best.gpu_model;
    why.need = shape.TotalGpus();
    why.when = best.start;
    if (job.reason_pass == s_->pass_) {
      // Why it could not start now: hot spares of other jobs, say so.
      why.spare_nodes = job.reason.spare_nodes;
      why.spare_owners = job.reason.spare_owners;
      why.spare_owner = job.reason.spare_owner;
      why.spare_nodes_idle = job.reason.spare_nodes_idle;
    }
    SetReason(id, why);
    if (!job.request.datasets.empty()) {
      s_->NotePrefetch(job, best, result_);
    }
  }
  return best;
}

bool Scheduler::Context::PreemptFor(JobId for_job,
                                    const std::vector<JobId>& candidates) {
  // How many node plans to try before giving up for this job in this pass.
  static constexpr size_t kMaxPlans = 64;
  // Victims already stopping for this job: wait for them rather than stop
  // more (they hold their GPUs through their grace period).
  if (auto it = s_->awaiting_victims_.find(for_job);
      it != s_->awaiting_victims_.end()) {
    PendingReason why;
    why.code = PendingReason::Code::kWaitingForPreemption;
    why.other = it->second;
    SetReason(for_job, why);
    return true;
  }
  const SchedJob& for_sj = s_->jobs_.at(for_job);
  const JobRequest& request = for_sj.request;
  const JobShape& shape = request.shape;
  NodeMask data_scratch;
  const NodePreference prefer =
      PreferenceFor(*s_, request, s_->options_.data_locality, &data_scratch);
  // Nodes its selector rules out, nodes held for a recovery and (for a
  // non-preemptible job) hot spares: not to be freed for it.
  NodeMask scratch;
  const NodeMask* excluded = s_->AvoidSparesAndRecoveries(
      for_sj, s_->node_labels_.Excluded(for_sj.selector), &scratch);
  ClusterState& st = *s_->state_;
  const std::vector<GpuModelId> models = CandidateModels(*s_->cluster_, shape);
  auto usable = [&](GpuModelId m) {
    return std::find(models.begin(), models.end(), m) != models.end();
  };

  // Candidate victims per node, in preference order.
  std::vector<SchedJob*> cand;
  absl::flat_hash_map<int, std::vector<int>> on_node;
  for (JobId v : candidates) {
    if (v == for_job) continue;
    SchedJob& vj = s_->jobs_.at(v);
    if (vj.phase != JobPhase::kRunning || !usable(vj.placement.gpu_model)) {
      continue;
    }
    const int idx = static_cast<int>(cand.size());
    cand.push_back(&vj);
    for (const TaskPlacement& t : vj.placement.tasks) {
      std::vector<int>& list = on_node[t.node];
      if (list.empty() || list.back() != idx) list.push_back(idx);
    }
  }
  if (cand.empty()) return false;

  // A plan frees one node enough for the job: for a job that fits in a node,
  // enough GPUs for all of it; for a larger gang, the whole node. Its cost is
  // the GPUs of the victims it stops (whole gangs count in full); between
  // plans of equal cost, the one whose least preferred victim comes earliest
  // in `candidates` (the policy's preference order) wins.
  struct Plan {
    int64_t cost;
    int rank;
    int node;
    std::vector<int> victims;
  };
  std::vector<Plan> plans;
  for (const auto& [node, list] : on_node) {
    if ((excluded != nullptr && excluded->Contains(node)) ||
        !st.Schedulable(node) || !usable(st.NodeModel(node)) ||
        st.NodeGpus(node) < shape.gpus_per_task) {
      continue;
    }
    const bool one_node = shape.OnOneNode(st.MaxNodeGpus(st.NodeModel(node)));

    const int need = one_node ? shape.TotalGpus() : st.NodeGpus(node);
    int free = st.FreeGpus(node);
    Plan plan{0, 0, node, {}};
    for (int idx : list) {
      if (free >= need) break;
      for (const TaskPlacement& t : cand[idx]->placement.tasks) {
        if (t.node == node) free += std::popcount(t.gpu_mask);
      }
      plan.cost += cand[idx]->request.shape.TotalGpus();
      plan.rank = std::max(plan.rank, idx);
      plan.victims.push_back(idx);
    }
    if (free >= need) plans.push_back(std::move(plan));
  }
  std::sort(plans.begin(), plans.end(), [](const Plan& a, const Plan& b) {
    return std::tie(a.cost, a.rank, a.node) < std::tie(b.cost, b.rank, b.node);
  });
  if (plans.size() > kMaxPlans) plans.resize(kMaxPlans);

  // Stop plans' victims (trial only) until the job fits, cheapest first.
  std::vector<bool> released(cand.size(), false);
  std::vector<int> order;
  std::optional<Placement> found;
  for (const Plan& plan : plans) {
    for (int idx : plan.victims) {
      if (released[idx]) continue;
      released[idx] = true;
      order.push_back(idx);
      st.Release(cand[idx]->request.id, cand[idx]->placement,
                 cand[idx]->request.shape);
    }
    found = Place(st, shape, excluded, prefer, nullptr, s_->options_);
    if (found.has_value()) break;
  }
  // Undo the trial; victims keep their GPUs until they actually stop.
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const SchedJob* vj = cand[*it];
    st.Allocate(vj->request.id, vj->placement, vj->request.shape,
                vj->expected_end);
  }
  if (!found.has_value()) return false;
  int victims = 0;
  for (int idx : order) {
    SchedJob* vj = cand[idx];
    if (!Overlaps(vj->placement, *found)) continue;
    vj->phase = JobPhase::kStopping;
    vj->preempted_by = for_job;
    result_->preempted.push_back({vj->request.id, for_job});
    ++victims;
  }
  if (victims > 0) {
    s_->awaiting_victims_[for_job] += victims;
    Claim& claim = s_->claims_[for_job];
    claim.nodes = NodeMask(st.num_nodes());
    claim.released = 0;
    for (const TaskPlacement& t : found->tasks) claim.nodes.Insert(t.node);
  }
  PendingReason why;
  why.code = PendingReason::Code::kWaitingForPreemption;
  why.other = victims;
  SetReason(for_job, why);
  return true;
}

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
      Advance(projects_[project], now, options_.usage_half_life);
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

const NodeMask* Scheduler::AvoidClaimed(const SchedJob& job,
                                        const NodeMask* avoid,
                                        NodeMask* scratch) {
  const bool spares = spare_count_ > 0 && !job.request.preemptible;
  if (claims_.empty() && !spares) return avoid;
  const JobId id = job.request.id;
  auto mine = claims_.find(id);
  if (mine == claims_.end()) {
    auto [it, inserted] = with_claims_.try_emplace({avoid, spares});
    if (inserted) {
      it->second = claimed_;
      if (spares) it->second.UnionWith(spare_mask_);
      if (avoid != nullptr) it->second.UnionWith(*avoid);
    }
    return &it->second;
  }
  if (claims_.size() == 1 && !spares) return avoid;
  *scratch = avoid != nullptr ? *avoid : NodeMask(state_->num_nodes());
  for (const auto& [holder, claim] : claims_) {
    if (holder != id) scratch->UnionWith(claim.nodes);
  }
  if (spares) scratch->UnionWith(spare_mask_);
  return scratch;
}

PassResult Scheduler::Schedule(absl::Time now) {
  ++pass_;
  // A claim lasts through the first pass after its last victim stopped.
  for (auto it = claims_.begin(); it != claims_.end();) {
    if (it->second.released != 0 && pass_ > it->second.released + 1) {
      it = claims_.erase(it);
    } else {
      ++it;
    }
  }
  last_pass_time_ = now;
  default_reason_ = PendingReason{};
  PassResult result;
  // Jobs that lost nodes go first, onto their spares; then jobs short of
  // spares top up; then the policy.
  if (!recovering_.empty()) RecoverOnSpares(now, &result);
  with_claims_.clear();
  claimed_ = NodeMask(state_->num_nodes());
  for (const auto& [holder, claim] : claims_) claimed_.UnionWith(claim.nodes);
  if (!short_of_spares_.empty()) {
    const std::vector<JobId> shorts(short_of_spares_.begin(),
                                    short_of_spares_.end());
    for (JobId id : shorts) TopUpSpares(jobs_.at(id));
  }
  Context ctx(this, now, &result);
  policy_->Schedule(ctx);
  return result;
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
    out.push_back(Advance(u, now, options_.usage_half_life));
  }
  return out;
}

}  // namespace loom
