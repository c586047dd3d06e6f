#include "loom/store/sqlite_util.h"

#include <sqlite3.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace loom::sqlite {
namespace {

// Debian's absl::string_view is not std::string_view.
absl::string_view AbslView(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

}  // namespace

absl::StatusCode StatusCodeFor(int rc) {
  switch (rc & 0xff) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return absl::StatusCode::kUnavailable;
    case SQLITE_FULL:
    case SQLITE_NOMEM:
      return absl::StatusCode::kResourceExhausted;
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::StatusCode::kDataLoss;
    case SQLITE_PERM:
    case SQLITE_AUTH:
    case SQLITE_READONLY:
      return absl::StatusCode::kPermissionDenied;
    case SQLITE_CANTOPEN:
      return absl::StatusCode::kFailedPrecondition;
    case SQLITE_TOOBIG:
    case SQLITE_RANGE:
    case SQLITE_MISMATCH:
      return absl::StatusCode::kInvalidArgument;
    default:
      return absl::StatusCode::kInternal;
  }
}

absl::Status Error(sqlite3* db, std::string_view label, std::string_view what,
                   int rc) {
  return absl::Status(
      StatusCodeFor(rc),
      absl::StrCat(AbslView(label), ": ", AbslView(what), ": ",
                   sqlite3_errmsg(db), " (", sqlite3_errstr(rc), ")"));
}

absl::StatusOr<sqlite3*> Open(const std::string& path, std::string_view label,
                              int busy_timeout_ms) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(
      path.c_str(), &db,
      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
      nullptr);
  if (rc != SQLITE_OK) {
    std::string message =
        db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return absl::Status(
        StatusCodeFor(rc),
        absl::StrCat(AbslView(label), ": cannot open: ", message));
  }
  sqlite3_extended_result_codes(db, 1);
  sqlite3_busy_timeout(db, busy_timeout_ms);
  return db;
}

void Close(sqlite3* db, std::span<sqlite3_stmt* const> statements) {
  for (sqlite3_stmt* stmt : statements) {
    sqlite3_finalize(stmt);  // harmless on nullptr
  }
  sqlite3_close_v2(db);
}

absl::Status QueryText(sqlite3* db, std::string_view label, const char* sql,
                       std::string* out) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status error = Error(db, label, sql, rc);
    sqlite3_finalize(stmt);
    return error;
  }
  rc = sqlite3_step(stmt);
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    *out = text != nullptr ? reinterpret_cast<const char*>(text) : "";
  } else {
    out->clear();
  }
  absl::Status status = rc == SQLITE_ROW || rc == SQLITE_DONE
                            ? absl::OkStatus()
                            : Error(db, label, sql, rc);
  sqlite3_finalize(stmt);
  return status;
}

absl::StatusOr<int64_t> ReadApplicationId(sqlite3* db, std::string_view label) {
  std::string text;
  if (absl::Status s = QueryText(db, label, "PRAGMA application_id", &text);
      !s.ok()) {
    return s;
  }
  return std::strtoll(text.c_str(), nullptr, 10);
}

absl::Status CheckApplicationId(sqlite3* db, std::string_view label,
                                std::string_view kind, int64_t application_id,
                                int64_t expected,
                                const char* count_other_tables_sql) {
  if (application_id != 0 && application_id != expected) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: not a %s (application_id 0x%x)", AbslView(label),
                        AbslView(kind), application_id));
  }
  if (application_id == 0) {
    // An unmarked file is new (no tables) or the store's own from before the
    // mark; a database with tables of its own belongs to something else.
    std::string text;
    if (absl::Status s = QueryText(db, label, count_other_tables_sql, &text);
        !s.ok()) {
      return s;
    }
    if (text != "0") {
      return absl::FailedPreconditionError(
          absl::StrCat(AbslView(label), ": not a ", AbslView(kind),
                       " (it has other tables)"));
    }
  }
  return absl::OkStatus();
}

absl::Status UseDurableWal(sqlite3* db, std::string_view label) {
  std::string text;
  if (absl::Status s = QueryText(db, label, "PRAGMA journal_mode=WAL", &text);
      !s.ok()) {
    return s;
  }
  if (text != "wal") {
    return absl::FailedPreconditionError(absl::StrCat(
        AbslView(label), ": cannot switch to WAL journal mode (got \"", text,
        "\")"));
  }
  int rc =
      sqlite3_exec(db, "PRAGMA synchronous=FULL", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(db, label, "PRAGMA synchronous=FULL", rc);
  return absl::OkStatus();
}

absl::Status PrepareAll(sqlite3* db, std::string_view label,
                        std::span<const char* const> sql,
                        std::span<sqlite3_stmt*> statements) {
  for (size_t i = 0; i < sql.size() && i < statements.size(); ++i) {
    int rc = sqlite3_prepare_v3(db, sql[i], -1, SQLITE_PREPARE_PERSISTENT,
                                &statements[i], nullptr);
    if (rc != SQLITE_OK) {
      return Error(db, label, absl::StrCat("preparing \"", sql[i], "\""), rc);
    }
  }
  return absl::OkStatus();
}

absl::Status RunStatement(sqlite3* db, std::string_view label,
                          sqlite3_stmt* stmt, const char* sql) {
  StatementScope scope(stmt);
  int rc;
  while ((rc = sqlite3_step(scope.get())) == SQLITE_ROW) {
  }
  if (rc != SQLITE_DONE) return Error(db, label, sql, rc);
  return absl::OkStatus();
}

void RollbackIfActive(sqlite3* db, sqlite3_stmt* rollback) {
  if (sqlite3_get_autocommit(db) != 0) return;  // no open transaction
  if (rollback != nullptr) {
    StatementScope scope(rollback);
    while (sqlite3_step(scope.get()) == SQLITE_ROW) {
    }
  } else {
    sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

StatementScope::~StatementScope() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

OwnedStatement::~OwnedStatement() {
  sqlite3_finalize(stmt_);  // harmless on nullptr
}

int BindBytes(sqlite3_stmt* stmt, int index, std::string_view bytes) {
  if (bytes.empty()) return sqlite3_bind_zeroblob(stmt, index, 0);
  return sqlite3_bind_blob64(stmt, index, bytes.data(), bytes.size(),
                             SQLITE_STATIC);
}

int BindText(sqlite3_stmt* stmt, int index, std::string_view text) {
  return sqlite3_bind_text64(stmt, index, text.data(), text.size(),
                             SQLITE_STATIC, SQLITE_UTF8);
}

std::string ColumnBytes(sqlite3_stmt* stmt, int column) {
  const void* data = sqlite3_column_blob(stmt, column);
  int size = sqlite3_column_bytes(stmt, column);
  if (data == nullptr || size <= 0) return std::string();
  return std::string(static_cast<const char*>(data), size);
}

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* data = sqlite3_column_text(stmt, column);
  int size = sqlite3_column_bytes(stmt, column);
  if (data == nullptr || size <= 0) return std::string();
  return std::string(reinterpret_cast<const char*>(data), size);
}

int FirstError(std::initializer_list<int> codes) {
  for (int rc : codes) {
    if (rc != SQLITE_OK) return rc;
  }
  return SQLITE_OK;
}

}  // namespace loom::sqlite
