#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/store/accounting_store.h"
#include "loom/store/state_store.h"

namespace loom {

// An `AccountingStore` kept as keys under a prefix of a `StateStore`: the
// mechanism used with etcd, where every server of an HA set reads and writes
// the same keys and so sees the same history (whichever of them leads).
//
// Each job is one key, `prefix` followed by its id as 20 zero-padded decimal
// digits (so key order is id order), whose value is a compact JSON object
// {"id", "user", "project", "state", "submit_us", "end_us", "document"},
// with times in microseconds since the Unix epoch. Strings that are not
// valid UTF-8 are stored with U+FFFD in place of the bad bytes.
//
// Nothing is indexed: `Find` (unless it names only a few ids, which it reads
// one by one) and `Count` list the whole prefix and filter, which is fine for
// hundreds of thousands of jobs; `SqliteAccountingStore` is indexed. A value
// under the prefix that is not a job (bad JSON, wrong types, an id that does
// not match its key) is skipped by `Find`, `Get` and `Count`, never fatal.
//
// `Add` commits at most `kMaxPutsPerCommit` puts per `StateStore::Commit`
// (etcd refuses a transaction of more than 128 operations by default), and
// at most 512 KiB of keys and values (etcd refuses a request over 1.5 MiB by
// default; a single larger job goes alone). So a failed `Add` may have
// stored some batches and not others, as the interface allows: the caller
// adds them all again, and the keys it stored before are simply rewritten.
//
// Thread-safe as the underlying store is; the object itself holds no state
// beyond its constants. Nothing throws.
class KeyValueAccountingStore final : public AccountingStore {
 public:
  // Puts per `Commit` in `Add`.
  static constexpr size_t kMaxPutsPerCommit = 100;
  // `Find` reads the named ids one `Get` at a time when there are at most
  // this many, else it lists the prefix.
  static constexpr size_t kMaxIdsToGet = 256;

  // Keeps jobs under `prefix` (which should end with "/" and hold nothing
  // else) in `store`, which is not owned and must outlive this object.
  explicit KeyValueAccountingStore(StateStore* store,
                                   std::string prefix = "/accounting/jobs/");

  KeyValueAccountingStore(const KeyValueAccountingStore&) = delete;
  KeyValueAccountingStore& operator=(const KeyValueAccountingStore&) = delete;

  const std::string& prefix() const { return prefix_; }

  // The key of job `id` (at least 1).
  std::string KeyOf(int64_t id) const;

  absl::Status Add(const std::vector<FinishedJob>& jobs) override;
  absl::StatusOr<std::vector<FinishedJob>> Find(
      const FinishedJobQuery& query) override;
  absl::StatusOr<std::optional<FinishedJob>> Get(int64_t id) override;
  // A scan of the prefix (see the class comment).
  absl::StatusOr<int64_t> Count() override;

 private:
  // The job stored as `kv`, or nullopt when it is not one (see the class
  // comment).
  std::optional<FinishedJob> Decode(const KeyValue& kv) const;

  // Constant after construction.
  StateStore* const store_;
  const std::string prefix_;
};

}  // namespace loom
