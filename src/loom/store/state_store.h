#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom {

// One key as stored. `version` is the store revision of the commit that last
// wrote the key (etcd's `mod_revision`); it is at least 1.
struct KeyValue {
  std::string key;
  std::string value;
  int64_t version = 0;
};

// A guard on a `StateStore::Commit`: the commit applies only if `key` is at
// `version` now. Besides an exact version (>= 1), two special values:
// `kMustNotExist` (0) and `kMustExist` (-1, any version).
struct Condition {
  static constexpr int64_t kMustNotExist = 0;
  static constexpr int64_t kMustExist = -1;

  std::string key;
  int64_t version = kMustNotExist;
};

// One write in a `StateStore::Commit`: put `key` = `value`, or delete `key`
// (`value` is ignored). Deleting an absent key is not an error.
struct Mutation {
  enum Kind { kPut, kDelete };

  static Mutation Put(std::string key, std::string value) {
    return {kPut, std::move(key), std::move(value)};
  }
  static Mutation Delete(std::string key) {
    return {kDelete, std::move(key), {}};
  }

  Kind kind = kPut;
  std::string key;
  std::string value;
};

// One entry of the change log: a key put (with its new value) or deleted
// (empty `value`) by the commit that produced store revision `revision`.
struct Change {
  using Kind = Mutation::Kind;

  Kind kind = Mutation::kPut;
  std::string key;
  std::string value;
  int64_t revision = 0;
};

// Durable controller state: a sorted map of byte-string keys to byte-string
// values with one store-wide revision, versioned compare-and-set commits and
// a bounded change log to follow. It is the whole contract between the
// controller and its storage backend (in the style of Mesos' `Storage`), and
// it maps one-to-one onto etcd v3: `Commit` is a `Txn` whose compares are on
// `mod_revision`, `List` a prefix `Range`, `ChangesSince` a `Watch` from a
// revision (see docs/store.md).
//
// Revisions. The store has one revision, 0 when empty, that grows by exactly
// one with every commit that changes something. All keys written by a commit
// get that commit's revision as their `version`. A commit that changes
// nothing (conditions only, or only deletes of absent keys) leaves the
// revision as it is, as etcd does.
//
// Keys and values are arbitrary bytes, ordered bytewise (`std::string`'s
// order, etcd's order). A key must be 1 to `kMaxKeyBytes` bytes, a value at
// most `kMaxValueBytes`; anything else is `InvalidArgument`.
//
// Thread-safety: every implementation is thread-safe; any method may be
// called from any thread at any time. Each call is atomic and linearizable
// with respect to the others on the same store object.
//
// Errors: methods never throw. Besides the errors each method lists, any of
// them may return the backend's own failure (`Unavailable` for a busy or
// unreachable backend, worth retrying; `DataLoss` for a corrupt file;
// `ResourceExhausted` for a full disk; `Internal` for anything else). After
// such an error from `Commit` the caller cannot assume the commit did not
// happen (a remote backend may have applied it before the reply was lost),
// so it should re-read and retry conditionally.
//
// Durability: when `Commit` returns OK, the change survives a crash of the
// process; `SqliteStateStore` (synchronous=FULL) also survives a crash of the
// machine, and etcd a minority of members. `MemoryStateStore` is not durable
// at all: it is for tests and the simulator.
class StateStore {
 public:
  static constexpr int64_t kMaxKeyBytes = 4 * 1024;
  static constexpr int64_t kMaxValueBytes = 16 * 1024 * 1024;
  // How many changes the change log keeps by default (whole commits are
  // dropped, oldest first, once it holds more).
  static constexpr int64_t kDefaultChangeLogLimit = 100'000;
  // How many bytes of changes (keys plus values) it keeps by default, for
  // the same reason: the log is bounded by count and by bytes, whichever
  // comes first.
  static constexpr int64_t kDefaultChangeLogBytesLimit = int64_t{64} << 20;

  virtual ~StateStore() = default;

  // Returns the key's value and version. `NotFound` if the key is absent;
  // `InvalidArgument` for an empty or oversized key.
  [[nodiscard]] virtual absl::StatusOr<KeyValue> Get(std::string_view key) = 0;

  // Returns the keys that start with `prefix` (all keys for an empty prefix)
  // in key order, at most `limit` of them (0: no limit), from one consistent
  // snapshot. `InvalidArgument` for a negative limit or an oversized prefix.
  [[nodiscard]] virtual absl::StatusOr<std::vector<KeyValue>> List(
      std::string_view prefix, int64_t limit = 0) = 0;

  // Atomically: if every condition holds, applies every mutation in one new
  // revision and returns it; otherwise changes nothing. Returns
  // `FailedPrecondition` naming the key and the expected and actual versions
  // of the first condition that fails (in `conditions` order). Returns
  // `InvalidArgument`, changing nothing, for an empty or oversized key or
  // value, a condition version below -1, or two mutations of the same key
  // (etcd refuses those too). If nothing changes (no mutations, or only
  // deletes of absent keys) it returns the current revision. Durable when it
  // returns OK (see the class comment).
  [[nodiscard]] virtual absl::StatusOr<int64_t> Commit(
      const std::vector<Condition>& conditions,
      const std::vector<Mutation>& mutations) = 0;

  // Returns the current store revision (0 for an empty, never-written store).
  [[nodiscard]] virtual absl::StatusOr<int64_t> Revision() = 0;

  // Returns the changes to keys under `prefix` made after `revision` (that
  // is, with `Change::revision` > `revision`), oldest first and in mutation
  // order within a commit: a polling watch. With `limit` > 0 it returns about
  // that many: it stops at the first commit boundary at or after `limit`
  // changes, so a caller that resumes from the last change's revision misses
  // nothing. A `revision` at or past the current one gives an empty list.
  //
  // The log is bounded (by default `kDefaultChangeLogLimit` changes and
  // `kDefaultChangeLogBytesLimit` bytes; etcd: by its compaction). If
  // changes after `revision` have already been dropped, returns `OutOfRange`:
  // the caller should re-list (take `Revision()`, then `List`, then follow
  // from that revision; a change whose revision is at or below the listed
  // `version` of its key is already reflected in the listing).
  // `InvalidArgument` for a negative `revision` or `limit`, or an oversized
  // prefix.
  [[nodiscard]] virtual absl::StatusOr<std::vector<Change>> ChangesSince(
      std::string_view prefix, int64_t revision, int64_t limit) = 0;
};

// Helpers shared by the implementations (and by any future one, such as the
// etcd store), so that all of them judge arguments the same way.

// `InvalidArgument` unless 1 <= key size <= `kMaxKeyBytes`.
absl::Status ValidateKey(std::string_view key);
// `InvalidArgument` for a prefix over `kMaxKeyBytes` (an empty one is fine).
absl::Status ValidatePrefix(std::string_view prefix);
// Checks every key, value and condition version, and that no two mutations
// touch the same key.
absl::Status ValidateCommit(const std::vector<Condition>& conditions,
                            const std::vector<Mutation>& mutations);
// Whether a key at `actual_version` (0: absent) satisfies `condition`.
bool ConditionHolds(const Condition& condition, int64_t actual_version);
// The `FailedPrecondition` error for a failed condition.
absl::Status ConditionFailedError(const Condition& condition,
                                  int64_t actual_version);
// The smallest key greater than every key with this prefix (etcd's
// `range_end` for a prefix), or an empty string when there is none (empty
// prefix, or a prefix of only 0xff bytes): the range is then unbounded above.
std::string PrefixEnd(std::string_view prefix);
// Whether `key` starts with `prefix`.
bool HasPrefix(std::string_view key, std::string_view prefix);

}  // namespace loom
