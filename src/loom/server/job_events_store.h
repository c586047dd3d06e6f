#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "loom/server/job_record.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// A job's history apart from its record (docs/store.md, "Job events"): its
// events and its last checkpoint report, which change often, live under
// `EventsKey(id)`; the record under `JobKey(id)` holds the rest (the spec, up
// to 1 MiB, among it). So an event or a checkpoint report rewrites only the
// small history into the store and its change log, never the record.

// "/events/" + 20-digit zero-padded id, beside `JobKey(id)`.
std::string EventsKey(JobId id);
inline constexpr std::string_view kEventsPrefix = "/events/";
// The id of an events key, or nullopt if `key` is not one (id >= 1).
std::optional<JobId> IdOfEventsKey(std::string_view key);

// The history of `job` as stored: {"id", "events", ["events_dropped"],
// ["checkpoint": {"time", "run", ["step"]}]}.
nlohmann::json JobHistoryToJson(const JobRecord& job);
// Reads `JobHistoryToJson`'s form of job `id` into `job`'s events and
// checkpoint fields. InvalidArgument (changing nothing) for anything else,
// also the history of another job; never throws.
absl::Status ApplyJobHistoryJson(const nlohmann::json& history, JobId id,
                                 JobRecord* job);

// One structured log line about a history that is dropped: its key, size,
// and why (unreadable, or no record of its job).
std::string DroppedHistoryLogLine(const KeyValue& kv, std::string_view why);

// What the controller last wrote of each job (the record's text and the
// history's text), so that it writes only the part that changed. Not
// thread-safe; the controller's lock guards it.
class JobWriteCache {
 public:
  // Adds to `mutations` the puts of `job`'s record and history that differ
  // from what was last written, and remembers them as pending.
  void AddWrites(const JobRecord& job, std::vector<Mutation>* mutations);
  // The pending writes were committed (`ok`) or not: remember or forget
  // them. Forgetting is safe: the next write puts both parts again.
  void Finish(bool ok);
  // Records what is stored for job `id` (after loading or a submission);
  // an empty text means unknown (the next write puts that part).
  void Set(JobId id, std::string record_text, std::string history_text);
  void Forget(JobId id) { written_.erase(id); }

 private:
  struct Written {
    std::string record;
    std::string history;
  };
  absl::flat_hash_map<JobId, Written> written_;
  absl::flat_hash_map<JobId, Written> pending_;
};

// JSON text for the store: bytes that are not UTF-8 become U+FFFD.
std::string JobStoreText(const nlohmann::json& j);

}  // namespace loom
