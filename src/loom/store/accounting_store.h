#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {

// One finished job as accounting keeps it once the controller has purged it
// from the live state (docs/accounting.md). The store indexes the fields it
// filters on; `document` is the job's accounting row as the API shows it
// (JSON text), opaque here.
struct FinishedJob {
  int64_t id = 0;
  std::string user;
  std::string project;
  std::string state;  // succeeded | failed | cancelled
  absl::Time submit_time = absl::UnixEpoch();
  absl::Time end_time = absl::UnixEpoch();
  std::string document;
};

// Which finished jobs `AccountingStore::Find` returns: all of the given
// filters hold (an empty one is any). A job is in the window when it was
// submitted before `until` and ended at or after `since` (it existed at
// some time in [since, until), as `sacct -S -E`).
struct FinishedJobQuery {
  std::vector<int64_t> ids;
  std::string user;
  std::string project;
  std::vector<std::string> states;
  std::optional<absl::Time> since;
  std::optional<absl::Time> until;
  // At most this many, the lowest ids first (0: no limit).
  int64_t limit = 0;
};

// The history of finished jobs: where the controller moves a job when its
// retention in the live state is over, and what `loom sacct` reads. Written
// only by the leading controller, read by any.
//
// Two mechanisms: `SqliteAccountingStore` (a file of its own beside the
// SQLite state store, indexed by time, user and project: one server) and
// `KeyValueAccountingStore` (keys under a prefix of the `StateStore`, which
// with etcd every server of an HA set reads and writes).
//
// Thread-safe; methods never throw. Errors: `InvalidArgument` for a bad
// argument, else the backend's (`Unavailable`, `DataLoss`, `Internal`, ...).
class AccountingStore {
 public:
  virtual ~AccountingStore() = default;

  // Stores `jobs`, replacing any stored job with the same id (so adding
  // again what was added before, after a crash, changes nothing). Durable
  // when it returns OK. After an error, some of the jobs may be stored and
  // others not: the caller adds them all again. When `jobs` holds one id
  // twice, the later one is stored. `InvalidArgument` for an id below 1
  // (nothing is stored then). Adding no jobs does nothing.
  [[nodiscard]] virtual absl::Status Add(
      const std::vector<FinishedJob>& jobs) = 0;

  // The stored jobs that match `query` (see `FinishedJobMatches`), in id
  // order, at most `query.limit` of them. `InvalidArgument` for a negative
  // limit. Times are kept to the microsecond (what `absl::ToUnixMicros`
  // keeps), and a job's stored times are what `since` and `until` compare.
  [[nodiscard]] virtual absl::StatusOr<std::vector<FinishedJob>> Find(
      const FinishedJobQuery& query) = 0;

  // The stored job `id`, or nullopt.
  [[nodiscard]] virtual absl::StatusOr<std::optional<FinishedJob>> Get(
      int64_t id) = 0;

  // How many jobs are stored.
  [[nodiscard]] virtual absl::StatusOr<int64_t> Count() = 0;
};

// Whether `job` passes `query`'s filters (all but `limit`): the one
// judgement both implementations make.
bool FinishedJobMatches(const FinishedJobQuery& query, const FinishedJob& job);

}  // namespace loom
