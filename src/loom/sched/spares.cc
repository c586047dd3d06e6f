// Hot spares (docs/scheduling.md, "Hot spares"): whole nodes reserved for a
// running job near its placement, lent to preemptible work, and the
// recovery placement that puts a job that lost nodes back on its survivors
// and spares at once.
//
// Design assumptions:
// - Spares are for jobs whose tasks each take a whole node, so a spare can
//   take the place of any lost node of the job as it is.
// - A spare is held by one job. Only preemptible jobs are placed on it
//   (`AvoidClaimed` adds the spares to what a non-preemptible job avoids),
//   so reclaiming it never stops work that may not be stopped.
// - Everything here costs nothing for jobs without spares: the scheduler
//   calls in only when a job asks for spares or holds some.

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/sched/placement.h"
#include "loom/sched/scheduler.h"

namespace loom {
namespace {

// Where a set of nodes sits: the leaf holding most of them (ties: the
// lowest leaf id) and the spine above it (-1 without one).
struct Anchor {
  int leaf = -1;
  int spine = -1;
};

Anchor AnchorOf(const Topology& topo, const std::vector<int>& nodes) {
  Anchor a;
  std::vector<int> leaves;
  leaves.reserve(nodes.size());
  for (int n : nodes) {
    if (n >= 0) leaves.push_back(topo.leaf_of(n));
  }
  if (leaves.empty()) return a;
  std::sort(leaves.begin(), leaves.end());
  int best = 0;
  for (size_t i = 0; i < leaves.size();) {
    size_t j = i;
    while (j < leaves.size() && leaves[j] == leaves[i]) ++j;
    if (static_cast<int>(j - i) > best) {
      best = static_cast<int>(j - i);
      a.leaf = leaves[i];
    }
    i = j;
  }
  for (int n : nodes) {
    if (n >= 0 && topo.leaf_of(n) == a.leaf) {
      if (topo.num_levels() >= 2) a.spine = topo.AncestorAt(n, 2);
      break;
    }
  }
  return a;
}

Anchor AnchorOfNode(const Topology& topo, int node) {
  return AnchorOf(topo, {node});
}

// 0: under the anchor's leaf, 1: under its spine, 2: farther.
int Distance(const Topology& topo, const Anchor& a, int node) {
  if (a.leaf < 0) return 2;
  if (topo.leaf_of(node) == a.leaf) return 0;
  if (a.spine >= 0 && topo.AncestorAt(node, 2) == a.spine) return 1;
  return 2;
}

}  // namespace

struct Scheduler::RecoveryPlan {
  bool ok = false;
  std::string why;  // when not ok
  Placement placement;
};

bool Scheduler::SpareEligible(const SchedJob& job, GpuModelId model, int node,
                              const NodeMask* own) const {
  if (own != nullptr && own->Contains(node)) return false;
  if (SpareOwner(node) != 0) return false;
  const ClusterState& st = *state_;
  const JobShape& s = job.request.shape;
  if (st.NodeModel(node) != model || !st.Schedulable(node) ||
      st.NodeGpus(node) != s.gpus_per_task) {
    return false;
  }
  const NodeSpec& spec = cluster_->nodes[node];
  if (s.cpus_milli_per_task > spec.cpus_milli ||
      s.memory_bytes_per_task > spec.memory_bytes) {
    return false;
  }
  if (const NodeMask* ex = node_labels_.Excluded(job.selector);
      ex != nullptr && ex->Contains(node)) {
    return false;
  }
  const JobId id = job.request.id;
  for (const auto& [holder, claim] : claims_) {
    if (holder != id && claim.nodes.Contains(node)) return false;
  }
  return st.ForEachJobOn(node, [&](JobId j) {
    return j != id && jobs_.at(j).request.preemptible;
  });
}

void Scheduler::AddSpare(SchedJob& job, int node) {
  if (spare_owner_.empty()) {
    spare_owner_.assign(state_->num_nodes(), 0);
    spare_mask_ = NodeMask(state_->num_nodes());
  }
  spare_owner_[node] = job.request.id;
  spare_mask_.Insert(node);
  ++spare_count_;
  job.spare_nodes.push_back(node);
  // Masks already handed out in this pass to non-preemptible jobs grow by
  // the new spare (capacity only shrinks within a pass, so the pass's
  // failure memo stays true).
  for (auto& [key, mask] : with_claims_) {
    if (key.second) mask.Insert(node);
  }
}

void Scheduler::DropSpare(SchedJob& job, int node) {
  std::erase(job.spare_nodes, node);
  spare_owner_[node] = 0;
  spare_mask_.Erase(node);
  --spare_count_;
}

void Scheduler::ReleaseSpares(SchedJob& job) {
  for (int n : job.spare_nodes) {
    spare_owner_[n] = 0;
    spare_mask_.Erase(n);
    --spare_count_;
  }
  job.spare_nodes.clear();
  short_of_spares_.erase(job.request.id);
}

void Scheduler::TopUpSpares(SchedJob& job) {
  const JobId id = job.request.id;
  const int want =
      job.request.spares - static_cast<int>(job.spare_nodes.size());
  if (want <= 0 || job.phase != JobPhase::kRunning) {
    short_of_spares_.erase(id);
    return;
  }
  const Topology& topo = cluster_->topology;
  std::vector<int> nodes;
  NodeMask own(state_->num_nodes());
  for (const TaskPlacement& t : job.placement.tasks) {
    nodes.push_back(t.node);
    own.Insert(t.node);
  }
  const Anchor anchor = AnchorOf(topo, nodes);
  const GpuModelId model = job.placement.gpu_model;
  std::vector<std::pair<int, int>> found;  // (distance, node)
  for (int n = 0; n < state_->num_nodes(); ++n) {
    if (SpareEligible(job, model, n, &own)) {
      found.emplace_back(Distance(topo, anchor, n), n);
    }
  }
  const size_t take = std::min<size_t>(found.size(), want);
  std::partial_sort(found.begin(), found.begin() + take, found.end());
  for (size_t i = 0; i < take; ++i) AddSpare(job, found[i].second);
  if (static_cast<int>(job.spare_nodes.size()) < job.request.spares) {
    short_of_spares_.insert(id);
  } else {
    short_of_spares_.erase(id);
  }
}

Scheduler::RecoveryPlan Scheduler::PlanRecovery(
    const SchedJob& job, const std::vector<int>& base) const {
  RecoveryPlan plan;
  const ClusterState& st = *state_;
  const JobShape& shape = job.request.shape;
  const JobId id = job.request.id;
  GpuModelId model = shape.gpu_model;
  for (int n : base) {
    if (model == kAnyGpuModel && n >= 0) model = st.NodeModel(n);
  }
  for (int n : job.spare_nodes) {
    if (model == kAnyGpuModel) model = st.NodeModel(n);
  }
  const NodeMask* excluded = node_labels_.Excluded(job.selector);
  // A node the job can restart on now: up, of its model and size, not held
  // for another job, running nothing that may not be stopped.
  auto usable = [&](int n) {
    if (!st.Schedulable(n) || st.NodeModel(n) != model ||
        st.NodeGpus(n) != shape.gpus_per_task ||
        (excluded != nullptr && excluded->Contains(n))) {
      return false;
    }
    for (const auto& [holder, claim] : claims_) {
      if (holder != id && claim.nodes.Contains(n)) return false;
    }
    return st.ForEachJobOn(
        n, [&](JobId j) { return jobs_.at(j).request.preemptible; });
  };
  NodeMask used(st.num_nodes());
  std::vector<int> survivors;
  std::vector<size_t> lost;
  for (size_t i = 0; i < base.size(); ++i) {
    const int n = base[i];
    if (n >= 0 && !used.Contains(n) && usable(n)) {
      used.Insert(n);
      survivors.push_back(n);
    } else {
      lost.push_back(i);
    }
  }
  std::vector<int> spares;
  for (int n : job.spare_nodes) {
    if (!used.Contains(n) && usable(n)) spares.push_back(n);
  }
  if (lost.size() > spares.size()) {
    plan.why = absl::StrCat(lost.size(), " of its ", base.size(),
                            " nodes lost or unusable, ", spares.size(),
                            " usable hot spare(s)");
    return plan;
  }
  // Each lost node's place goes to the nearest spare left: under its leaf,
  // then its spine (where it is known), else near the survivors.
  const Topology& topo = cluster_->topology;
  const Anchor near_survivors =
      AnchorOf(topo, survivors.empty() ? spares : survivors);
  std::vector<int> nodes = base;
  for (size_t i : lost) {
    const Anchor a =
        base[i] >= 0 ? AnchorOfNode(topo, base[i]) : near_survivors;
    size_t best = 0;
    for (size_t k = 1; k < spares.size(); ++k) {
      if (std::make_pair(Distance(topo, a, spares[k]), spares[k]) <
          std::make_pair(Distance(topo, a, spares[best]), spares[best])) {
        best = k;
      }
    }
    nodes[i] = spares[best];
    spares.erase(spares.begin() + static_cast<std::ptrdiff_t>(best));
  }
  plan.placement.gpu_model = model;
  for (int n : nodes) plan.placement.tasks.push_back({n, st.AllGpusMask(n)});
  DescribePlacement(topo, &plan.placement);
  plan.ok = true;
  return plan;
}

bool Scheduler::BeginRecovery(SchedJob& job, std::vector<int> base) {
  const RecoveryPlan plan = PlanRecovery(job, base);
  if (!plan.ok) {
    job.recovery_fallback = plan.why;
    ReleaseSpares(job);
    return false;
  }
  const JobId id = job.request.id;
  job.recovery_base = std::move(base);
  job.recovery_fallback.clear();
  recovering_.insert(id);
  short_of_spares_.erase(id);
  // Its survivors and the spares it will use are held for it.
  Claim& claim = claims_[id];
  claim.nodes = NodeMask(state_->num_nodes());
  claim.released = 0;
  for (const TaskPlacement& t : plan.placement.tasks) {
    claim.nodes.Insert(t.node);
  }
  job.reason = PendingReason{};
  job.reason.code = PendingReason::Code::kRecoveringOnSpares;
  job.reason.gpu_model = plan.placement.gpu_model;
  job.reason_pass = pass_;
  return true;
}

void Scheduler::FallBack(SchedJob& job, std::string why) {
  const JobId id = job.request.id;
  recovering_.erase(id);
  job.recovery_base.clear();
  claims_.erase(id);
  ReleaseSpares(job);
  job.recovery_fallback = std::move(why);
  job.reason = PendingReason{};
  job.reason_pass = 0;
  if (job.infeasible.empty()) policy_->Enqueue(job);
}

void Scheduler::RecoverOnSpares(absl::Time now, PassResult* result) {
  const std::vector<JobId> ids(recovering_.begin(), recovering_.end());
  for (JobId id : ids) {
    SchedJob& job = jobs_.at(id);
    RecoveryPlan plan = PlanRecovery(job, job.recovery_base);
    if (!plan.ok) {
      FallBack(job, std::move(plan.why));
      continue;
    }
    // Whatever runs on those nodes now (preemptible work only) must stop.
    std::vector<JobId> seen;
    std::vector<SchedJob*> victims;
    int stopping = 0;
    for (const TaskPlacement& t : plan.placement.tasks) {
      state_->ForEachJobOn(t.node, [&](JobId v) {
        if (std::find(seen.begin(), seen.end(), v) != seen.end()) return true;
        seen.push_back(v);
        SchedJob& vj = jobs_.at(v);
        if (vj.phase == JobPhase::kRunning) {
          victims.push_back(&vj);
        } else {
          ++stopping;
        }
        return true;
      });
    }
    if (victims.empty() && stopping == 0) {
      StartJob(job, std::move(plan.placement), now, result);
      continue;
    }
    for (SchedJob* vj : victims) {
      vj->phase = JobPhase::kStopping;
      vj->preempted_by = id;
      result->preempted.push_back({vj->request.id, id, /*immediate=*/true});
    }
    Claim& claim = claims_[id];
    claim.nodes = NodeMask(state_->num_nodes());
    claim.released = 0;
    for (const TaskPlacement& t : plan.placement.tasks) {
      claim.nodes.Insert(t.node);
    }
    job.reason = PendingReason{};
    job.reason.code = PendingReason::Code::kRecoveringOnSpares;
    job.reason.gpu_model = plan.placement.gpu_model;
    job.reason.other = static_cast<JobId>(victims.size()) + stopping;
    job.reason_pass = pass_;
  }
}

void Scheduler::NoteSpares(const SchedJob& job, PendingReason* why) const {
  const ClusterState& st = *state_;
  const JobShape& s = job.request.shape;
  const NodeMask* excluded = node_labels_.Excluded(job.selector);
  int count = 0;
  bool idle = true;
  std::vector<JobId> owners;
  spare_mask_.ForEachUntil([&](int n) {
    if (spare_owner_[n] == job.request.id || !st.Schedulable(n) ||
        (s.gpu_model != kAnyGpuModel && st.NodeModel(n) != s.gpu_model) ||
        (excluded != nullptr && excluded->Contains(n)) ||
        st.FreeGpus(n) < std::max(s.gpus_per_task, 1)) {
      return true;
    }
    ++count;
    idle = idle && st.IsIdle(n);
    if (std::find(owners.begin(), owners.end(), spare_owner_[n]) ==
        owners.end()) {
      owners.push_back(spare_owner_[n]);
    }
    return true;
  });
  if (count == 0) return;
  why->spare_nodes = count;
  why->spare_nodes_idle = idle;
  why->spare_owners = static_cast<int>(owners.size());
  why->spare_owner = *std::min_element(owners.begin(), owners.end());
}

const NodeMask* Scheduler::AvoidSparesAndRecoveries(const SchedJob& job,
                                                    const NodeMask* avoid,
                                                    NodeMask* scratch) const {
  const bool spares = spare_count_ > 0 && !job.request.preemptible;
  if (!spares && recovering_.empty()) return avoid;
  *scratch = avoid != nullptr ? *avoid : NodeMask(state_->num_nodes());
  if (spares) scratch->UnionWith(spare_mask_);
  for (JobId id : recovering_) {
    if (auto it = claims_.find(id); it != claims_.end()) {
      scratch->UnionWith(it->second.nodes);
    }
  }
  return scratch;
}

absl::Status Scheduler::CheckSpares() const {
  int count = 0;
  for (int n = 0; n < static_cast<int>(spare_owner_.size()); ++n) {
    const JobId owner = spare_owner_[n];
    if ((owner != 0) != spare_mask_.Contains(n)) {
      return absl::InternalError(absl::StrCat("node ", n, ": spare mask"));
    }
    if (owner == 0) continue;
    ++count;
    const SchedJob* job = Find(owner);
    if (job == nullptr ||
        std::find(job->spare_nodes.begin(), job->spare_nodes.end(), n) ==
            job->spare_nodes.end()) {
      return absl::InternalError(absl::StrCat(
          "node ", n, ": a spare of job ", owner, ", which does not list it"));
    }
    for (const TaskPlacement& t : job->placement.tasks) {
      if (t.node == n) {
        return absl::InternalError(absl::StrCat(
            "node ", n, ": a spare of job ", owner, " and in its placement"));
      }
    }
    absl::Status st = absl::OkStatus();
    state_->ForEachJobOn(n, [&](JobId j) {
      if (!jobs_.at(j).request.preemptible) {
        st = absl::InternalError(absl::StrCat("node ", n, ": a spare of job ",
                                              owner, " runs job ", j,
                                              ", which is not preemptible"));
        return false;
      }
      return true;
    });
    if (!st.ok()) return st;
  }
  for (const auto& [id, job] : jobs_) {
    for (int n : job.spare_nodes) {
      if (SpareOwner(n) != id) {
        return absl::InternalError(absl::StrCat("job ", id, " lists node ", n,
                                                " as its spare; it is not"));
      }
    }
    if (!job.spare_nodes.empty() && job.phase == JobPhase::kPending &&
        !job.recovering()) {
      return absl::InternalError(
          absl::StrCat("job ", id, " holds spares while queued"));
    }
    if (static_cast<int>(job.spare_nodes.size()) > job.request.spares) {
      return absl::InternalError(
          absl::StrCat("job ", id, " holds more spares than it asked for"));
    }
  }
  if (count != spare_count_) {
    return absl::InternalError("spare count out of date");
  }
  return absl::OkStatus();
}

void Scheduler::AbandonRecoveries() {
  const std::vector<JobId> ids(recovering_.begin(), recovering_.end());
  for (JobId id : ids) {
    FallBack(jobs_.at(id), "the cluster spec changed");
  }
}

void Scheduler::RemapSpares(const std::vector<int>& new_of_old) {
  if (spare_count_ == 0) {
    spare_owner_.clear();
    spare_mask_ = NodeMask();
    return;
  }
  std::vector<std::pair<JobId, std::vector<int>>> held;
  for (auto& [id, job] : jobs_) {
    if (!job.spare_nodes.empty()) {
      held.emplace_back(id, std::move(job.spare_nodes));
      job.spare_nodes.clear();
    }
  }
  std::sort(held.begin(), held.end());
  spare_owner_.assign(state_->num_nodes(), 0);
  spare_mask_ = NodeMask(state_->num_nodes());
  spare_count_ = 0;
  for (auto& [id, nodes] : held) {
    SchedJob& job = jobs_.at(id);
    NodeMask own(state_->num_nodes());
    for (const TaskPlacement& t : job.placement.tasks) own.Insert(t.node);
    for (int old : nodes) {
      const int n = old >= 0 && old < static_cast<int>(new_of_old.size())
                        ? new_of_old[old]
                        : -1;
      if (n >= 0 && SpareEligible(job, job.placement.gpu_model, n, &own)) {
        AddSpare(job, n);
      }
    }
    if (static_cast<int>(job.spare_nodes.size()) < job.request.spares) {
      short_of_spares_.insert(id);
    }
  }
}

}  // namespace loom
