#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/node_labels.h"
#include "loom/sched/node_mask.h"
#include "loom/sched/queue_policy.h"
#include "loom/sched/slice_placement.h"

namespace loom {

struct SchedulerOptions {
  // Fair-share accounting: GPU-seconds used by a project lose half their
  // weight after this long (Slurm's PriorityDecayHalfLife; default 7 days).
  absl::Duration usage_half_life = absl::Hours(24 * 7);
  // Where shares of GPUs go (slice_placement.h): best fit (the default), or
  // `kFgd`, where the expected fragmentation of `target_workload` grows
  // least (the caller supplies the workload's task types; the simulator
  // counts its trace's). Whole-GPU, gang and MIG placement are the same
  // under both.
  SliceScore slice_score = SliceScore::kBestFit;
  TargetWorkload target_workload;
  // Data locality (docs/scheduling.md "Data locality"): placement prefers
  // nodes that hold a job's datasets (`SetNodeDatasets`). Off, the datasets
  // are still used for prefetch (`PassResult::prefetch`); for the
  // simulator's with/without comparison.
  bool data_locality = true;
};

// The answer to "can this job run here?" at submit time.
struct SubmitOutcome {
  enum class Kind { kQueued, kInfeasible };
  Kind kind = Kind::kQueued;
  std::string reason;  // why it can never run, for kInfeasible
};

struct Preemption {
  JobId victim = 0;
  JobId for_job = 0;
  // A spare reclaimed: the victim ran on a hot spare (or a survivor node)
  // of `for_job`, which has lost a node and restarts there now. Stop it
  // without grace (the caller sends SIGKILL, no checkpoint signal), then
  // `Requeue` or `Finish` it as for any preemption.
  bool immediate = false;
};

// What one scheduling pass decided. Started jobs hold their placement
// (`Scheduler::Find(id)->placement`), whose `preferred_tasks` says how many
// of its tasks landed on nodes that hold the job's image (`SetNodeImages`);
// preempted jobs are stopping and keep their GPUs until the caller reports
// them stopped with `Requeue`.
struct PassResult {
  std::vector<JobId> started;
  std::vector<Preemption> preempted;
  // Prefetch: the pass gave pending `job` a backfill reservation on nodes
  // that lack some of its datasets (`JobRequest::datasets`, as far as
  // `SetNodeDatasets` says); the caller may start filling `datasets` on
  // `nodes` (sorted) before the job starts there. Each (job, node, dataset)
  // is reported once while the job's reserved nodes stay the same; a
  // reservation on other nodes reports the new ones.
  struct Prefetch {
    JobId job = 0;
    std::vector<int> nodes;
    std::vector<std::string> datasets;
  };
  std::vector<Prefetch> prefetch;
};

// Per-project accounting: GPU-seconds, plain and decayed.
struct ProjectUsage {
  std::string name;
  double weight = 1.0;
  int quota_gpus = 0;  // guaranteed GPUs (cluster spec); 0: none
  int running_gpus = 0;
  double gpu_seconds = 0;          // total, as of `updated`
  double decayed_gpu_seconds = 0;  // as of `updated`
  absl::Time updated = absl::InfinitePast();
};

// loom's scheduler: the live jobs, the cluster's free resources and one queue
// policy. The server and the simulator both drive it: they report events
// (submit, finish, requeue, cancel, node changes) and call `Schedule(now)`,
// then carry out its decisions.
//
// Pure and deterministic: no I/O, no clock reads (time is always passed
// in), no randomness; the same calls give the same decisions. Not
// thread-safe: one thread owns it.
class Scheduler {
 public:
  // The scheduler keeps its own copy of `cluster` (`UpdateCluster` replaces
  // it).
  Scheduler(const Cluster& cluster, std::unique_ptr<QueuePolicy> policy,
            SchedulerOptions options = {});

  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Adds a job to the queue. Returns InvalidArgument for a malformed request
  // or a duplicate id, and for `spares` on a job whose tasks do not each
  // take a whole node; a job that could never run on this cluster is not
  // queued and comes back as kInfeasible with the reason.
  //
  // Hot spares (spares.cc, docs/scheduling.md): when a job with `spares`
  // starts, up to that many whole nodes are reserved for it (its GPU model,
  // schedulable, matching its selector, free or running only preemptible
  // work; the same leaf as most of its nodes first, then the same spine,
  // then any, ties by node id), topped up in later passes when it got
  // fewer. Only preemptible jobs are placed on spares. They are not the
  // job's GPU-seconds nor its project's quota.
  //
  // A request with `last_nodes` and `spare_nodes` (a job queued again after
  // losing nodes: the server finished its run and submits it again) takes
  // back those spares that are still schedulable and no other job's, and
  // when some of its nodes are lost (-1, or unschedulable now) and it holds
  // enough spares, waits for its recovery placement (see `Requeue`) instead
  // of joining the queue.
  absl::StatusOr<SubmitOutcome> Submit(const JobRequest& job, absl::Time now);

  // A running job ended. Releases its GPUs and spares and forgets it.
  absl::Status Finish(JobId id, absl::Time now);
  // Removes a pending or running job (releasing its GPUs and spares) and
  // forgets it.
  absl::Status Cancel(JobId id, absl::Time now);
  // A running or stopping job stopped and goes back to the queue, keeping
  // the service it received (preemption, node failure, restart policy).
  //
  // A job with spares some of whose nodes are unschedulable now (the caller
  // marked them down with `SetNodeSchedulable`) keeps its spares and gets a
  // recovery placement: its old placement with each lost node replaced by
  // the nearest spare. The next pass tries it first, ahead of the queue and
  // of reservations: it starts there when those GPUs are free; preemptible
  // jobs on them are preempted (`Preemption::immediate`) and it starts in a
  // later pass, once the caller has requeued or finished them; meanwhile
  // no other job takes those nodes. Without enough usable spares (now or at
  // a later pass) it releases them and joins the queue, and its pending
  // reason says why. Any other requeue releases the spares.
  absl::Status Requeue(JobId id, absl::Time now);

  // Re-instates a job that is already running at `placement` since
  // `start_time`, having received `attained_gpu_seconds` in earlier runs: a
  // restarted controller rebuilding its state from the store. The placement
  // must use free GPUs of nodes of one model with the job's shape; otherwise
  // FailedPrecondition says which GPU is taken, and nothing changes. A job
  // with `spares` takes back those of `job.spare_nodes` that can still be
  // its spares and tops up in the next pass.
  absl::Status Restore(const JobRequest& job, const Placement& placement,
                       absl::Time start_time, double attained_gpu_seconds,
                       absl::Time now);

  // The job saved a checkpoint at `at`: preemption prefers the victims that
  // lose the least work (`SchedJob::WorkAtRisk`). Unknown ids are ignored.
  void ReportCheckpoint(JobId id, absl::Time at);

  // Cordons (false) or uncordons (true) a node: an unschedulable node gets no
  // new work; jobs already there keep running (the caller decides). A spare
  // that becomes unschedulable stops being one; its job tops up.
  void SetNodeSchedulable(int node, bool schedulable);
  // The job node `node` is a hot spare of, or 0.
  JobId SpareOwner(int node) const {
    return node >= 0 && node < static_cast<int>(spare_owner_.size())
               ? spare_owner_[node]
               : 0;
  }
  // Checks the spare bookkeeping: each spare held by one live job that
  // lists it, outside its placement, with no non-preemptible job on it;
  // for tests.
  absl::Status CheckSpares() const;
  // Live jobs with a task on `node`, each once.
  std::vector<JobId> JobsOnNode(int node) const;

  // The container images node `node` holds now, by digest ("sha256:...");
  // replaces the node's previous set (an empty list clears it). Placement
  // then prefers these nodes for jobs of those images among equally good
  // nodes (`FindPlacement`'s `prefer`). Empty digests and duplicates are
  // ignored, and so is a node id out of range. Pure state: nothing is
  // scheduled until the next `Schedule`.
  void SetNodeImages(int node, const std::vector<std::string>& digests);
  // The nodes that hold image `digest`, or null when none does (or the
  // digest is empty). Valid until the next `SetNodeImages`.
  const NodeMask* NodesWithImage(const std::string& digest) const;
  // The dataset versions whose copy in node `node`'s cache is complete
  // ("name@version" or stable ids, as in `JobRequest::datasets`); replaces
  // the node's previous set, like `SetNodeImages`. Placement then prefers
  // nodes holding all of a job's datasets (ranked above the image,
  // `NodePreference`), and prefetch skips them. Pure state.
  void SetNodeDatasets(int node, const std::vector<std::string>& datasets);
  // The nodes that hold every one of `datasets`, or null when none does or
  // the list is empty. A single dataset's mask is the scheduler's own (valid
  // until the next `SetNodeDatasets`); the intersection for several goes to
  // `*scratch`.
  const NodeMask* NodesWithDatasets(const std::vector<std::string>& datasets,
                                    NodeMask* scratch) const;
  // For a job of a spread group (`JobRequest::spread_group`): `avoid` (may
  // be null) plus the nodes of the group's running and stopping jobs (with
  // `spread_leaf`, every node under their leaves), in `*scratch`; null
  // when the job has no group or the group holds no node.
  const NodeMask* SpreadAvoid(const SchedJob& job, const NodeMask* avoid,
                              NodeMask* scratch) const;

  // Cluster changes (cluster_update.cc; a cluster spec revision applied
  // live). `PreviewCluster` says what taking `next` would do to the live
  // jobs without changing anything; `UpdateCluster` takes it.
  //
  // Nodes are matched by name: a node in both clusters keeps its jobs, its
  // schedulable flag and its images; a new node starts schedulable (as at
  // construction). Every running or stopping job must still fit where it
  // is (its nodes present, of the same GPU model, with the GPUs, CPUs and
  // memory it holds); `UpdateCluster` refuses with FailedPrecondition,
  // naming the job and node, while one does not (`blocked`; the caller
  // drains those nodes first), and nothing changes. Every live job's GPU
  // model must be a model of `next` (by name; ids may differ): the caller
  // keeps the models live jobs ask for. Pending jobs that could never run on
  // `next` stay pending but leave the queue (`infeasible`, with the reason
  // as their pending reason) until an update makes them feasible again
  // (`feasible`). Project quotas and weights are `next`'s from the next
  // pass; a project `next` no longer declares keeps its usage with weight 1
  // and no quota. Usage, ages and restart counts are kept.
  struct ClusterChange {
    struct Blocked {
      JobId job = 0;
      std::string node;
      std::string why;  // "node h200-3 is removed", "... has 4 GPUs, ..."
    };
    std::vector<Blocked> blocked;
    // Pending jobs that can no longer run, and why ("needs 16 nodes of
    // h200; the cluster has 12").
    struct Unfit {
      JobId job = 0;
      std::string why;
    };
    std::vector<Unfit> infeasible;
    std::vector<JobId> feasible;  // ... that can run again
  };
  ClusterChange PreviewCluster(const Cluster& next) const;
  absl::StatusOr<ClusterChange> UpdateCluster(const Cluster& next,
                                              absl::Time now);

  // Replaces node `node`'s labels (all of them: declared, reported by its
  // agent, topology; the caller merges them). Jobs with a node selector
  // (`JobRequest::node_selector`) are placed only on nodes whose labels
  // match it. Every node starts with its declared labels
  // (`NodeSpec::labels`). A node id out of range is ignored. Pure state:
  // nothing is scheduled until the next `Schedule`.
  void SetNodeLabels(int node, std::map<std::string, std::string> labels);
  // The node's usable RDMA NICs as its agent reports them (-1: not known;
  // until then the cluster spec's `nics` count, when it declares any). A
  // job whose tasks must span nodes is not placed on a node with none, and
  // `nics_per_task` counts against them (docs/scheduling.md "NICs"). A node
  // id out of range is ignored.
  void SetNodeNics(int node, int nics);
  const NodeLabels& node_labels() const { return node_labels_; }

  // Runs one scheduling pass at `now`.
  PassResult Schedule(absl::Time now);

  const SchedJob* Find(JobId id) const;
  // The pending reason of a pending job, as data and as text.
  PendingReason ReasonFor(const SchedJob& job) const;
  std::string ExplainPending(JobId id, absl::Time now) const;

  const ClusterState& state() const { return *state_; }
  const QueuePolicy& policy() const { return *policy_; }
  const Cluster& cluster() const { return *cluster_; }
  int pending_count() const { return pending_count_; }
  int running_count() const { return running_count_; }
  // Per-project usage, brought up to `now`.
  std::vector<ProjectUsage> Usage(absl::Time now) const;
  uint64_t passes() const { return pass_; }

 private:
  class Context;

  int InternProject(const std::string& name);
  void Accrue(int project, absl::Time now);
  void StopRunning(SchedJob& job, absl::Time now);
  // Starts pending `job` at `placement` now (the policy's `TryStart`, or a
  // recovery) and reserves its spares.
  void StartJob(SchedJob& job, Placement placement, absl::Time now,
                PassResult* result);

  // Hot spares (spares.cc).
  struct RecoveryPlan;
  // Whether `node` may become a spare of `job` (whose tasks run on, or
  // would run on, nodes of `model`; `own` are its nodes, may be null).
  bool SpareEligible(const SchedJob& job, GpuModelId model, int node,
                     const NodeMask* own) const;
  void AddSpare(SchedJob& job, int node);
  void DropSpare(SchedJob& job, int node);
  void ReleaseSpares(SchedJob& job);
  // Reserves spares up to `request.spares`, nearest to the job's placement.
  void TopUpSpares(SchedJob& job);
  RecoveryPlan PlanRecovery(const SchedJob& job,
                            const std::vector<int>& base) const;
  // Gives pending `job` the recovery placement from `base`; false (spares
  // released, `recovery_fallback` set) when its spares cannot cover the
  // lost nodes.
  bool BeginRecovery(SchedJob& job, std::vector<int> base);
  // Drops `job`'s recovery placement and queues it normally.
  void FallBack(SchedJob& job, std::string why);
  // The pass's first step: every job with a recovery placement.
  void RecoverOnSpares(absl::Time now, PassResult* result);
  // Adds to `why` the spares of other jobs that a non-preemptible `job`
  // may not use although they have room for it.
  void NoteSpares(const SchedJob& job, PendingReason* why) const;
  // For preemption on behalf of `job`: `avoid` plus the nodes held for
  // recoveries and, for a non-preemptible job, the spares (`avoid` itself
  // when there are none); a new mask goes to `*scratch`.
  const NodeMask* AvoidSparesAndRecoveries(const SchedJob& job,
                                           const NodeMask* avoid,
                                           NodeMask* scratch) const;
  // After `UpdateCluster`: recovery placements fall back, spares move to
  // the new node ids (`new_of_old`) or are dropped.
  void AbandonRecoveries();
  void RemapSpares(const std::vector<int>& new_of_old);
  // Sets the project's weight and quota from `cluster_`'s projects.
  void ApplyProjectSpecs();

  // `state_` refers to `*cluster_`: both are replaced together.
  std::unique_ptr<const Cluster> cluster_;
  const SchedulerOptions options_;
  std::unique_ptr<QueuePolicy> policy_;
  std::unique_ptr<ClusterState> state_;
  absl::node_hash_map<JobId, SchedJob> jobs_;
  // Per preempting job, how many of its victims are still stopping.
  absl::flat_hash_map<JobId, int> awaiting_victims_;
  // The nodes a preemption frees, claimed for the job it was for: no other
  // job starts on them while its victims stop, nor in the first pass after
  // (else a victim queued again could take its GPUs back first, and be
  // preempted again, round after round). `released` is the pass after
  // which the last victim stopped (0: some still stop).
  struct Claim {
    NodeMask nodes;
    uint64_t released = 0;
  };
  std::map<JobId, Claim> claims_;
  // Per pass: the union of the claims, and `avoid` masks with it added
  // (by the policy's mask, null: none, and whether the spares are added
  // too, for non-preemptible jobs).
  NodeMask claimed_;
  absl::node_hash_map<std::pair<const NodeMask*, bool>, NodeMask> with_claims_;
  // The mask `job` must avoid: `avoid` plus every other job's claim, and,
  // for a non-preemptible job, every spare (`avoid` itself when there is
  // none). A mask built for this job alone goes to `*scratch`.
  const NodeMask* AvoidClaimed(const SchedJob& job, const NodeMask* avoid,
                               NodeMask* scratch);
  // Hot spares: per node the job it is a spare of (0: none; empty until the
  // first spare), the same as a mask, and how many.
  std::vector<JobId> spare_owner_;
  NodeMask spare_mask_;
  int spare_count_ = 0;
  // Running jobs that hold fewer spares than they asked for, and pending
  // jobs with a recovery placement.
  std::set<JobId> short_of_spares_;
  std::set<JobId> recovering_;
  std::vector<ProjectUsage> projects_;
  absl::flat_hash_map<std::string, int> project_index_;
  // Image locality: per digest the nodes holding it (only digests some node
  // holds), and per node its digests, sorted and unique.
  absl::flat_hash_map<std::string, NodeMask> image_nodes_;
  std::vector<std::vector<std::string>> node_images_;
  // Data locality: the same for dataset versions (`SetNodeDatasets`), and
  // per pending job with a reservation its reserved nodes and the (node,
  // dataset) pairs already reported for prefetch.
  absl::flat_hash_map<std::string, NodeMask> dataset_nodes_;
  std::vector<std::vector<std::string>> node_datasets_;
  struct Prefetched {
    NodeMask nodes;
    std::set<std::pair<int, std::string>> reported;
  };
  std::map<JobId, Prefetched> prefetched_;
  // Reports in `result` the nodes of `reservation` that lack the job's
  // datasets (`PassResult::prefetch`).
  void NotePrefetch(const SchedJob& job, const Reservation& reservation,
                    PassResult* result);
  // Per node its labels (indexed by node id), and the node selectors of
  // live jobs (`SchedJob::selector`) with the nodes each rules out.
  NodeLabels node_labels_;
  int pending_count_ = 0;
  int running_count_ = 0;
  uint64_t pass_ = 0;
  absl::Time last_pass_time_ = absl::InfinitePast();
  PendingReason default_reason_;
};

}  // namespace loom
