#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/store/state_store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace loom {

struct SqliteStateStoreOptions {
  // How many changes `ChangesSince` can look back over (whole commits are
  // dropped, oldest first, beyond it).
  int64_t change_log_limit = StateStore::kDefaultChangeLogLimit;
  // How many bytes (keys plus values) of changes it keeps, likewise: a few
  // large values rewritten often must not grow the file without bound.
  int64_t change_log_bytes_limit = StateStore::kDefaultChangeLogBytesLimit;
  // How long a statement waits for a lock held by another connection (for
  // example `sqlite3` poking at the file) before failing with `Unavailable`.
  absl::Duration busy_timeout = absl::Seconds(5);
};

// A `StateStore` in one SQLite file: the default, embedded backend.
//
// The file is opened in WAL journal mode with `synchronous=FULL`, so a commit
// that returned OK survives a crash of the process or of the machine. The
// store keeps one connection, guarded by a mutex (so calls are serialized),
// and reuses prepared statements; each `Commit` is one `BEGIN IMMEDIATE ...
// COMMIT` transaction. The revision, the change log and its compaction point
// live in the file, so they carry on after a reopen. Every read goes to the
// file, so a second process sharing the file (with its own store) stays
// consistent, although one controller per file is the intended use. The
// schema is in docs/store.md.
//
// Thread-safe. Nothing throws; SQLite errors become statuses that name the
// file (see `StateStore` for the codes).
class SqliteStateStore final : public StateStore {
 public:
  // Opens the store at `path`, creating the file and schema if needed.
  // Returns an error naming the path if the file cannot be opened or created
  // (`FailedPrecondition`, `PermissionDenied`), is not an SQLite database or
  // is corrupt (`DataLoss`), belongs to another application or to a newer
  // schema (`FailedPrecondition`), or cannot use WAL (`FailedPrecondition`).
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<SqliteStateStore>> Open(
      const std::string& path, SqliteStateStoreOptions options = {});

  // Closes the connection. No call may be in progress.
  ~SqliteStateStore() override;

  SqliteStateStore(const SqliteStateStore&) = delete;
  SqliteStateStore& operator=(const SqliteStateStore&) = delete;

  const std::string& path() const { return path_; }

  absl::StatusOr<KeyValue> Get(std::string_view key) override;
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix,
                                             int64_t limit = 0) override;
  absl::StatusOr<int64_t> Commit(
      const std::vector<Condition>& conditions,
      const std::vector<Mutation>& mutations) override;
  absl::StatusOr<int64_t> Revision() override;
  absl::StatusOr<std::vector<Change>> ChangesSince(std::string_view prefix,
                                                   int64_t revision,
                                                   int64_t limit) override;

 private:
  // The prepared statements, by index into `statements_`.
  enum Statement : int {
    kBeginWrite,
    kBeginRead,
    kCommitTxn,
    kRollbackTxn,
    kGetMeta,
    kSetMeta,
    kGetKey,
    kPutKey,
    kDeleteKey,
    kListRange,
    kListFrom,
    kInsertChange,
    kChangesRange,
    kChangesFrom,
    kTrimCutoff,
    kTrimChanges,
    kTrimScan,
    kTrimSize,
    kNumStatements,
  };

  SqliteStateStore(std::string path, SqliteStateStoreOptions options,
                   sqlite3* db);

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
  // Runs a statement that returns no rows (or whose rows are ignored).
  absl::Status Run(Statement id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Rolls back the open transaction, if there is one.
  void RollbackIfActive() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::StatusOr<int64_t> GetMeta(std::string_view name)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status SetMeta(std::string_view name, int64_t value)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The key's version, 0 when absent.
  absl::StatusOr<int64_t> VersionOf(std::string_view key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The body of `Commit`, inside an open write transaction: returns the
  // revision to report and sets `*changed` when something must be committed.
  absl::StatusOr<int64_t> ApplyCommit(const std::vector<Condition>& conditions,
                                      const std::vector<Mutation>& mutations,
                                      bool* changed)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the oldest whole commits from the change log while it holds more
  // changes or more bytes than the limits; `change_count` and `change_bytes`
  // are what it holds now. Updates both in `meta`.
  absl::Status TrimLog(int64_t change_count, int64_t change_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<Change>> ReadChanges(std::string_view prefix,
                                                  int64_t revision,
                                                  int64_t limit)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string path_;
  // "sqlite store <path>": how error messages name the store.
  const std::string label_;
  const SqliteStateStoreOptions options_;

  // A commit waiting in the group-commit queue (see `Commit`).
  struct Writer {
    const std::vector<Condition>* conditions;
    const std::vector<Mutation>* mutations;
    absl::StatusOr<int64_t> result = absl::UnknownError("not written");
    bool done = false;
    absl::CondVar cv;
  };
  static constexpr size_t kMaxGroup = 256;
  // Writes `group` in one transaction, setting each writer's result.
  void WriteGroup(const std::vector<Writer*>& group) ABSL_LOCKS_EXCLUDED(mu_);

  absl::Mutex queue_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::deque<Writer*> writers_ ABSL_GUARDED_BY(queue_mu_);

  absl::Mutex mu_;
  sqlite3* const db_ ABSL_PT_GUARDED_BY(mu_);
  std::array<sqlite3_stmt*, kNumStatements> statements_
      ABSL_GUARDED_BY(mu_) = {};
};

}  // namespace loom
