#pragma once

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/server/job_record.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// Job reads on a standby of a replicated controller (docs/ha.md): answered
// from the store, that is from the leader's last writes, so that `loom
// queue` and `loom show` work on every server, also while no leader is
// elected. A pending job's reason is the one the leader last wrote (the
// standby runs no scheduler). Thread-safe (as the store is).
class StandbyReader {
 public:
  // Both must outlive the reader.
  StandbyReader(const Cluster* cluster, StateStore* store)
      : cluster_(cluster), store_(store) {}

  // The cluster the jobs are read against.
  const Cluster& cluster() const { return *cluster_; }
  // As `Controller::GetJob` and `Controller::ListJobs`.
  absl::StatusOr<nlohmann::json> GetJob(JobId id) const;
  absl::StatusOr<nlohmann::json> ListJobs(const JobQuery& query) const;
  // As `Controller::CheckRun`, from the store.
  absl::Status CheckRun(JobId id, int64_t run) const;

 private:
  // The job of record `kv`, with its history if it has one.
  absl::StatusOr<JobRecord> Parse(const KeyValue& kv,
                                  const KeyValue* history) const;
  // Job `id` from the store: NotFound, or Unavailable if it cannot be read.
  absl::StatusOr<JobRecord> Read(JobId id) const;
  nlohmann::json Render(const JobRecord& job) const;

  const Cluster* const cluster_;
  StateStore* const store_;
};

}  // namespace loom
