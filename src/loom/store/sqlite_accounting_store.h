#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loom/store/accounting_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace loom {

// An `AccountingStore` in an SQLite file of its own (beside the SQLite state
// store, never inside it): the history of a single-server controller.
//
// One table, `finished_jobs (id INTEGER PRIMARY KEY, user, project, state,
// submit_us, end_us, document)`, with times in microseconds since the Unix
// epoch and indexes on `end_us`, `(user, end_us)` and `(project, end_us)`, so
// that a `Find` by time window, user or project reads only what it returns.
// Each `Find` is one parameterised query built from the filters that are set
// (a long list of ids is split into several queries of at most
// `kMaxIdsPerQuery` ids, read in one transaction). `Get` is a primary key
// lookup and `Count` a `count(*)`.
//
// As `SqliteStateStore` does, the file is opened in WAL journal mode with
// `synchronous=FULL`, so an `Add` that returned OK (one `BEGIN IMMEDIATE ...
// COMMIT` transaction of `INSERT OR REPLACE`s: all or nothing) survives a
// crash of the process or of the machine. The header's `application_id`
// marks the file as loom's accounting (not the state store's id) and
// `user_version` holds the schema version: a file of another application, a
// state store file or a newer schema is refused.
//
// Thread-safe: one connection, guarded by a mutex (calls are serialized),
// with prepared statements reused. Nothing throws; SQLite errors become
// statuses that name the file.
class SqliteAccountingStore final : public AccountingStore {
 public:
  // How many ids one `Find` query binds at most (`id IN (?, ...)`).
  static constexpr size_t kMaxIdsPerQuery = 500;

  // Opens the store at `path`, creating the file and schema if needed.
  // Returns an error naming the path if the file cannot be opened or created
  // (`FailedPrecondition`, `PermissionDenied`), is not an SQLite database or
  // is corrupt (`DataLoss`), belongs to another application (a loom state
  // store included) or to a newer schema (`FailedPrecondition`), or cannot
  // use WAL (`FailedPrecondition`). `InvalidArgument` for an empty path.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SqliteAccountingStore>>
  Open(const std::string& path);

  // Closes the connection. No call may be in progress.
  ~SqliteAccountingStore() override;

  SqliteAccountingStore(const SqliteAccountingStore&) = delete;
  SqliteAccountingStore& operator=(const SqliteAccountingStore&) = delete;

  const std::string& path() const { return path_; }

  absl::Status Add(const std::vector<FinishedJob>& jobs) override;
  absl::StatusOr<std::vector<FinishedJob>> Find(
      const FinishedJobQuery& query) override;
  absl::StatusOr<std::optional<FinishedJob>> Get(int64_t id) override;
  absl::StatusOr<int64_t> Count() override;

 private:
  // The prepared statements, by index into `statements_`.
  enum Statement : int {
    kBeginWrite,
    kBeginRead,
    kCommitTxn,
    kRollbackTxn,
    kPutJob,
    kGetJob,
    kCountJobs,
    kNumStatements,
  };

  SqliteAccountingStore(std::string path, sqlite3* db);

  // Sets the pragmas, creates or checks the schema and prepares the
  // statements. Called once by `Open`.
  absl::Status Init();

  // An error for SQLite result code `rc` while doing `what`, naming the
  // file and SQLite's own message.
  absl::Status SqlError(std::string_view what, int rc)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Prepares, runs and finalizes a one-off statement (a pragma) and sets
  // `*out` to the first column of its first row, as text ("" if none).
  absl::Status QueryText(const char* sql, std::string* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs a prepared statement that returns no rows.
  absl::Status Run(Statement id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rolls back the open transaction, if there is one.
  void RollbackIfActive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Inserts or replaces one job, inside the open write transaction.
  absl::Status PutJob(const FinishedJob& job)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs one `Find` query for `query`'s filters, restricted to `ids` (sorted,
  // at most `kMaxIdsPerQuery`; empty: any id), and appends at most `limit`
  // rows (0: no limit) to `*out`.
  absl::Status FindPart(const FinishedJobQuery& query,
                        const std::vector<int64_t>& ids, int64_t limit,
                        std::vector<FinishedJob>* out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string path_;
  // "sqlite accounting store <path>": how error messages name the store.
  const std::string label_;

  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  std::array<sqlite3_stmt*, kNumStatements> statements_
      ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace loom
