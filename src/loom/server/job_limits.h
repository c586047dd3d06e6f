#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/time/time.h"
#include "loom/core/job.h"

namespace loom {

// Bounds on what one principal can make the controller store (issue 14.2).
// Plain data, no clock: time is passed in. Not thread-safe; the
// controller's lock guards both.

// Each user's unfinished jobs (held, pending, running, stopping), for
// `ControllerOptions::max_jobs_per_user` (Slurm's MaxSubmitJobs).
class UserJobCounter {
 public:
  // `id` of `user` is unfinished: loaded, or reserved for a submission that
  // is being written (so that concurrent submissions cannot pass the limit
  // together).
  void Add(const std::string& user, JobId id);
  // Forgets `id` (a submission whose write failed).
  void Remove(const std::string& user, JobId id);
  // Whether `user` has `limit` or more unfinished jobs. Jobs for which
  // `ended(id)` is true are forgotten on the way; it is asked only when the
  // count of jobs added reaches the limit, so the check is cheap below it.
  bool AtLimit(const std::string& user, int64_t limit,
               const std::function<bool(JobId)>& ended);

 private:
  absl::flat_hash_map<std::string, absl::flat_hash_set<JobId>> jobs_;
};

// Which checkpoint reports (`POST /v1/jobs/{id}/checkpoint`) are written to
// the store: at most one per job per `interval`. A report inside the
// interval updates the job in memory only and is held; `TakeDue` says when
// the held ones are due to be written.
class CheckpointThrottle {
 public:
  explicit CheckpointThrottle(absl::Duration interval) : interval_(interval) {}

  // A report for `job` at `now`: true if it is to be written now (then it
  // counts as the job's last write), false if it is held.
  bool ShouldWrite(JobId job, absl::Time now);
  // The jobs whose held report is due at `now` (their interval has passed);
  // they count as written at `now`. Also forgets jobs not heard from for a
  // whole interval.
  std::vector<JobId> TakeDue(absl::Time now);

 private:
  struct Entry {
    absl::Time last_write;
    bool held = false;
  };
  const absl::Duration interval_;
  absl::flat_hash_map<JobId, Entry> jobs_;
};

}  // namespace loom
