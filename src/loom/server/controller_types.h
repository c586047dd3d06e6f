#pragma once

// The plain types around the controller (controller.h): its options, the
// actions it asks of agents, and where a job's dependency stands.

#include <string>
#include <string_view>
#include <vector>

#include "absl/time/time.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job.h"
#include "loom/sched/scheduler.h"
#include "loom/server/dataset_lister.h"
#include "nlohmann/json.hpp"

namespace loom {

// The store key of the lowest job ID not yet used, written when jobs are
// purged (the records it is otherwise counted from are gone then).
inline constexpr std::string_view kNextJobIdKey = "/next-job-id";

struct ControllerOptions {
  std::string policy = "fair";
  PolicyOptions policy_options;
  SchedulerOptions scheduler_options;
  // An agent not heard from for this long is marked down.
  absl::Duration heartbeat_timeout = absl::Seconds(10);
  // Told to agents at registration (`loom server --heartbeat-interval`).
  absl::Duration heartbeat_interval = absl::Seconds(1);
  // A node silent this long is suspect: it gets no new work until it is
  // heard from again (`loom nodes` shows "suspect").
  absl::Duration suspect_after = absl::Seconds(3);
  // Told to agents at registration: an agent whose heartbeats have gone
  // unanswered this long kills its tasks, so that a partitioned node's jobs
  // do not run twice once the server restarts them elsewhere. Shorter than
  // `heartbeat_timeout`; zero: agents never fence.
  absl::Duration fence_after = absl::Seconds(8);
  // MASTER_PORT is picked from [base, base + count) on the rank-0 node.
  int master_port_base = 29500;
  int master_port_count = 1000;
  // LOOM_CHECKPOINT_DIR of jobs whose spec names none: <root>/<job id>;
  // empty: not set (each agent makes the job a directory of its own).
  std::string checkpoint_root = "/tmp/loom-checkpoints";
  // Unfinished jobs (held, pending, running, stopping) a user may have;
  // more submissions are refused (`ResourceExhausted`, HTTP 429) until some
  // end. 0: no limit. As Slurm's MaxSubmitJobs.
  int64_t max_jobs_per_user = 10'000;
  // At most one checkpoint report per job is written to the store in this
  // time; the others update the job in memory, and the latest is written
  // when the time has passed (docs/api.md).
  absl::Duration checkpoint_write_interval = absl::Seconds(5);
  // An idempotency key holds this long after its first use; then it is
  // purged and a submission with it makes a new job.
  absl::Duration idempotency_key_lifetime = absl::Hours(24);
  // A finished job stays in the live state this long after it ended (as
  // Slurm's MinJobAge), then moves to the accounting store
  // (`PurgeExpiredJobs`, docs/accounting.md).
  absl::Duration job_retention = absl::Hours(24 * 7);
  // The text of the cluster spec given at start (`loom server --cluster`):
  // written as revision 1 when the store has none; empty: none is written
  // and the first `ApplyCluster` makes revision 1.
  ClusterSpecText cluster_spec;
  // Lists the sources of jobs' datasets to find their versions
  // (docs/datasets.md); not owned, must outlive the controller. nullptr:
  // `rclone lsjson` with rclone's default config. A listing that takes
  // longer than `dataset_list_timeout` counts as a store that is down.
  DatasetLister* dataset_lister = nullptr;
  absl::Duration dataset_list_timeout = absl::Seconds(60);
};

// Something the controller wants an agent to do. The server carries these
// out over HTTP outside the controller's lock; tests inspect them.
struct AgentAction {
  // kMaintain: a maintenance command (`task_id` is its id). kProbe: is the
  // agent there at all (`ProbeAgent`; OK: it answered, Unavailable: the
  // connection was refused, DeadlineExceeded: no answer). kPrefetch: fill
  // dataset versions ahead of a reserved gang (docs/datasets.md).
  enum class Kind { kLaunch, kStop, kPullImage, kMaintain, kProbe, kPrefetch };
  Kind kind = Kind::kLaunch;
  std::string node;
  std::string address;  // the agent's host:port
  std::string task_id;
  JobId job = 0;
  int run = 0;  // kLaunch: the job's restart count (its run)
  // POST /v1/tasks, /v1/tasks/{id}/stop, /v1/images/pull,
  // /v1/maintenance or /v1/datasets/prefetch body
  nlohmann::json body;
};

// Where a job's dependency stands (controller_deps.cc): met, waiting (for
// the jobs in `watch`, `reason` says for what) or never to be met
// (`reason` says why).
struct DependencyCheck {
  enum class Result { kMet, kWaiting, kNever };
  Result result = Result::kMet;
  std::string reason;
  std::vector<JobId> watch;
  // Waiting because a job it names could not be read (the accounting
  // store failed): checked again at the next tick.
  bool retry = false;
};

// A pending job whose dataset listing failed (its store was down,
// controller_datasets.cc): asked again at `retry_at`, after `delay`.
struct DataRetry {
  absl::Time retry_at;
  absl::Duration delay;
  bool asked = false;  // asked again, not answered yet
};

}  // namespace loom
