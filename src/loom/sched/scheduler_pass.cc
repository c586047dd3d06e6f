// One scheduling pass (`Scheduler::Schedule`): the claims and spares
// first, then the policy, which sees the scheduler through `Context`
// (placement with a memo of the shapes that failed, reservations,
// preemption). Pure: no I/O, no clock.

#include <algorithm>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/core/labels.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"
#include "loom/sched/scheduler_internal.h"
#include "loom/sched/slice_placement.h"

namespace loom {

using sched_internal::AdvanceUsage;
using sched_internal::SpansNodes;

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
    return AdvanceUsage(u, now_, s_->options_.usage_half_life)
               .decayed_gpu_seconds /
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

}  // namespace loom
