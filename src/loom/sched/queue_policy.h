#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/node_mask.h"
#include "loom/sched/pending_reason.h"

namespace loom {

enum class JobPhase {
  kPending,   // in the queue
  kRunning,   // holds its placement
  kStopping,  // preempted: still holds its GPUs until the caller requeues it
};

// The scheduler's record of one live job. Policies read it; only the
// scheduler writes it.
struct SchedJob {
  JobRequest request;
  JobPhase phase = JobPhase::kPending;
  int project = 0;  // interned project index
  // Interned `request.node_selector` (`NodeLabels::Intern`); 0: none.
  int selector = 0;
  Placement placement;  // valid while running or stopping
  absl::Time start_time = absl::InfinitePast();  // of the current run
  absl::Time expected_end = absl::InfiniteFuture();
  absl::Time queued_since = absl::InfinitePast();
  // GPU-seconds received in earlier runs (the current run is added by
  // `AttainedAt`).
  double attained_gpu_seconds = 0;
  int runs = 0;            // how many times it started
  JobId preempted_by = 0;  // set while stopping
  // When the job last reported a saved checkpoint (`ReportCheckpoint`).
  absl::Time checkpoint_time = absl::InfinitePast();
  PendingReason reason;
  uint64_t reason_pass = 0;  // pass that set `reason`
  // Non-empty: pending, but out of the policy's queue because it could never
  // run on the cluster as it is now (`Scheduler::UpdateCluster`); why.
  std::string infeasible;
  // Hot spares (`JobRequest::spares`) reserved for the job now: whole nodes
  // on which no non-preemptible job is placed, lent to preemptible ones.
  // Held while it runs, and while it is pending with a recovery placement.
  std::vector<int> spare_nodes;
  // Non-empty: pending with a recovery placement (`Scheduler::Requeue`
  // after losing nodes, or `Submit` with `last_nodes`), out of the policy's
  // queue: the node of each task in the run that ended, -1 for a lost one.
  // Each pass tries it first, on the survivors and spares in place of the
  // lost nodes, until it starts or falls back to the queue.
  std::vector<int> recovery_base;
  // Why the recovery on spares after the latest requeue was not possible
  // (said with the pending reason; kept while the run that followed runs);
  // empty otherwise.
  std::string recovery_fallback;

  bool recovering() const { return !recovery_base.empty(); }

  // GPU-seconds of the current run since its last checkpoint (all of the
  // run without one): the work a preemption at `now` would throw away.
  double WorkAtRisk(absl::Time now) const {
    if (phase == JobPhase::kPending) return 0;
    const absl::Time since = std::max(start_time, checkpoint_time);
    return request.shape.TotalGpus() *
           std::max(0.0, absl::ToDoubleSeconds(now - since));
  }

  // GPU-seconds received up to `now`, counting the current run.
  double AttainedAt(absl::Time now) const {
    if (phase == JobPhase::kPending) return attained_gpu_seconds;
    return attained_gpu_seconds +
           request.shape.TotalGpus() *
               std::max(0.0, absl::ToDoubleSeconds(now - start_time));
  }
};

// A reservation for a job that cannot start now (EASY backfilling): the
// earliest time enough nodes are expected to be free, assuming running jobs
// end at their time limit, and the nodes it needs. Jobs without a time limit
// never end as far as the reservation knows, so `start` may be infinite.
struct Reservation {
  bool valid = false;
  JobId job = 0;
  GpuModelId gpu_model = 0;
  absl::Time start = absl::InfiniteFuture();
  NodeMask nodes;
};

// What a policy may do during one pass. Implemented by `Scheduler`; all time
// is `now()`.
class SchedulingContext {
 public:
  virtual ~SchedulingContext() = default;

  virtual absl::Time now() const = 0;
  // The number of this pass (1 for the first).
  virtual uint64_t pass() const = 0;
  virtual const SchedJob& job(JobId id) const = 0;
  virtual const ClusterState& state() const = 0;

  // Places pending job `id` and starts it now if it fits, using no node in
  // `avoid` (may be null). Returns true when it started; the caller (the
  // policy) then removes it from its own queue. On failure records why in the
  // job's pending reason and returns false.
  // `*why` (may be null) receives the failure reason.
  virtual bool TryStart(JobId id, const NodeMask* avoid,
                        PendingReason* why = nullptr) = 0;

  // Computes the reservation of pending job `id` and records it as the job's
  // pending reason. Invalid when no node of a usable model is schedulable.
  virtual Reservation Reserve(JobId id) = 0;

  // Tries to make room for pending job `for_job` by stopping jobs from
  // `candidates` (most preferred victims first; each must be running and of
  // a different job). When stopping a prefix of them makes `for_job` fit,
  // those whose nodes the new placement uses are marked stopping and
  // reported as preempted, and true is returned. Nothing changes otherwise.
  virtual bool PreemptFor(JobId for_job,
                          const std::vector<JobId>& candidates) = 0;

  virtual void SetReason(JobId id, const PendingReason& reason) = 0;
  // The reason of every pending job that this pass did not give its own.
  virtual void SetDefaultReason(const PendingReason& reason) = 0;

  // Decayed GPU-seconds of `project` divided by its weight: the fair-share
  // key, lower runs sooner.
  virtual double NormalizedUsage(int project) const = 0;

  // The project's guaranteed GPUs (0: none) and the GPUs its running and
  // stopping jobs hold. A project above its quota is borrowing idle capacity.
  virtual int QuotaGpus(int project) const = 0;
  virtual int RunningGpus(int project) const = 0;
};

// A queue policy orders the pending jobs and decides, each pass, which to
// start, reserve for or preempt for. Placement itself is shared
// (`FindPlacement`). Policies keep their own queue index, told about changes
// through the hooks below; they never read a job's true duration.
class QueuePolicy {
 public:
  virtual ~QueuePolicy() = default;

  virtual std::string_view name() const = 0;
  // Whether the policy calls `Reserve` (the scheduler then maintains the
  // reservation index).
  virtual bool UsesReservations() const { return false; }

  // `job` entered the queue: submitted, or requeued after running.
  virtual void Enqueue(const SchedJob& job) = 0;
  // `job` left the queue without being started by this policy (cancelled).
  virtual void Remove(const SchedJob& job) = 0;
  // `job` started running (called from inside `TryStart`).
  virtual void Started(const SchedJob& job) {}
  // `job` stopped running: finished, cancelled or requeued.
  virtual void Stopped(const SchedJob& job) {}

  // Runs one scheduling pass.
  virtual void Schedule(SchedulingContext& ctx) = 0;

  // The reason of a pending job that pass `pass` skipped without visiting
  // (because an identical job before it could not start), if the policy did
  // so.
  virtual std::optional<PendingReason> SkippedReason(const SchedJob& job,
                                                     uint64_t pass) const {
    return std::nullopt;
  }
};

// Options of every built-in policy, with their documented defaults.
struct PolicyOptions {
  // fair: a job pending longer than this takes the reservation ahead of
  // fair-share order, so that large gangs do not starve.
  absl::Duration starvation_age = absl::Hours(1);
  // las: attained-service thresholds in GPU-seconds between queues.
  std::vector<double> las_thresholds = {3600.0, 36000.0};
};

// The built-in policy names: fifo, backfill, las, fair.
std::vector<std::string> QueuePolicyNames();

// Creates a policy by name; InvalidArgument listing the names otherwise.
absl::StatusOr<std::unique_ptr<QueuePolicy>> MakeQueuePolicy(
    std::string_view name, const PolicyOptions& options);

}  // namespace loom
