#include "loom/store/sqlite_state_store.h"

#include <sqlite3.h>

#include <iterator>
#include <string>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "loom/store/sqlite_util.h"

namespace loom {
namespace {

using sqlite::BindBytes;
using sqlite::BindText;
using sqlite::ColumnBytes;
using sqlite::FirstError;
using sqlite::StatementScope;

// Stored in the file header (`PRAGMA application_id`) so that loom refuses an
// SQLite file that belongs to something else: "loom" in ASCII.
constexpr int32_t kApplicationId = 0x6c6f6f6d;
// Bumped on any incompatible change to the schema below.
constexpr int64_t kSchemaVersion = 1;

// Keys and values are BLOBs so that SQLite compares them bytewise (memcmp),
// which is `std::string`'s and etcd's order. `changes.kind` uses etcd's event
// types: 0 put, 1 delete.
constexpr char kSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS meta (
  name  TEXT PRIMARY KEY,
  value INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv (
  key     BLOB PRIMARY KEY,
  value   BLOB NOT NULL,
  version INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS changes (
  revision INTEGER NOT NULL,
  seq      INTEGER NOT NULL,
  kind     INTEGER NOT NULL,
  key      BLOB NOT NULL,
  value    BLOB NOT NULL,
  PRIMARY KEY (revision, seq)
) WITHOUT ROWID;
INSERT OR IGNORE INTO meta (name, value) VALUES
  ('schema_version', 1),
  ('revision', 0),
  ('compacted_revision', 0),
  ('change_count', 0);
INSERT OR IGNORE INTO meta (name, value)
  SELECT 'change_bytes', coalesce(sum(length(key) + length(value)), 0)
  FROM changes;
)sql";

// Indexed by `SqliteStateStore::Statement`.
constexpr const char* kStatementSql[] = {
    // kBeginWrite
    "BEGIN IMMEDIATE",
    // kBeginRead
    "BEGIN DEFERRED",
    // kCommitTxn
    "COMMIT",
    // kRollbackTxn
    "ROLLBACK",
    // kGetMeta
    "SELECT value FROM meta WHERE name = ?1",
    // kSetMeta
    "INSERT INTO meta (name, value) VALUES (?1, ?2) "
    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
    // kGetKey
    "SELECT value, version FROM kv WHERE key = ?1",
    // kPutKey
    "INSERT INTO kv (key, value, version) VALUES (?1, ?2, ?3) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, "
    "version = excluded.version",
    // kDeleteKey
    "DELETE FROM kv WHERE key = ?1",
    // kListRange
    "SELECT key, value, version FROM kv WHERE key >= ?1 AND key < ?2 "
    "ORDER BY key LIMIT ?3",
    // kListFrom
    "SELECT key, value, version FROM kv WHERE key >= ?1 ORDER BY key "
    "LIMIT ?2",
    // kInsertChange
    "INSERT INTO changes (revision, seq, kind, key, value) "
    "VALUES (?1, ?2, ?3, ?4, ?5)",
    // kChangesRange
    "SELECT revision, kind, key, value FROM changes "
    "WHERE revision > ?1 AND key >= ?2 AND key < ?3 ORDER BY revision, seq",
    // kChangesFrom
    "SELECT revision, kind, key, value FROM changes "
    "WHERE revision > ?1 AND key >= ?2 ORDER BY revision, seq",
    // kTrimCutoff
    "SELECT revision FROM changes ORDER BY revision, seq LIMIT 1 OFFSET ?1",
    // kTrimChanges
    "DELETE FROM changes WHERE revision <= ?1",
    // kTrimScan
    "SELECT revision, length(key) + length(value) FROM changes "
    "ORDER BY revision, seq",
    // kTrimSize
    "SELECT count(*), coalesce(sum(length(key) + length(value)), 0) "
    "FROM changes WHERE revision <= ?1",
};
static_assert(std::size(kStatementSql) == 18);

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteStateStore>> SqliteStateStore::Open(
    const std::string& path, SqliteStateStoreOptions options) {
  if (path.empty()) {
    return absl::InvalidArgumentError("sqlite store: empty path");
  }
  if (options.change_log_limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sqlite store ", path, ": negative change_log_limit ",
                     options.change_log_limit));
  }
  if (options.change_log_bytes_limit < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sqlite store ", path, ": negative change_log_bytes_limit ",
        options.change_log_bytes_limit));
  }
  absl::StatusOr<sqlite3*> db = sqlite::Open(
      path, absl::StrCat("sqlite store ", path),
      static_cast<int>(absl::ToInt64Milliseconds(options.busy_timeout)));
  if (!db.ok()) return db.status();
  // From here on the store owns `db` and closes it on every path.
  std::unique_ptr<SqliteStateStore> store(
      new SqliteStateStore(path, options, *db));
  if (absl::Status s = store->Init(); !s.ok()) return s;
  return store;
}

SqliteStateStore::SqliteStateStore(std::string path,
                                   SqliteStateStoreOptions options, sqlite3* db)
    : path_(std::move(path)),
      label_(absl::StrCat("sqlite store ", path_)),
      options_(options),
      db_(db) {}

SqliteStateStore::~SqliteStateStore() { sqlite::Close(db_, statements_); }

absl::Status SqliteStateStore::SqlError(std::string_view what, int rc) {
  return sqlite::Error(db_, label_, what, rc);
}

absl::Status SqliteStateStore::Init() {
  absl::MutexLock lock(&mu_);
  // The first statement reads the header, so it is the one that tells a
  // garbage file (SQLITE_NOTADB) from a database.
  absl::StatusOr<int64_t> application_id =
      sqlite::ReadApplicationId(db_, label_);
  if (!application_id.ok()) return application_id.status();
  // An unmarked file is either new (no tables) or an older loom store.
  if (absl::Status s = sqlite::CheckApplicationId(
          db_, label_, "loom state store", *application_id, kApplicationId,
          "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
          "name NOT IN ('meta', 'kv', 'changes')");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = sqlite::UseDurableWal(db_, label_); !s.ok()) return s;

  // Create or check the schema in one write transaction.
  std::string setup = absl::StrCat("BEGIN IMMEDIATE;", kSchema);
  if (*application_id == 0) {
    absl::StrAppend(&setup, "PRAGMA application_id = ", kApplicationId, ";");
  }
  int rc = sqlite3_exec(db_, setup.c_str(), nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status error = SqlError("creating the schema", rc);
    RollbackIfActive();
    return error;
  }
  std::string text;
  if (absl::Status s = QueryText(
          "SELECT value FROM meta WHERE name = 'schema_version'", &text);
      !s.ok()) {
    RollbackIfActive();
    return s;
  }
  if (text != std::to_string(kSchemaVersion)) {
    RollbackIfActive();
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": schema version ", text,
                     " is not the supported version ", kSchemaVersion));
  }
  rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status error = SqlError("creating the schema", rc);
    RollbackIfActive();
    return error;
  }

  return sqlite::PrepareAll(db_, label_, kStatementSql, statements_);
}

absl::Status SqliteStateStore::QueryText(const char* sql, std::string* out) {
  return sqlite::QueryText(db_, label_, sql, out);
}

absl::Status SqliteStateStore::Run(Statement id) {
  return sqlite::RunStatement(db_, label_, statements_[id], kStatementSql[id]);
}

void SqliteStateStore::RollbackIfActive() {
  sqlite::RollbackIfActive(db_, statements_[kRollbackTxn]);
}

absl::StatusOr<int64_t> SqliteStateStore::GetMeta(std::string_view name) {
  StatementScope scope(statements_[kGetMeta]);
  sqlite3_stmt* stmt = scope.get();
  int rc = BindText(stmt, 1, name);
  if (rc != SQLITE_OK) return SqlError("reading meta", rc);
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return sqlite3_column_int64(stmt, 0);
  if (rc == SQLITE_DONE) {
    return absl::DataLossError(
        absl::StrCat(label_, ": meta row \"", std::string(name), "\" missing"));
  }
  return SqlError(absl::StrCat("reading meta ", std::string(name)), rc);
}

absl::Status SqliteStateStore::SetMeta(std::string_view name, int64_t value) {
  StatementScope scope(statements_[kSetMeta]);
  sqlite3_stmt* stmt = scope.get();
  int rc =
      FirstError({BindText(stmt, 1, name), sqlite3_bind_int64(stmt, 2, value)});
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) {
    return SqlError(absl::StrCat("writing meta ", std::string(name)), rc);
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> SqliteStateStore::VersionOf(std::string_view key) {
  StatementScope scope(statements_[kGetKey]);
  sqlite3_stmt* stmt = scope.get();
  int rc = BindBytes(stmt, 1, key);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return sqlite3_column_int64(stmt, 1);
  if (rc == SQLITE_DONE) return 0;
  return SqlError("reading a key", rc);
}

absl::StatusOr<KeyValue> SqliteStateStore::Get(std::string_view key) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  absl::MutexLock lock(&mu_);
  StatementScope scope(statements_[kGetKey]);
  sqlite3_stmt* stmt = scope.get();
  int rc = BindBytes(stmt, 1, key);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    return KeyValue{std::string(key), ColumnBytes(stmt, 0),
                    sqlite3_column_int64(stmt, 1)};
  }
  if (rc == SQLITE_DONE) {
    return absl::NotFoundError(absl::StrCat(
        "key \"", absl::CEscape(std::string(key)), "\" not found"));
  }
  return SqlError("Get", rc);
}

absl::StatusOr<std::vector<KeyValue>> SqliteStateStore::List(
    std::string_view prefix, int64_t limit) {
  if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return s;
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative list limit ", limit));
  }
  const std::string end = PrefixEnd(prefix);
  const int64_t sql_limit = limit == 0 ? -1 : limit;  // -1: no limit
  absl::MutexLock lock(&mu_);
  StatementScope scope(statements_[end.empty() ? kListFrom : kListRange]);
  sqlite3_stmt* stmt = scope.get();
  int rc =
      end.empty()
          ? FirstError({BindBytes(stmt, 1, prefix),
                        sqlite3_bind_int64(stmt, 2, sql_limit)})
          : FirstError({BindBytes(stmt, 1, prefix), BindBytes(stmt, 2, end),
                        sqlite3_bind_int64(stmt, 3, sql_limit)});
  if (rc != SQLITE_OK) return SqlError("List", rc);
  std::vector<KeyValue> result;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    result.push_back({ColumnBytes(stmt, 0), ColumnBytes(stmt, 1),
                      sqlite3_column_int64(stmt, 2)});
  }
  if (rc != SQLITE_DONE) return SqlError("List", rc);
  return result;
}

absl::StatusOr<int64_t> SqliteStateStore::Commit(
    const std::vector<Condition>& conditions,
    const std::vector<Mutation>& mutations) {
  if (absl::Status s = ValidateCommit(conditions, mutations); !s.ok()) {
    return s;
  }
  // Group commit, as LevelDB's writers do: commits that arrive while
  // another is being written queue up; the one at the front writes the
  // whole queue in one transaction (one sync), each commit under a
  // savepoint of its own so that a failed condition undoes only that
  // commit, and hands every waiter its result.
  Writer w{&conditions, &mutations};
  absl::MutexLock queue_lock(&queue_mu_);
  writers_.push_back(&w);
  while (!w.done && &w != writers_.front()) w.cv.Wait(&queue_mu_);
  if (w.done) return w.result;
  const size_t n = std::min(writers_.size(), kMaxGroup);
  std::vector<Writer*> group(writers_.begin(), writers_.begin() + n);
  queue_mu_.Unlock();
  WriteGroup(group);
  queue_mu_.Lock();
  for (size_t i = 0; i < n; ++i) {
    Writer* done = writers_.front();
    writers_.pop_front();
    if (done != &w) {
      done->done = true;
      done->cv.Signal();
    }
  }
  if (!writers_.empty()) writers_.front()->cv.Signal();
  return w.result;
}

void SqliteStateStore::WriteGroup(const std::vector<Writer*>& group) {
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Run(kBeginWrite); !s.ok()) {
    for (Writer* w : group) w->result = s;
    return;
  }
  bool any_changed = false;
  for (Writer* w : group) {
    const bool alone = group.size() == 1;
    if (!alone) sqlite3_exec(db_, "SAVEPOINT w", nullptr, nullptr, nullptr);
    bool changed = false;
    w->result = ApplyCommit(*w->conditions, *w->mutations, &changed);
    if (!alone) {
      if (!w->result.ok()) {
        sqlite3_exec(db_, "ROLLBACK TO w", nullptr, nullptr, nullptr);
      }
      sqlite3_exec(db_, "RELEASE w", nullptr, nullptr, nullptr);
    }
    any_changed = any_changed || (w->result.ok() && changed);
  }
  if (!any_changed) {
    RollbackIfActive();
    return;
  }
  if (absl::Status s = Run(kCommitTxn); !s.ok()) {
    RollbackIfActive();
    for (Writer* w : group) {
      if (w->result.ok()) w->result = s;
    }
  }
}

absl::StatusOr<int64_t> SqliteStateStore::ApplyCommit(
    const std::vector<Condition>& conditions,
    const std::vector<Mutation>& mutations, bool* changed) {
  absl::StatusOr<int64_t> current = GetMeta("revision");
  if (!current.ok()) return current.status();
  for (const Condition& c : conditions) {
    absl::StatusOr<int64_t> actual = VersionOf(c.key);
    if (!actual.ok()) return actual.status();
    if (!ConditionHolds(c, *actual)) return ConditionFailedError(c, *actual);
  }
  const int64_t revision = *current + 1;
  int64_t seq = 0;
  int64_t bytes = 0;  // of the changes appended to the log
  for (const Mutation& m : mutations) {
    if (m.kind == Mutation::kPut) {
      StatementScope scope(statements_[kPutKey]);
      sqlite3_stmt* stmt = scope.get();
      int rc =
          FirstError({BindBytes(stmt, 1, m.key), BindBytes(stmt, 2, m.value),
                      sqlite3_bind_int64(stmt, 3, revision)});
      if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
      if (rc != SQLITE_DONE) return SqlError("writing a key", rc);
    } else {
      StatementScope scope(statements_[kDeleteKey]);
      sqlite3_stmt* stmt = scope.get();
      int rc = BindBytes(stmt, 1, m.key);
      if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
      if (rc != SQLITE_DONE) return SqlError("deleting a key", rc);
      if (sqlite3_changes(db_) == 0) continue;  // was absent: no change
    }
    StatementScope scope(statements_[kInsertChange]);
    sqlite3_stmt* stmt = scope.get();
    const std::string_view value =
        m.kind == Mutation::kPut ? std::string_view(m.value) : "";
    int rc = FirstError({sqlite3_bind_int64(stmt, 1, revision),
                         sqlite3_bind_int64(stmt, 2, seq),
                         sqlite3_bind_int(stmt, 3, static_cast<int>(m.kind)),
                         BindBytes(stmt, 4, m.key), BindBytes(stmt, 5, value)});
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc != SQLITE_DONE) return SqlError("appending to the change log", rc);
    ++seq;
    bytes += static_cast<int64_t>(m.key.size() + value.size());
  }
  if (seq == 0) return *current;  // nothing changed: no new revision
  *changed = true;
  if (absl::Status s = SetMeta("revision", revision); !s.ok()) return s;
  absl::StatusOr<int64_t> count = GetMeta("change_count");
  if (!count.ok()) return count.status();
  absl::StatusOr<int64_t> log_bytes = GetMeta("change_bytes");
  if (!log_bytes.ok()) return log_bytes.status();
  if (absl::Status s = TrimLog(*count + seq, *log_bytes + bytes); !s.ok()) {
    return s;
  }
  return revision;
}

absl::Status SqliteStateStore::TrimLog(int64_t change_count,
                                       int64_t change_bytes) {
  // The newest revision that has to go (0: none); every change of its
  // commit and of older ones goes with it.
  int64_t cutoff = 0;
  if (change_count > options_.change_log_limit) {
    const int64_t excess = change_count - options_.change_log_limit;
    StatementScope scope(statements_[kTrimCutoff]);
    sqlite3_stmt* stmt = scope.get();
    int rc = sqlite3_bind_int64(stmt, 1, excess - 1);
    if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
    if (rc != SQLITE_ROW) {
      if (rc == SQLITE_DONE) {
        return absl::DataLossError(absl::StrCat(
            label_, ": change_count does not match the change log"));
      }
      return SqlError("trimming the change log", rc);
    }
    cutoff = sqlite3_column_int64(stmt, 0);
  }
  if (change_bytes > options_.change_log_bytes_limit) {
    // Oldest first, until enough bytes would go (the scan stops there, so
    // it reads only what is dropped).
    const int64_t excess = change_bytes - options_.change_log_bytes_limit;
    StatementScope scope(statements_[kTrimScan]);
    sqlite3_stmt* stmt = scope.get();
    int64_t dropped = 0;
    int rc = SQLITE_DONE;
    while (dropped < excess && (rc = sqlite3_step(stmt)) == SQLITE_ROW) {
      cutoff = std::max<int64_t>(cutoff, sqlite3_column_int64(stmt, 0));
      dropped += sqlite3_column_int64(stmt, 1);
    }
    if (dropped < excess && rc != SQLITE_DONE) {
      return SqlError("trimming the change log", rc);
    }
  }
  if (cutoff > 0) {
    {
      StatementScope scope(statements_[kTrimSize]);
      sqlite3_stmt* stmt = scope.get();
      int rc = sqlite3_bind_int64(stmt, 1, cutoff);
      if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
      if (rc != SQLITE_ROW) return SqlError("trimming the change log", rc);
      change_count -= sqlite3_column_int64(stmt, 0);
      change_bytes -= sqlite3_column_int64(stmt, 1);
    }
    {
      StatementScope scope(statements_[kTrimChanges]);
      sqlite3_stmt* stmt = scope.get();
      int rc = sqlite3_bind_int64(stmt, 1, cutoff);
      if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
      if (rc != SQLITE_DONE) return SqlError("trimming the change log", rc);
    }
    if (absl::Status s = SetMeta("compacted_revision", cutoff); !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = SetMeta("change_count", change_count); !s.ok()) {
    return s;
  }
  return SetMeta("change_bytes", change_bytes);
}

absl::StatusOr<int64_t> SqliteStateStore::Revision() {
  absl::MutexLock lock(&mu_);
  return GetMeta("revision");
}

absl::StatusOr<std::vector<Change>> SqliteStateStore::ChangesSince(
    std::string_view prefix, int64_t revision, int64_t limit) {
  if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return s;
  if (revision < 0 || limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative revision ", revision, " or limit ", limit));
  }
  absl::MutexLock lock(&mu_);
  // One read transaction, so that the compaction point and the log agree.
  if (absl::Status s = Run(kBeginRead); !s.ok()) return s;
  absl::StatusOr<std::vector<Change>> result =
      ReadChanges(prefix, revision, limit);
  if (!result.ok()) {
    RollbackIfActive();
    return result;
  }
  if (absl::Status s = Run(kCommitTxn); !s.ok()) {
    RollbackIfActive();
    return s;
  }
  return result;
}

absl::StatusOr<std::vector<Change>> SqliteStateStore::ReadChanges(
    std::string_view prefix, int64_t revision, int64_t limit) {
  absl::StatusOr<int64_t> compacted = GetMeta("compacted_revision");
  if (!compacted.ok()) return compacted.status();
  if (revision < *compacted) {
    return absl::OutOfRangeError(absl::StrCat(
        "changes after revision ", revision,
        " are no longer in the change log (it starts after revision ",
        *compacted, "); re-list"));
  }
  const std::string end = PrefixEnd(prefix);
  StatementScope scope(statements_[end.empty() ? kChangesFrom : kChangesRange]);
  sqlite3_stmt* stmt = scope.get();
  int rc =
      end.empty()
          ? FirstError({sqlite3_bind_int64(stmt, 1, revision),
                        BindBytes(stmt, 2, prefix)})
          : FirstError({sqlite3_bind_int64(stmt, 1, revision),
                        BindBytes(stmt, 2, prefix), BindBytes(stmt, 3, end)});
  if (rc != SQLITE_OK) return SqlError("ChangesSince", rc);
  std::vector<Change> result;
  while ((rc = sqlite3_step(stmt)) == SQLITE_ROW) {
    const int64_t change_revision = sqlite3_column_int64(stmt, 0);
    if (limit > 0 && static_cast<int64_t>(result.size()) >= limit &&
        change_revision != result.back().revision) {
      rc = SQLITE_DONE;
      break;
    }
    const int kind = sqlite3_column_int(stmt, 1);
    result.push_back(
        {kind == Mutation::kDelete ? Mutation::kDelete : Mutation::kPut,
         ColumnBytes(stmt, 2), ColumnBytes(stmt, 3), change_revision});
  }
  if (rc != SQLITE_DONE) return SqlError("ChangesSince", rc);
  return result;
}

}  // namespace loom
