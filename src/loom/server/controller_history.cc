// The controller's side of job histories stored apart from job records
// (job_events_store.h, docs/store.md "Job events"): reading them on load.

#include "absl/strings/str_cat.h"
#include "loom/server/controller.h"

namespace loom {

void Controller::LoadHistory(
    const KeyValue& record, StoredJob& stored,
    absl::flat_hash_map<JobId, const KeyValue*>& history_of) {
  const JobId id = stored.record.id;
  auto it = history_of.find(id);
  const KeyValue* history = it == history_of.end() ? nullptr : it->second;
  if (it != history_of.end()) history_of.erase(it);
  if (!stored.problem.ok()) {
    // A stand-in: its quarantine wrote its own history (or, if that failed,
    // nothing is known of what is stored: the next write puts both).
    written_.Set(id, "", "");
    return;
  }
  if (history == nullptr) {
    // An older record with its events inside (or none yet): they were read
    // with it, and the next write moves them under `EventsKey`.
    written_.Set(id, record.value, "");
    return;
  }
  nlohmann::json j = nlohmann::json::parse(history->value, nullptr, false);
  absl::Status st = j.is_discarded()
                        ? absl::DataLossError("not JSON")
                        : ApplyJobHistoryJson(j, id, &stored.record);
  if (!st.ok()) {
    // Never stops the server: the job keeps what its record holds, and the
    // next write replaces the history.
    load_log_.push_back(DroppedHistoryLogLine(
        *history, absl::StrCat("unreadable history: ", st.message())));
    written_.Set(id, record.value, "");
    return;
  }
  written_.Set(id, record.value, history->value);
}

void Controller::DropOrphanHistories(
    const absl::flat_hash_map<JobId, const KeyValue*>& history_of) {
  for (const auto& [id, kv] : history_of) {
    // Deleted only while still no record is there and it is unchanged.
    absl::StatusOr<int64_t> rev = store_->Commit(
        {{kv->key, kv->version}, {JobKey(id), 0}}, {Mutation::Delete(kv->key)});
    load_log_.push_back(DroppedHistoryLogLine(
        *kv, rev.ok() ? "no record of its job; deleted"
                      : absl::StrCat("no record of its job; not deleted: ",
                                     rev.status().message())));
  }
}

}  // namespace loom
