#include "loom/store/sqlite_accounting_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdlib>
#include <iterator>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "loom/store/sqlite_util.h"

namespace loom {
namespace {

using sqlite::BindText;
using sqlite::ColumnText;
using sqlite::FirstError;
using sqlite::OwnedStatement;
using sqlite::StatementScope;

// The names below carry an `Acct` prefix because unity builds compile this
// file in one translation unit with sqlite_state_store.cc, whose anonymous
// namespace has constants and helpers of the same purpose.

// Stored in the file header (`PRAGMA application_id`) so that loom refuses an
// SQLite file that belongs to something else: "lacc" in ASCII (loom
// accounting). The state store's file carries "loom" (0x6c6f6f6d), so
// neither store opens the other's file.
constexpr int32_t kAcctApplicationId = 0x6c616363;
constexpr int32_t kAcctStateStoreApplicationId = 0x6c6f6f6d;
// `PRAGMA user_version`: bumped on any incompatible change to the schema.
constexpr int64_t kAcctSchemaVersion = 1;

constexpr char kAcctSchema[] = R"sql(
CREATE TABLE IF NOT EXISTS finished_jobs (
  id        INTEGER PRIMARY KEY,
  user      TEXT NOT NULL,
  project   TEXT NOT NULL,
  state     TEXT NOT NULL,
  submit_us INTEGER NOT NULL,
  end_us    INTEGER NOT NULL,
  document  TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS finished_jobs_end ON finished_jobs (end_us);
CREATE INDEX IF NOT EXISTS finished_jobs_user_end
  ON finished_jobs (user, end_us);
CREATE INDEX IF NOT EXISTS finished_jobs_project_end
  ON finished_jobs (project, end_us);
)sql";

// The columns every query reads, in the order `AcctJobFromRow` expects.
constexpr char kAcctColumns[] =
    "id, user, project, state, submit_us, end_us, document";

// Indexed by `SqliteAccountingStore::Statement`.
constexpr const char* kAcctStatementSql[] = {
    // kBeginWrite
    "BEGIN IMMEDIATE",
    // kBeginRead
    "BEGIN DEFERRED",
    // kCommitTxn
    "COMMIT",
    // kRollbackTxn
    "ROLLBACK",
    // kPutJob
    "INSERT OR REPLACE INTO finished_jobs "
    "(id, user, project, state, submit_us, end_us, document) "
    "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    // kGetJob
    ("SELECT id, user, project, state, submit_us, end_us, document "
     "FROM finished_jobs WHERE id = ?1"),
    // kCountJobs
    "SELECT count(*) FROM finished_jobs",
};
static_assert(std::size(kAcctStatementSql) == 7);

// The job in the current row of a statement that selects `kAcctColumns`.
FinishedJob AcctJobFromRow(sqlite3_stmt* stmt) {
  FinishedJob job;
  job.id = sqlite3_column_int64(stmt, 0);
  job.user = ColumnText(stmt, 1);
  job.project = ColumnText(stmt, 2);
  job.state = ColumnText(stmt, 3);
  job.submit_time = absl::FromUnixMicros(sqlite3_column_int64(stmt, 4));
  job.end_time = absl::FromUnixMicros(sqlite3_column_int64(stmt, 5));
  job.document = ColumnText(stmt, 6);
  return job;
}

// The smallest whole microsecond at or after `t`. Stored times are whole
// microseconds, so `stored >= t` is `stored_us >= AcctCeilMicros(t)` and
// `stored < t` is `stored_us < AcctCeilMicros(t)`: the SQL filters judge
// exactly as `FinishedJobMatches` does on the stored job.
int64_t AcctCeilMicros(absl::Time t) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (t == absl::InfiniteFuture()) return kMax;
  if (t == absl::InfinitePast()) return std::numeric_limits<int64_t>::min();
  int64_t us = absl::ToUnixMicros(t);  // rounds down
  if (us < kMax && absl::FromUnixMicros(us) < t) ++us;
  return us;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteAccountingStore>>
SqliteAccountingStore::Open(const std::string& path) {
  if (path.empty()) {
    return absl::InvalidArgumentError("sqlite accounting store: empty path");
  }
  // The busy timeout: how long a statement waits for a lock held by another
  // connection (for example `sqlite3` poking at the file) before failing
  // with `Unavailable`.
  absl::StatusOr<sqlite3*> db =
      sqlite::Open(path, absl::StrCat("sqlite accounting store ", path), 5000);
  if (!db.ok()) return db.status();
  // From here on the store owns `db` and closes it on every path.
  std::unique_ptr<SqliteAccountingStore> store(
      new SqliteAccountingStore(path, *db));
  if (absl::Status s = store->Init(); !s.ok()) return s;
  return store;
}

SqliteAccountingStore::SqliteAccountingStore(std::string path, sqlite3* db)
    : path_(std::move(path)),
      label_(absl::StrCat("sqlite accounting store ", path_)),
      db_(db) {}

SqliteAccountingStore::~SqliteAccountingStore() {
  sqlite::Close(db_, statements_);
}

absl::Status SqliteAccountingStore::SqlError(std::string_view what, int rc) {
  return sqlite::Error(db_, label_, what, rc);
}

absl::Status SqliteAccountingStore::Init() {
  absl::MutexLock lock(&mu_);
  // The first statement reads the header, so it is the one that tells a
  // garbage file (SQLITE_NOTADB) from a database.
  absl::StatusOr<int64_t> application_id =
      sqlite::ReadApplicationId(db_, label_);
  if (!application_id.ok()) return application_id.status();
  if (*application_id == kAcctStateStoreApplicationId) {
    return absl::FailedPreconditionError(absl::StrCat(
        label_,
        ": not a loom accounting store (it is a loom state store; accounting "
        "needs a file of its own)"));
  }
  if (absl::Status s = sqlite::CheckApplicationId(
          db_, label_, "loom accounting store", *application_id,
          kAcctApplicationId,
          "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
          "name != 'finished_jobs'");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = sqlite::UseDurableWal(db_, label_); !s.ok()) return s;

  // Check and create the schema in one write transaction, so that two
  // processes creating the same new file agree.
  int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqlError("creating the schema", rc);
  std::string text;
  if (absl::Status s = QueryText("PRAGMA user_version", &text); !s.ok()) {
    RollbackIfActive();
    return s;
  }
  const int64_t version = std::strtoll(text.c_str(), nullptr, 10);
  if (version != 0 && version != kAcctSchemaVersion) {
    RollbackIfActive();
    return absl::FailedPreconditionError(
        absl::StrCat(label_, ": schema version ", version,
                     " is not the supported version ", kAcctSchemaVersion));
  }
  std::string setup = kAcctSchema;
  if (version == 0) {
    absl::StrAppend(&setup, "PRAGMA application_id = ", kAcctApplicationId,
                    "; PRAGMA user_version = ", kAcctSchemaVersion, ";");
  }
  rc = sqlite3_exec(db_, setup.c_str(), nullptr, nullptr, nullptr);
  if (rc == SQLITE_OK) {
    rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);
  }
  if (rc != SQLITE_OK) {
    absl::Status error = SqlError("creating the schema", rc);
    RollbackIfActive();
    return error;
  }

  return sqlite::PrepareAll(db_, label_, kAcctStatementSql, statements_);
}

absl::Status SqliteAccountingStore::QueryText(const char* sql,
                                              std::string* out) {
  return sqlite::QueryText(db_, label_, sql, out);
}

absl::Status SqliteAccountingStore::Run(Statement id) {
  return sqlite::RunStatement(db_, label_, statements_[id],
                              kAcctStatementSql[id]);
}

void SqliteAccountingStore::RollbackIfActive() {
  sqlite::RollbackIfActive(db_, statements_[kRollbackTxn]);
}

absl::Status SqliteAccountingStore::PutJob(const FinishedJob& job) {
  StatementScope scope(statements_[kPutJob]);
  sqlite3_stmt* stmt = scope.get();
  int rc = FirstError({
      sqlite3_bind_int64(stmt, 1, job.id),
      BindText(stmt, 2, job.user),
      BindText(stmt, 3, job.project),
      BindText(stmt, 4, job.state),
      sqlite3_bind_int64(stmt, 5, absl::ToUnixMicros(job.submit_time)),
      sqlite3_bind_int64(stmt, 6, absl::ToUnixMicros(job.end_time)),
      BindText(stmt, 7, job.document),
  });
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc != SQLITE_DONE) {
    return SqlError(absl::StrCat("writing job ", job.id), rc);
  }
  return absl::OkStatus();
}

absl::Status SqliteAccountingStore::Add(const std::vector<FinishedJob>& jobs) {
  for (const FinishedJob& job : jobs) {
    if (job.id < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("accounting: job id ", job.id, " is below 1"));
    }
  }
  if (jobs.empty()) return absl::OkStatus();
  absl::MutexLock lock(&mu_);
  if (absl::Status s = Run(kBeginWrite); !s.ok()) return s;
  // In `jobs` order, so that a later duplicate id replaces an earlier one.
  for (const FinishedJob& job : jobs) {
    if (absl::Status s = PutJob(job); !s.ok()) {
      RollbackIfActive();
      return s;
    }
  }
  if (absl::Status s = Run(kCommitTxn); !s.ok()) {
    RollbackIfActive();
    return s;
  }
  return absl::OkStatus();
}

absl::Status SqliteAccountingStore::FindPart(const FinishedJobQuery& query,
                                             const std::vector<int64_t>& ids,
                                             int64_t limit,
                                             std::vector<FinishedJob>* out) {
  // Only placeholders go into the text; every value is bound.
  std::vector<std::string> where;
  if (!ids.empty()) {
    std::vector<std::string> marks(ids.size(), "?");
    where.push_back(absl::StrCat("id IN (", absl::StrJoin(marks, ", "), ")"));
  }
  if (!query.user.empty()) where.push_back("user = ?");
  if (!query.project.empty()) where.push_back("project = ?");
  if (!query.states.empty()) {
    std::vector<std::string> marks(query.states.size(), "?");
    where.push_back(
        absl::StrCat("state IN (", absl::StrJoin(marks, ", "), ")"));
  }
  if (query.since.has_value()) where.push_back("end_us >= ?");
  if (query.until.has_value()) where.push_back("submit_us < ?");
  std::string sql =
      absl::StrCat("SELECT ", kAcctColumns, " FROM finished_jobs");
  if (!where.empty()) {
    absl::StrAppend(&sql, " WHERE ", absl::StrJoin(where, " AND "));
  }
  absl::StrAppend(&sql, " ORDER BY id");
  if (limit > 0) absl::StrAppend(&sql, " LIMIT ?");

  OwnedStatement stmt;
  int rc = sqlite3_prepare_v2(db_, sql.c_str(), -1, stmt.out(), nullptr);
  if (rc != SQLITE_OK) return SqlError("preparing Find", rc);
  int index = 0;
  for (int64_t id : ids) {
    if (rc == SQLITE_OK) rc = sqlite3_bind_int64(stmt.get(), ++index, id);
  }
  if (!query.user.empty() && rc == SQLITE_OK) {
    rc = BindText(stmt.get(), ++index, query.user);
  }
  if (!query.project.empty() && rc == SQLITE_OK) {
    rc = BindText(stmt.get(), ++index, query.project);
  }
  for (const std::string& state : query.states) {
    if (rc == SQLITE_OK) rc = BindText(stmt.get(), ++index, state);
  }
  if (query.since.has_value() && rc == SQLITE_OK) {
    rc = sqlite3_bind_int64(stmt.get(), ++index, AcctCeilMicros(*query.since));
  }
  if (query.until.has_value() && rc == SQLITE_OK) {
    rc = sqlite3_bind_int64(stmt.get(), ++index, AcctCeilMicros(*query.until));
  }
  if (limit > 0 && rc == SQLITE_OK) {
    rc = sqlite3_bind_int64(stmt.get(), ++index, limit);
  }
  if (rc != SQLITE_OK) return SqlError("Find", rc);
  while ((rc = sqlite3_step(stmt.get())) == SQLITE_ROW) {
    out->push_back(AcctJobFromRow(stmt.get()));
  }
  if (rc != SQLITE_DONE) return SqlError("Find", rc);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<FinishedJob>> SqliteAccountingStore::Find(
    const FinishedJobQuery& query) {
  if (query.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("accounting: negative limit ", query.limit));
  }
  // Sorted and without repeats: the ids then split into parts whose results
  // follow each other in id order, and no value is bound twice.
  std::vector<int64_t> ids = query.ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  FinishedJobQuery filters = query;
  filters.ids.clear();
  std::sort(filters.states.begin(), filters.states.end());
  filters.states.erase(
      std::unique(filters.states.begin(), filters.states.end()),
      filters.states.end());

  std::vector<FinishedJob> result;
  absl::MutexLock lock(&mu_);
  if (ids.size() <= kMaxIdsPerQuery) {
    if (absl::Status s = FindPart(filters, ids, query.limit, &result);
        !s.ok()) {
      return s;
    }
    return result;
  }
  // Several queries: one read transaction, so that they see one snapshot.
  if (absl::Status s = Run(kBeginRead); !s.ok()) return s;
  for (size_t begin = 0; begin < ids.size(); begin += kMaxIdsPerQuery) {
    int64_t remaining = 0;  // 0: no limit
    if (query.limit > 0) {
      remaining = query.limit - static_cast<int64_t>(result.size());
      if (remaining <= 0) break;
    }
    const size_t end = std::min(ids.size(), begin + kMaxIdsPerQuery);
    const std::vector<int64_t> part(ids.begin() + begin, ids.begin() + end);
    if (absl::Status s = FindPart(filters, part, remaining, &result); !s.ok()) {
      RollbackIfActive();
      return s;
    }
  }
  if (absl::Status s = Run(kCommitTxn); !s.ok()) {
    RollbackIfActive();
    return s;
  }
  return result;
}

absl::StatusOr<std::optional<FinishedJob>> SqliteAccountingStore::Get(
    int64_t id) {
  absl::MutexLock lock(&mu_);
  StatementScope scope(statements_[kGetJob]);
  sqlite3_stmt* stmt = scope.get();
  int rc = sqlite3_bind_int64(stmt, 1, id);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return std::optional<FinishedJob>(AcctJobFromRow(stmt));
  if (rc == SQLITE_DONE) return std::optional<FinishedJob>();
  return SqlError(absl::StrCat("reading job ", id), rc);
}

absl::StatusOr<int64_t> SqliteAccountingStore::Count() {
  absl::MutexLock lock(&mu_);
  StatementScope scope(statements_[kCountJobs]);
  sqlite3_stmt* stmt = scope.get();
  int rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) return sqlite3_column_int64(stmt, 0);
  return SqlError("counting jobs", rc);
}

}  // namespace loom
