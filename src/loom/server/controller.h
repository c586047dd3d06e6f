#pragma once

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/btree_set.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/common/metrics_text.h"
#include "loom/core/cluster.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job_array.h"
#include "loom/core/job_spec.h"
#include "loom/core/service_spec.h"
#include "loom/sched/scheduler.h"
#include "loom/server/controller_counters.h"
#include "loom/server/controller_node.h"
#include "loom/server/controller_types.h"
#include "loom/server/dataset_catalog.h"
#include "loom/server/dataset_lister.h"
#include "loom/server/dataset_resolver.h"
#include "loom/server/gateway_report.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/job_events_store.h"
#include "loom/server/job_limits.h"
#include "loom/server/job_record.h"
#include "loom/server/maintenance.h"
#include "loom/server/service_plan.h"
#include "loom/server/service_record.h"
#include "loom/server/stored_job.h"
#include "loom/server/usage_ledger.h"
#include "loom/store/accounting_store.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// The controller's brain: jobs, nodes and the scheduler, with every change
// persisted to the `StateStore` before it is acknowledged. It does no I/O
// besides the store; time is passed in. Thread-safe: one mutex guards all
// state; the server's HTTP threads and its scheduling thread call in.
//
// Its parts: controller.cc (making it, loading and writing the store),
// controller_jobs.cc (the job API), controller_runs.cc (a job's runs:
// start, stop, end, restart), controller_agents.cc (the agent protocol),
// controller_tick.cc (liveness and scheduling rounds), controller_deps.cc
// (job dependencies), controller_nodes.cc
// (nodes), controller_labels.cc (node labels and drift), controller_usage.cc
// (utilisation, projects, metrics) and controller_history.cc (job histories on
// load).
class Controller {
 public:
  // Loads jobs and node settings from `store` (which must outlive the
  // controller) and rebuilds the scheduler's state: pending jobs are queued
  // again, running jobs keep their placement. Nodes start `unknown` (not
  // schedulable) until their agent registers.
  //
  // `accounting` (which must outlive the controller too) is where finished
  // jobs go when their retention is over; null: they stay in the live state
  // for good.
  static absl::StatusOr<std::unique_ptr<Controller>> Create(
      Cluster cluster, StateStore* store, ControllerOptions options,
      absl::Time now, AccountingStore* accounting = nullptr);

  // Jobs. Errors: InvalidArgument (bad spec, field named),
  // FailedPrecondition with "infeasible:" (can never run), NotFound,
  // Unavailable/Internal (store).
  //
  // `request_id` (optional, the client's `Idempotency-Key`, scoped by the
  // HTTP layer to its user: up to 256 of [A-Za-z0-9._:-]) makes a submission
  // safe to retry: a second submission with the same id, from any client to any
  // leader, gets the first job back
  // (`*created` false) instead of a new one, for
  // `idempotency_key_lifetime`. The same id with a different spec is
  // AlreadyExists ("Idempotency-Key ... was already used for a different
  // request"; HTTP 422).
  //
  // A spec with a `container` must come with its `image_digest` resolved
  // (`ResolveContainer`, done by the HTTP layer without this controller's
  // lock); FailedPrecondition otherwise, unless `request_id` finds the
  // job it already made.
  absl::StatusOr<nlohmann::json> Submit(JobSpec spec, const std::string& user,
                                        absl::Time now,
                                        const std::string& request_id = "",
                                        bool* created = nullptr);
  // Whether `request_id` is a live idempotency key whose job exists: a
  // retried submission that `Submit` answers with that job, so the HTTP
  // layer need not ask the registry again.
  bool KnowsRequest(const std::string& request_id, absl::Time now) const;
  absl::StatusOr<nlohmann::json> Cancel(JobId id, absl::Time now);
  absl::StatusOr<nlohmann::json> Release(JobId id, absl::Time now);
  // Puts a pending job (an array, or one element of it) on hold: out of
  // the queue until `Release`, as Slurm's `scontrol hold`.
  absl::StatusOr<nlohmann::json> Hold(JobId id, absl::Time now);
  // The job a route or the CLI names: a job ID ("12"), or an array element
  // ("12_7": the element's own ID, also before it exists). NotFound when
  // 12 is no array or 7 not one of its indices.
  absl::StatusOr<JobId> ResolveJobRef(std::string_view text) const;
  // The job says it saved a checkpoint (`step` when it told one). Only a
  // running or stopping job can; FailedPrecondition otherwise. The job (and
  // the scheduler's choice of preemption victims) sees it at once; the
  // store gets at most one report per `checkpoint_write_interval`, the
  // latest one of each interval (written by `Tick`).
  absl::StatusOr<nlohmann::json> Checkpoint(JobId id,
                                            std::optional<int64_t> step,
                                            absl::Time now);
  // Releases several held jobs with one write; `errors` gets one status per
  // id (OK: released).
  void ReleaseMany(const std::vector<JobId>& ids, absl::Time now,
                   std::vector<absl::Status>* errors);
  absl::StatusOr<nlohmann::json> GetJob(JobId id, absl::Time now) const;
  // OK while `run` is job `id`'s current run and it is running or stopping
  // (a job token of that run is valid); NotFound or FailedPrecondition.
  absl::Status CheckRun(JobId id, int64_t run) const;
  nlohmann::json ListJobs(const JobQuery& filter, absl::Time now) const;
  // The agent address of a registered node, for fault injection.
  absl::StatusOr<std::string> NodeAddress(const std::string& name) const;
  // Where a task of a job runs, for logs: (agent address, task id).
  absl::StatusOr<std::pair<std::string, std::string>> TaskLocation(
      JobId id, int task) const;
  // Where the output of task `task` of job `id` is, for the log proxy: the
  // agent's address, the task's id and node, and whether it may still
  // write (launching or running). Errors as `TaskLocation`.
  struct TaskLogSource {
    std::string address;
    std::string task_id;
    std::string node;
    bool live = false;
  };
  // `run` >= 0: that run of the job (`LOOM_RESTART_COUNT`), the current
  // one or one of its kept past runs (`JobRecord::past_runs`); NotFound
  // otherwise. -1: the current run, or, while the job waits to run again,
  // the last past run.
  absl::StatusOr<TaskLogSource> TaskLogs(JobId id, int task,
                                         int run = -1) const;
  // The user job `id` runs as (NotFound when there is none): cheap, for
  // access checks.
  absl::StatusOr<std::string> JobUser(JobId id) const;
  // Whether task `task_id` of job `id` may still write output.
  bool TaskMayWrite(JobId id, const std::string& task_id) const;

  // History and usage (controller_retention.cc, docs/accounting.md).
  // Moves the jobs whose retention is over (`job_retention` after they
  // ended; an array with its elements) to the accounting store, then out of
  // the store's live state and memory, in that order, so that a crash
  // between the two only makes the next pass do it again. Scans at most
  // once a second and moves at most 2,000 jobs a pass (an array's elements
  // first, the array itself once they are gone); returns how many it moved.
  int PurgeExpiredJobs(absl::Time now);
  // `loom sacct`: the jobs that match `query`, live ones and those in the
  // accounting store, in id order (`GET /v1/accounting/jobs`). The store
  // is read after the live state and outside the controller's lock. As
  // sacct -j: an array's ID in `query.ids` stands for its elements, and
  // `elements` ("12_7") name one each, live or purged.
  absl::StatusOr<nlohmann::json> AccountingJobs(
      const FinishedJobQuery& query, absl::Time now,
      const std::vector<ArrayElementRef>& elements = {}) const;
  // `loom report usage`: GPU-seconds of the hours that overlap [since,
  // until) grouped as `g`, from the usage ledger plus the runs not in it yet
  // (running, or ended and not yet written).
  absl::StatusOr<nlohmann::json> ReportUsage(const UsageGrouping& g,
                                             absl::Time since, absl::Time until,
                                             absl::Time now) const;

  // Services (controller_services.cc, docs/services.md). Apply creates a
  // service or changes it (a new replica revision rolls out); the spec's
  // user is set by the caller's checks.
  absl::StatusOr<nlohmann::json> ApplyService(ServiceSpec spec, absl::Time now);
  absl::StatusOr<nlohmann::json> GetService(const std::string& name,
                                            absl::Time now) const;
  nlohmann::json ListServices(absl::Time now) const;
  absl::StatusOr<nlohmann::json> ScaleService(const std::string& name,
                                              int replicas, absl::Time now);
  absl::StatusOr<nlohmann::json> DeleteService(const std::string& name,
                                               absl::Time now);
  // The gateway's side (`GET /v1/gateway/config`, `POST
  // /v1/gateway/report`): what each service's backend must hold, and the
  // balancer's statistics back.
  nlohmann::json GatewayConfig(absl::Time now) const;
  absl::Status GatewayReport(const nlohmann::json& body, absl::Time now);

  // Nodes and projects.
  nlohmann::json ListNodes(absl::Time now) const;

  // Images on nodes (controller_images.cc, docs/images.md): what each node
  // (or only `node`; NotFound for an unknown one) holds and pulls.
  absl::StatusOr<nlohmann::json> ListImages(const std::string& node) const;
  // Asks `nodes` (names), or every node of `pool`, or with neither every
  // node, to pull `pinned` ("repo@digest"; `as_given` is what the user
  // wrote). Nodes that are down get nothing (listed as skipped).
  // InvalidArgument for an unknown node or pool.
  absl::StatusOr<nlohmann::json> PullImage(
      const std::string& pinned, const std::string& as_given,
      const std::vector<std::string>& nodes, const std::string& pool);
  absl::StatusOr<nlohmann::json> GetNode(const std::string& name,
                                         absl::Time now) const;
  // `op` is "cordon", "uncordon" or "drain".
  absl::StatusOr<nlohmann::json> SetNodeMode(const std::string& name,
                                             const std::string& op,
                                             absl::Time now);
  nlohmann::json ListProjects(absl::Time now) const;

  // The agent protocol (docs/api.md).
  absl::StatusOr<nlohmann::json> Register(const nlohmann::json& body,
                                          absl::Time now);
  absl::StatusOr<nlohmann::json> Heartbeat(const nlohmann::json& body,
                                           absl::Time now);
  // The outcome of delivering `action`: OK (a launch: the agent started the
  // task, or with `started` false accepted it and pulls its image first),
  // or why it could not be delivered (agent unreachable or refused).
  void ActionDone(const AgentAction& action, const absl::Status& status,
                  absl::Time now, bool started = true);

  // One round of liveness checks and scheduling at `now`.
  void Tick(absl::Time now);
  // Blocks until the dataset listings asked for so far have answered; the
  // next `Tick` applies them (tests).
  void WaitForDatasetListings();
  // Takes the agent actions produced since the last call.
  std::vector<AgentAction> TakeActions();

  // GPUs in total and allocated, jobs waiting and running: one point of the
  // dashboard's utilisation chart.
  struct Utilization {
    int total_gpus = 0;
    int allocated_gpus = 0;
    int pending_jobs = 0;
    int running_jobs = 0;
  };
  Utilization CurrentUtilization() const;

  // Writes the controller's Prometheus metrics (docs/metrics.md): jobs by
  // state, pending jobs by reason, GPUs and nodes by state, GPU-seconds by
  // project and user, scheduling decisions, failures and recovery times.
  void WriteMetrics(MetricsWriter& out, absl::Time now) const;

  // The cluster as the scheduler sees it now (a snapshot: `ApplyCluster`
  // replaces it, and this one stays valid while held).
  std::shared_ptr<const Cluster> cluster() const {
    absl::MutexLock lock(&mu_);
    return cluster_;
  }

  // The cluster as code (controller_cluster.cc, docs/cluster-as-code.md).
  // `PlanCluster` compares the spec `text` (named `source` in errors)
  // against the live revision: the objects that differ and the effect on
  // work. InvalidArgument for a spec that does not parse
  // (`file:line:col: field: reason`), FailedPrecondition for a change that
  // would break the cluster's invariants (a project removed while it has
  // unfinished jobs, a GPU model removed that one asks for).
  absl::StatusOr<nlohmann::json> PlanCluster(const std::string& text,
                                             const std::string& source,
                                             absl::Time now) const;
  // Applies it as one new revision, written to the store before it takes
  // effect, without a restart. `expected_revision` (>= 0) is the live
  // revision the plan was made against: Aborted when the live one is
  // another. Nodes it removes (or changes under their jobs) are drained
  // first: their jobs get the checkpoint signal and are queued again, and
  // the nodes are forgotten once empty. The same plan as `PlanCluster` in
  // the reply, with `revision`; no new revision when nothing changes.
  absl::StatusOr<nlohmann::json> ApplyCluster(const std::string& text,
                                              const std::string& source,
                                              int64_t expected_revision,
                                              const std::string& author,
                                              absl::Time now);
  // The stored revisions, newest first (without their text), and one with
  // its text (NotFound).
  absl::StatusOr<nlohmann::json> ClusterHistory() const;
  absl::StatusOr<nlohmann::json> ClusterRevision(int64_t revision) const;
  // Applies the text of revision `to` (0: the one before the live one).
  absl::StatusOr<nlohmann::json> RollbackCluster(int64_t to,
                                                 int64_t expected_revision,
                                                 const std::string& author,
                                                 absl::Time now);

  // Named datasets (controller_datasets.cc, docs/datasets.md): `POST
  // /v1/datasets` ({name, source, description}; InvalidArgument naming the
  // field, AlreadyExists), `DELETE /v1/datasets/NAME` (NotFound), and `GET
  // /v1/datasets`: each named or used dataset with what its fills took and
  // the nodes that hold its last version.
  absl::StatusOr<nlohmann::json> AddDataset(const nlohmann::json& body,
                                            const std::string& user,
                                            absl::Time now);
  absl::Status RemoveDataset(const std::string& name);
  nlohmann::json ListDatasets() const;
  // The dataset sources of `user`'s jobs in the live state (what `GET
  // /v1/datasets` shows that user unredacted).
  std::set<std::string> DatasetSourcesOf(const std::string& user) const;
  // Rolling maintenance (controller_maintenance.cc, docs/maintenance.md).
  // `StartMaintenance` takes a `POST /v1/maintenance` body
  // (`ParseMaintenanceRequest`): InvalidArgument naming the field, Aborted
  // while another run is active (one at a time). The run goes on in `Tick`.
  absl::StatusOr<nlohmann::json> StartMaintenance(const nlohmann::json& body,
                                                  const std::string& author,
                                                  absl::Time now);
  // The runs, newest first, without their nodes; one run (NotFound).
  nlohmann::json ListMaintenances() const;
  absl::StatusOr<nlohmann::json> GetMaintenance(int64_t id) const;
  // `op`: "pause", "resume" or "abort"; Aborted when the run's state does
  // not allow it.
  absl::StatusOr<nlohmann::json> ChangeMaintenance(int64_t id,
                                                   const std::string& op,
                                                   const std::string& who,
                                                   absl::Time now);

  // Structured log lines (JSON) about what `Create` found while loading:
  // one per record that could not be read (see `ReadStoredJob`), which is
  // then a failed job and its bytes are under `QuarantineKey`. The server
  // prints them at start. Empty when all was well.
  std::vector<std::string> LoadLog() const {
    absl::MutexLock lock(&mu_);
    return load_log_;
  }

 private:
  // What the controller knows of a node beyond the cluster spec
  // (controller_node.h).
  using Node = ControllerNode;

  Controller(Cluster cluster, StateStore* store, ControllerOptions options);

  // At start: the live revision of the cluster spec from the store, which
  // replaces the cluster given; without one, the given cluster's spec
  // (`options_.cluster_spec`) is written as revision 1.
  absl::Status LoadClusterRevision(absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What taking `next` would do (the `effects` of a plan), and the checks
  // that refuse it.
  nlohmann::json ClusterEffects(const Cluster& next,
                                const Scheduler::ClusterChange& change) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CheckClusterChange(const Cluster& next) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `effective` the scheduler's and the controller's cluster: node
  // state follows the nodes by name; nodes new to it are unknown until
  // their agent registers.
  absl::Status TakeCluster(std::shared_ptr<const Cluster> effective,
                           absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Nodes kept until drained (`retiring_`) that have no job left are
  // forgotten (from `Tick`).
  void ForgetDrainedNodes(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Status Load(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `TaskLogs` of task `task` of past run `run` of `job`.
  absl::StatusOr<TaskLogSource> PastRunLogs(const JobRecord& job, int task,
                                            int run) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Retention (controller_retention.cc). Forgets job `id` everywhere in
  // memory once it is purged from the store.
  void ForgetJob(JobId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job `id` as a dependency sees it: in the live state, or a stand-in
  // (its id and final state) made in `*purged` from the accounting store;
  // null when there is none; the accounting store's error when it cannot
  // be read.
  absl::StatusOr<const JobRecord*> DependeeOf(
      JobId id, std::optional<JobRecord>* purged) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The GPU-seconds not in the ledger yet: the job's runs that ended but
  // are not written, and its current run up to `now`.
  std::vector<GpuSpan> UnledgeredSpans(const JobRecord& job,
                                       absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Dependencies (controller_deps.cc). Whether `job` waits for its
  // dependency before it is queued (it has one and never started).
  bool GatedByDependency(const JobRecord& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DependencyCheck CheckDependency(const JobRecord& job) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // InvalidArgument unless every job `spec.dependency` names exists.
  absl::Status CheckDependencyJobs(const JobSpec& spec) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pending job waits for its dependency instead of being queued; the
  // next tick checks it (and queues it when it is met).
  void WaitForDependency(JobId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` started or ended: the jobs waiting for it are checked again at
  // the next tick. Called at every start and every final state.
  void NoteJobChanged(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Checks the waiting jobs due (from `Tick`, before scheduling): queues
  // those whose dependency is met, and marks (or with kill_on_invalid_dep
  // cancels) those whose dependency never will be.
  void StepDependencies(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Datasets (controller_datasets.cc, docs/datasets.md). A job with `data`
  // is queued only once its sources are listed for this run: true when
  // `QueueJob` must hold it back for that (the listing is asked for).
  bool HoldForDatasets(const JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // From `Tick`: applies the listings that answered (the job is queued with
  // its versions, or waits with the reason and is asked again after a
  // backoff) and asks again for those whose backoff is over.
  void StepDatasets(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // {node, address} of node `n`, a peer in a launch's `data`.
  nlohmann::json DataPeerJson(int n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool DataPeerUsable(int n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Peers for node `self` that hold `version` (as their agents reported):
  // those under its leaf (`*near_count` of them, may be null), then up to 3
  // elsewhere; `*held_here` when `self` holds it.
  nlohmann::json DataHolderPeers(const std::string& version, int self,
                                 bool* held_here,
                                 int* near_count = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The `data` of a launch or prefetch on node `self`: each of the job's
  // versions (of `only`, if given) with the nodes to copy it from (the
  // leaf's holders, or the leaf's filler: the first of `nodes`, the job's
  // nodes, under self's leaf), and whether to wait for the first of them.
  nlohmann::json DataLaunchJson(
      const JobRecord& job, int self, const std::vector<int>& nodes,
      const std::vector<std::string>* only = nullptr) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The GPUs of an agent's registration or heartbeat whose change of MIG
  // mode waits (`mig_waits`; absent: none): the node takes no new work
  // while there are any.
  void ApplyMigWaits(int n, const nlohmann::json& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Locality and prefetch (controller_data_locality.cc): the `datasets` of
  // an agent's registration or heartbeat to the scheduler; a prefetch
  // action (`POST /v1/datasets/prefetch`) per node the pass reported.
  void ApplyDatasets(int n, const nlohmann::json& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A running task's `data` report: counted once per task run.
  void NoteDataUse(const JobRecord& job, TaskRecord& task,
                   const nlohmann::json& report, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendPrefetches(const PassResult& pass, absl::Time now,
                      std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A pending job that waits for its datasets to be listed.
  bool WaitsForDatasets(JobId id) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return data_waiting_.contains(id);
  }
  // Forgets a job's listing state (cancelled, ended).
  void ForgetDatasets(JobId id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Arrays (controller_arrays.cc, docs/scheduling.md "Arrays"). An array
  // job is one record; its elements exist (as records of their own, IDs
  // `array + 1 + position`) only from when they are queued, a window at a
  // time, so that pending elements cost neither memory nor the scheduler.
  using ArrayRun = ArrayProgress;

  static bool IsArrayJob(const JobRecord& job) {
    return !job.spec.array.empty() && job.array_job == 0;
  }
  void RegisterArray(const JobRecord& array) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void NoteArrayElementLoaded(const JobRecord& element)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` joins the queue: an array's elements are queued by `FeedArrays`;
  // any other job goes to the scheduler.
  absl::StatusOr<SubmitOutcome> QueueJob(const JobRecord& job,
                                         const JobRequest& req, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `QueueJob` of `job` as it stands (its request from its spec): OK, or
  // why it cannot be queued (an infeasible shape is FailedPrecondition).
  absl::Status QueueSpec(const JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // From `Tick`: queues the next elements of the arrays that have room,
  // and ends the arrays whose every element has ended.
  void FeedArrays(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An element started or ended (from `NoteJobChanged`).
  void ArrayElementChanged(const JobRecord& element)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Withdraws an array's queued elements (that never started) back to
  // its unfed positions: they are forgotten (and their records deleted,
  // if any were written), as if never made.
  absl::Status WithdrawQueued(JobId array, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Ends `array` once it has no element left to run (its state from its
  // elements'), from `FeedArrays` and cancel.
  void FinishArrayIfDone(JobRecord& array, absl::Time now,
                         std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancel and hold of an array, and of an element that does not exist yet.
  absl::Status CancelArray(JobRecord& array, absl::Time now,
                           std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<nlohmann::json> TouchUnmadeElement(JobId id, bool cancel,
                                                    absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The ID of an array element, or NotFound naming it.
  absl::StatusOr<JobId> ElementIdLocked(const ArrayElementRef& ref) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // An element that never existed ended (cancelled): its waiters are
  // checked again.
  void NoteUnmadeEnded(JobId element) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The array an element ID belongs to (made or not), or nullptr.
  const JobRecord* ArrayOfId(JobId id, int* position) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The element record of `array` at `position`, pending (or held).
  JobRecord MakeElement(const JobRecord& array, int position, bool held,
                        absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The array's part of its JSON, and its pending reason.
  void AddArrayJson(const JobRecord& array, absl::Time now,
                    nlohmann::json* j) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CancelLocked(JobRecord& job, absl::Time now,
                            std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Maintenance (controller_maintenance.cc): the runs from the store, one
  // written (kept to write again at the next step when the store fails),
  // each tick's step, what the agent says of its command, and the facts a
  // step works on.
  absl::Status LoadMaintenances() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PersistMaintenance(const Maintenance& m)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepMaintenances(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyMaintenanceReport(int n, const nlohmann::json& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  MaintenanceFacts MaintenanceFactsOf(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Puts back node `name`'s mode from before run `m` cordoned it.
  void RestoreNodeMode(const Maintenance& m, const std::string& name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The agent's answer to a command sent: refused (not unreachable, not
  // "not ready"), the node fails.
  void MaintenanceDelivered(const AgentAction& action,
                            const absl::Status& status, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves every running job with a task on node `n` off it (`Evict`).
  void EvictJobsOn(int n, const std::string& why, absl::Time now,
                   std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node `n`'s drift and outdatedness against its pool's declared stack,
  // from what it reported (`stack`) and `accepted_stack`.
  void UpdateDrift(int n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes what changed of `jobs` (records, histories) in one commit.
  absl::Status Persist(const std::vector<const JobRecord*>& jobs)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // On load (controller_history.cc): reads the stored history of `stored`'s
  // job into it (taking it out of `history_of`) and notes what is stored.
  void LoadHistory(const KeyValue& record, StoredJob& stored,
                   absl::flat_hash_map<JobId, const KeyValue*>& history_of)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the histories left in `history_of` (no record), loudly.
  void DropOrphanHistories(
      const absl::flat_hash_map<JobId, const KeyValue*>& history_of)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PersistNode(int node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateSchedulable(int node) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StartJob(JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The launch request of task `t` of `job`, rebuilt from the job record.
  AgentAction LaunchAction(const JobRecord& job, const TaskRecord& t) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks every live task of `job` to stop; `StopTask` one of them.
  void StopTasks(JobRecord& job, int signal, absl::Duration grace)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopTask(const JobRecord& job, const TaskRecord& t, int signal,
                absl::Duration grace) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called when a task of `job` ended; finishes the job when all have.
  // `why`, when given, is the job's reason if this ending stops the gang
  // (else one is made from the task's exit).
  void TaskEnded(JobRecord& job, TaskRecord& task, absl::Time now,
                 const std::string& why = "")
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishJob(JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A job out of its restart backoff joins the queue (or fails, saying
  // why it cannot).
  void QueueAfterBackoff(JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` could not be queued (`why`): it fails with `what` + the message.
  void FailUnqueued(JobRecord& job, const char* what, const absl::Status& why,
                    absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `task` is lost with its node (down, or its agent back without it;
  // `why` says which): the job is queued again (`requeue`), not failed.
  void LostWithNode(JobRecord& job, TaskRecord& task, const std::string& why,
                    absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A launching task's node pulls its image (`progress`: the agent's
  // `pull` object, or null). Returns true the first time (an event added).
  bool NotePull(JobRecord& job, TaskRecord& task,
                const nlohmann::json& progress, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The task's pull is over: it runs (`failure` empty) or ended.
  void PullDone(JobRecord& job, TaskRecord& task, const std::string& failure,
                absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops a running job to queue it again (`spec.requeue`): the checkpoint
  // signal, its grace, then SIGKILL.
  void Evict(JobRecord& job, const std::string& why, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hot spares (controller_spares.cc): the nodes the scheduler holds for
  // job `id`, by name, sorted.
  std::vector<std::string> HeldSpares(JobId id) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The record's spare nodes (and, for a pending job, the nodes of its last
  // run) into `req`, for the scheduler's recovery placement; a service
  // replica's spread group.
  void AddPlacementHints(const JobRecord& job, JobRequest* req) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The run of `job` ended and it is queued again; `held`: its spares until
  // then. A run that lost a node keeps them and its survivors as hints.
  void KeepSpareHints(JobRecord& job, std::vector<std::string> held)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `job` started: its spares now; for its start event, the tasks that went
  // onto spares ("" if none).
  std::string StartedOnSpares(JobRecord& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Jobs that lost a node and were to restart on their survivors and
  // spares when the server restarted: queued once the agents of those
  // nodes are back, or at the deadline (`spare_restores_`).
  void StepSpareRestores(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records of running jobs whose spares the scheduler changed.
  void SyncSpares(std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Stops preemptible `job` at once: it runs on a spare (or survivor node)
  // of `for_job`, which recovers there (`Preemption::immediate`).
  void KillOnSpare(JobRecord& job, JobId for_job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Services (controller_services.cc).
  absl::Status PersistService(const ServiceRecord& s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status LoadServices() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ReplicaView ViewOf(const ServiceRecord& s, const JobRecord& job,
                     absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepServices(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool CreateReplica(ServiceRecord& s, absl::Time now,
                     std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Autoscale(ServiceRecord& s, const std::vector<ReplicaView>& views,
                 absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json ServiceJson(const ServiceRecord& s, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A running replica's heartbeat status: `port`, `ready`.
  void NoteReplicaStatus(JobRecord& job, TaskRecord& task,
                         const nlohmann::json& status, absl::Time now,
                         std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What a replica's launch body adds (port, probes); empty for a job.
  nlohmann::json LaunchExtras(const JobRecord& job) const;
  // The services' part of /metrics (docs/metrics.md, "Services").
  void WriteServiceMetrics(MetricsWriter& out, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Every live task on node `n` is lost (the node is down).
  void NodeLost(int n, absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Liveness (controller_liveness.cc, docs/fault-tolerance.md
  // "Detection"): silent nodes suspect, probed, then down; a gang whose
  // task failed while a node of it went silent loses that node's tasks at
  // once (`WatchGang`, `StepGangWatch`); the probe's answer.
  void StepLiveness(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Probe(int n, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ProbeDelivered(const AgentAction& action, const absl::Status& status,
                      absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void WatchGang(const JobRecord& job, const TaskRecord& failed, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StepGangWatch(absl::Time now, std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the loss of `task`'s node follows from (or caused) the failure
  // `job`'s run is stopping for: the node went silent by then.
  bool LossCausedGangFailure(const JobRecord& job, const TaskRecord& task) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Recovery phases (`JobRecord::recovery`): the next run made progress.
  void NoteProgress(JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The agent's health report (`"health"` of a registration or heartbeat):
  // a node with problems is drained and its jobs are moved.
  // The `images` and `image_pulls` of an agent's registration or heartbeat,
  // when there (checked; what is malformed is dropped).
  void ApplyImages(int n, const nlohmann::json& body)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The agent's answer to a pull asked of it: `started` for 200 (it holds
  // the image already), else 202 (pulling) or the failure to deliver.
  void ImagePullDelivered(const AgentAction& action, const absl::Status& status,
                          bool started) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The `labels` and `stack` of an agent's registration or heartbeat
  // (controller_labels.cc; checked, what is malformed is dropped; absent
  // from a registration: none). Gives the scheduler the node's labels
  // (`EffectiveLabels`) and makes the node drifted, or not.
  void ApplyLabels(int n, const nlohmann::json& body, bool registering)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Node `n`'s labels for selectors: what its agent reported, its pool,
  // leaf and spine, and its declared labels (which win).
  std::map<std::string, std::string> EffectiveLabels(int n) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // "drifted: driver 535.161.08 (pool wants 550.54.15)".
  std::string DriftReason(int n) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyHealth(int n, const nlohmann::json& body, absl::Time now,
                   std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Deletes idempotency keys past their lifetime (at most once a minute).
  void PurgeRequests(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The event of the job's last checkpoint; consecutive ones are one event
  // with a count.
  void AddCheckpointEvent(JobRecord& job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Sets `running_time` (and an event) once every task of `job` runs.
  void NoteRunning(JobRecord& job, absl::Time now)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json TaskReports(const std::string& node_name,
                             const nlohmann::json& tasks, bool registering,
                             absl::Time now,
                             std::vector<const JobRecord*>* dirty)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json JobJson(const JobRecord& job, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  nlohmann::json NodeJson(int node, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // up, suspect, cordoned, draining, drained, drifted, down or unknown.
  std::string NodeStateName(int node) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int NodeIndex(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The host of node `node`'s agent ("" when unknown).
  std::string NodeHost(const std::string& node) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  StateStore* const store_;
  AccountingStore* accounting_ = nullptr;
  const ControllerOptions options_;
  absl::Time created_ = absl::InfinitePast();

  mutable absl::Mutex mu_;
  // The cluster the scheduler has: the live revision's (`target_`) plus
  // the nodes it removed that still run jobs (`retiring_`).
  std::shared_ptr<const Cluster> cluster_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const Cluster> target_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> retiring_ ABSL_GUARDED_BY(mu_);
  // The live revision of the cluster spec (0: none stored) and the store
  // version of its pointer key, for the conditional write of the next.
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t revision_key_version_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<std::string, int> node_index_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Scheduler> scheduler_ ABSL_GUARDED_BY(mu_);
  std::map<JobId, JobRecord> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<Node> nodes_ ABSL_GUARDED_BY(mu_);
  JobId next_id_ ABSL_GUARDED_BY(mu_) = 1;
  std::vector<AgentAction> actions_ ABSL_GUARDED_BY(mu_);
  // Jobs changed in memory but not yet written (see `ActionDone`).
  absl::flat_hash_set<JobId> unsaved_ ABSL_GUARDED_BY(mu_);
  // Idempotency keys of submissions -> their jobs and requests.
  IdempotencyKeys requests_ ABSL_GUARDED_BY(mu_);
  absl::Time last_purge_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  // Unfinished jobs per user, for `max_jobs_per_user`.
  UserJobCounter user_jobs_ ABSL_GUARDED_BY(mu_);
  CheckpointThrottle checkpoint_throttle_ ABSL_GUARDED_BY(mu_);
  // Pending jobs waiting out their restart backoff (`JobRecord::not_before`).
  absl::flat_hash_set<JobId> backoff_ ABSL_GUARDED_BY(mu_);
  // Dependencies (not persisted: rebuilt on load from the specs). Pending
  // jobs not queued because their dependency is not met; for each job,
  // those waiting for it to start or end; the waiting jobs to check at the
  // next tick; and the unfinished jobs by (user, name), for `singleton`.
  absl::flat_hash_set<JobId> dep_waiting_ ABSL_GUARDED_BY(mu_);
  std::map<JobId, std::vector<JobId>> dep_waiters_ ABSL_GUARDED_BY(mu_);
  std::set<JobId> dep_recheck_ ABSL_GUARDED_BY(mu_);
  std::map<std::pair<std::string, std::string>, std::set<JobId>>
      unfinished_by_name_ ABSL_GUARDED_BY(mu_);
  // Datasets (not persisted: a pending job is listed again on load). The
  // lister (the options' or the default) and its resolver, constant after
  // construction; pending jobs waiting for their listing; those listed and
  // about to be queued; and those whose store was down (`DataRetry`).
  std::unique_ptr<DatasetLister> default_lister_;
  std::unique_ptr<DatasetResolver> dataset_resolver_;
  absl::flat_hash_set<JobId> data_waiting_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<JobId> data_ready_ ABSL_GUARDED_BY(mu_);
  std::map<JobId, DataRetry> data_retry_ ABSL_GUARDED_BY(mu_);
  // Named datasets and what tasks' fills took (dataset_catalog.h).
  DatasetCatalog datasets_ ABSL_GUARDED_BY(mu_);

  std::vector<std::string> load_log_ ABSL_GUARDED_BY(mu_);
  // What was last written of each job, so that `Persist` writes only what
  // changed.
  JobWriteCache written_ ABSL_GUARDED_BY(mu_);
  // GPU-seconds per (project, user, hour), and when retention last looked
  // for jobs to purge.
  UsageLedger ledger_ ABSL_GUARDED_BY(mu_);
  absl::Time last_retention_scan_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::map<JobId, ArrayRun> arrays_ ABSL_GUARDED_BY(mu_);
  absl::btree_set<JobId> arrays_to_feed_ ABSL_GUARDED_BY(mu_);

  // Metrics since this server started (not persisted).
  ControllerCounters counters_ ABSL_GUARDED_BY(mu_);
  // Jobs that failed and run again: when the failure was seen; observed
  // into `counters_.recovery` when every task of the next run is running.
  absl::flat_hash_map<JobId, absl::Time> failed_at_ ABSL_GUARDED_BY(mu_);
  // Multi-node runs stopping after a task failed: when it was reported
  // (`WatchGang`).
  absl::flat_hash_map<JobId, absl::Time> gang_watch_ ABSL_GUARDED_BY(mu_);
  // Services by name, the live replica jobs of each, and the latest
  // gateway report of each.
  std::map<std::string, ServiceRecord> services_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::set<JobId>> service_replicas_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, GatewayStats> gateway_ ABSL_GUARDED_BY(mu_);
  // Running jobs that asked for hot spares (`SyncSpares`).
  absl::flat_hash_set<JobId> with_spares_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<JobId, absl::Time> spare_restores_ ABSL_GUARDED_BY(mu_);

  // Maintenance runs by id, and those whose last write failed.
  std::map<int64_t, Maintenance> maintenances_ ABSL_GUARDED_BY(mu_);
  int64_t next_maintenance_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_set<int64_t> maintenance_unsaved_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
