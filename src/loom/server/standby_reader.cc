#include "loom/server/standby_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/server/job_events_store.h"
#include "loom/server/stored_job.h"

namespace loom {

absl::StatusOr<JobRecord> StandbyReader::Parse(const KeyValue& kv,
                                               const KeyValue* history) const {
  // An unreadable record shows as the failed stand-in the leader makes of
  // it (the standby writes nothing; the leader quarantines it on load).
  absl::StatusOr<StoredJob> stored = ReadStoredJob(kv, absl::Now());
  if (!stored.ok()) return stored.status();
  if (history != nullptr && stored->problem.ok()) {
    // The job's events and checkpoint, stored apart; an unreadable history
    // leaves what the record holds (the leader replaces it).
    nlohmann::json j = nlohmann::json::parse(history->value, nullptr, false);
    if (!j.is_discarded()) {
      (void)ApplyJobHistoryJson(j, stored->record.id, &stored->record);
    }
  }
  return std::move(stored->record);
}

absl::StatusOr<JobRecord> StandbyReader::Read(JobId id) const {
  absl::StatusOr<KeyValue> kv = store_->Get(JobKey(id));
  if (!kv.ok()) {
    if (kv.status().code() == absl::StatusCode::kNotFound) {
      return absl::NotFoundError(absl::StrCat("no job ", id));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot read job ", id, ": ", kv.status().message()));
  }
  absl::StatusOr<KeyValue> history = store_->Get(EventsKey(id));
  if (!history.ok() && history.status().code() != absl::StatusCode::kNotFound) {
    return absl::UnavailableError(absl::StrCat(
        "cannot read job ", id, "'s events: ", history.status().message()));
  }
  return Parse(*kv, history.ok() ? &*history : nullptr);
}

nlohmann::json StandbyReader::Render(const JobRecord& job) const {
  std::string reason = job.reason;
  if (job.state == JobState::kHeld) reason = "held: waiting for `loom release`";
  return JobApiJson(job, *cluster_, reason, nullptr,
                    [](const std::string&) { return std::string(); });
}

absl::StatusOr<nlohmann::json> StandbyReader::GetJob(JobId id) const {
  absl::StatusOr<JobRecord> job = Read(id);
  if (!job.ok()) return job.status();
  return Render(*job);
}

absl::Status StandbyReader::CheckRun(JobId id, int64_t run) const {
  absl::StatusOr<JobRecord> job = Read(id);
  if (!job.ok()) return job.status();
  return CheckLiveRun(*job, run);
}

absl::StatusOr<nlohmann::json> StandbyReader::ListJobs(
    const JobQuery& query) const {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List("/jobs/");
  if (!kvs.ok()) return kvs.status();
  // The histories hold the checkpoints that a listing shows.
  absl::StatusOr<std::vector<KeyValue>> histories = store_->List(kEventsPrefix);
  if (!histories.ok()) return histories.status();
  absl::flat_hash_map<std::string, const KeyValue*> history_of;
  for (const KeyValue& h : *histories) {
    if (std::optional<JobId> id = IdOfEventsKey(h.key)) {
      history_of[JobKey(*id)] = &h;
    }
  }
  std::vector<JobRecord> jobs;
  jobs.reserve(kvs->size());
  for (const KeyValue& kv : *kvs) {
    auto h = history_of.find(kv.key);
    absl::StatusOr<JobRecord> job =
        Parse(kv, h == history_of.end() ? nullptr : h->second);
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
