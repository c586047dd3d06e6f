#pragma once

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/server/job_record.h"
#include "loom/store/state_store.h"

namespace loom {

// Reading job records back from the store, so that one record that cannot
// be read never stops the server (docs/store.md, "Unreadable records").

// Where the raw bytes of an unreadable record under `key` at `version` are
// kept: "/quarantine" + key + "@" + version, e.g.
// "/quarantine/jobs/00000000000000000007@42".
std::string QuarantineKey(const std::string& key, int64_t version);

// A job record read from the store.
struct StoredJob {
  JobRecord record;
  // OK: `record` is the stored record. Otherwise why the stored bytes could
  // not be read (not JSON, not a job record, an invalid spec); `record` is
  // then a stand-in: the job under the key's id, `failed`, with the reason
  // "unreadable record: <why>" and what could be salvaged of the raw bytes
  // (user, project, name, submit time), the rest defaults. A stand-in always
  // survives `JobRecordToJson` then `JobRecordFromJson`.
  absl::Status problem;
};

// Reads the record stored in `kv` (a key under "/jobs/"). Never throws.
// Returns InvalidArgument only when the key is not a job key
// (`JobKey(id)` for an id >= 1), since then there is no job to stand in;
// any value gives a `StoredJob`. `now` is the stand-in's end time.
absl::StatusOr<StoredJob> ReadStoredJob(const KeyValue& kv, absl::Time now);

// `ReadStoredJob`, and for an unreadable record also its quarantine, in one
// commit conditional on `kv.version`: the raw bytes are copied to
// `QuarantineKey` and the stand-in replaces the record. Sets `*log_line` to
// the record's `UnreadableRecordLogLine` when it is unreadable (saying so
// if the commit failed: then the bytes stay under their key and the job is
// failed in memory only), else clears it. Errors as `ReadStoredJob`.
absl::StatusOr<StoredJob> LoadStoredJob(StateStore& store, const KeyValue& kv,
                                        absl::Time now, std::string* log_line);

// One structured log line about an unreadable record: its key, its size, where
// its bytes are kept (`kept_at`, empty: still under its key) and why.
std::string UnreadableRecordLogLine(const KeyValue& kv, const absl::Status& why,
                                    const std::string& kept_at);

}  // namespace loom
