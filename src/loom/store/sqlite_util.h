#pragma once

// The SQLite plumbing that `SqliteStateStore` and `SqliteAccountingStore`
// share: result codes as statuses, errors that name the store's file,
// opening a file for durable use, checking that a file is the store's own,
// running statements and binding and reading values. Internal to
// `loom_store`.
//
// `label` names the store and its file in every error message, as in
// "sqlite store /var/lib/loom/state.db": an error reads
// "<label>: <what>: <SQLite's message> (<the result code's text>)".
//
// None of this locks: the stores call it with their connection's mutex held.

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

struct sqlite3;
struct sqlite3_stmt;

namespace loom::sqlite {

// The status code for SQLite result code `rc` (primary or extended).
absl::StatusCode StatusCodeFor(int rc);

// An error for result code `rc` of `db` while doing `what`, naming `label`
// and SQLite's own message.
absl::Status Error(sqlite3* db, std::string_view label, std::string_view what,
                   int rc);

// Opens `path` for reading and writing, creating the file if needed, without
// SQLite's own mutex (the caller serializes), with extended result codes and
// a busy timeout of `busy_timeout_ms` (how long a statement waits for a lock
// held by another connection before failing with `Unavailable`). The caller
// owns the connection (see `Close`). Error: "<label>: cannot open: <why>".
absl::StatusOr<sqlite3*> Open(const std::string& path, std::string_view label,
                              int busy_timeout_ms);

// Finalizes `statements` (null ones are skipped) and closes `db`.
void Close(sqlite3* db, std::span<sqlite3_stmt* const> statements);

// Prepares, runs and finalizes a one-off statement (a pragma) and sets
// `*out` to the first column of its first row, as text ("" if none).
absl::Status QueryText(sqlite3* db, std::string_view label, const char* sql,
                       std::string* out);

// Reads `PRAGMA application_id`. It is the first read of the file's header,
// so it is the one that tells a garbage file (`DataLoss`) from a database.
absl::StatusOr<int64_t> ReadApplicationId(sqlite3* db, std::string_view label);

// Checks that the file belongs to the store called `kind` in errors ("loom
// state store"): its `application_id` (from `ReadApplicationId`) is
// `expected`, or 0 for an unmarked file (new, or written before the mark)
// that has no tables but the store's own: `count_other_tables_sql` counts the
// others. `FailedPrecondition` otherwise.
absl::Status CheckApplicationId(sqlite3* db, std::string_view label,
                                std::string_view kind, int64_t application_id,
                                int64_t expected,
                                const char* count_other_tables_sql);

// Switches to WAL journal mode with `synchronous=FULL`, so that a committed
// transaction survives a crash of the process or of the machine.
// `FailedPrecondition` if the file cannot use WAL.
absl::Status UseDurableWal(sqlite3* db, std::string_view label);

// Prepares each of `sql` as a persistent statement into the same index of
// `statements` (of the same size).
absl::Status PrepareAll(sqlite3* db, std::string_view label,
                        std::span<const char* const> sql,
                        std::span<sqlite3_stmt*> statements);

// Runs `stmt`, prepared from `sql`, to its end, ignoring any rows, and
// resets it.
absl::Status RunStatement(sqlite3* db, std::string_view label,
                          sqlite3_stmt* stmt, const char* sql);

// Rolls back the open transaction of `db`, if there is one, with the
// prepared `rollback` statement (or, before it is prepared, a one-off one).
void RollbackIfActive(sqlite3* db, sqlite3_stmt* rollback);

// Resets a borrowed prepared statement (and drops its bindings) when the
// scope ends, so that it is ready for the next use and holds no read lock.
class StatementScope {
 public:
  explicit StatementScope(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~StatementScope();
  StatementScope(const StatementScope&) = delete;
  StatementScope& operator=(const StatementScope&) = delete;

  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* const stmt_;
};

// Finalizes a statement of its own (a one-off query) when the scope ends.
class OwnedStatement {
 public:
  OwnedStatement() = default;
  ~OwnedStatement();
  OwnedStatement(const OwnedStatement&) = delete;
  OwnedStatement& operator=(const OwnedStatement&) = delete;

  sqlite3_stmt** out() { return &stmt_; }
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Binds bytes as a BLOB; the bytes must stay alive until the statement is
// reset. An empty blob is bound as a zero-length blob, not NULL.
int BindBytes(sqlite3_stmt* stmt, int index, std::string_view bytes);

// Binds text; the bytes must stay alive until the statement is reset. An
// empty string is bound as empty text, not NULL, where `text.data()` is not
// null (as for any `std::string` or literal).
int BindText(sqlite3_stmt* stmt, int index, std::string_view text);

// A column of the current row, as bytes or as text ("" for NULL).
std::string ColumnBytes(sqlite3_stmt* stmt, int column);
std::string ColumnText(sqlite3_stmt* stmt, int column);

// Returns the first non-OK code of a series of bind calls.
int FirstError(std::initializer_list<int> codes);

}  // namespace loom::sqlite
