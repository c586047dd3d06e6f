#include "loom/server/standby_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/server/stored_job.h"

namespace loom {

absl::StatusOr<JobRecord> StandbyReader::Parse(const KeyValue& kv) const {
  // An unreadable record shows as the failed stand-in the leader makes of
  // it (the standby writes nothing; the leader quarantines it on load).
  absl::StatusOr<StoredJob> stored = ReadStoredJob(kv, absl::Now());
  if (!stored.ok()) return stored.status();
  return std::move(stored->record);
}

nlohmann::json StandbyReader::Render(const JobRecord& job) const {
  std::string reason = job.reason;
  if (job.state == JobState::kHeld) reason = "held: waiting for `loom release`";
  return JobApiJson(job, *cluster_, reason, nullptr,
                    [](const std::string&) { return std::string(); });
}

absl::StatusOr<nlohmann::json> StandbyReader::GetJob(JobId id) const {
  absl::StatusOr<KeyValue> kv = store_->Get(JobKey(id));
  if (!kv.ok()) {
    if (kv.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no job ", id));
    }
    return kv.status();
  }
  absl::StatusOr<JobRecord> job = Parse(*kv);
  if (!job.ok()) return job.status();
  return Render(*job);
}

absl::Status StandbyReader::CheckRun(JobId id, int64_t run) const {
  absl::StatusOr<KeyValue> kv = store_->Get(JobKey(id));
  if (!kv.ok()) {
    if (kv.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no job ", id));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot read job ", id, ": ", kv.status().message()));
  }
  absl::StatusOr<JobRecord> job = Parse(*kv);
  if (!job.ok()) return job.status();
  return CheckLiveRun(*job, run);
}

absl::StatusOr<nlohmann::json> StandbyReader::ListJobs(
    const JobQuery& query) const {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List("/jobs/");
  if (!kvs.ok()) return kvs.status();
  std::vector<JobRecord> jobs;
  jobs.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {
    absl::StatusOr<JobRecord> job = Parse(kv);
    if (!job.ok()) continue;  // not a job key: nothing to show
    if (JobMatches(query, *job)) jobs.push_back(*std::move(job));
  }
  // Job keys are zero-padded ids, so the store lists them in id order.
  nlohmann::json out = nlohmann::json::array();
  for (const JobRecord& job : jobs) {
    nlohmann::json j = Render(job);
    j.erase("events");
    j.erase("spec");
    out.push_back(std::move(j));
    if (query.limit > 0 && static_cast<int>(out.size()) >= query.limit) break;
  }
  return nlohmann::json{{"jobs", std::move(out)}};
}

}  // namespace loom
