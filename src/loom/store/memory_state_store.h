#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loom/store/state_store.h"

namespace loom {

struct MemoryStateStoreOptions {
  // How many changes `ChangesSince` can look back over (whole commits are
  // dropped, oldest first, beyond it).
  int64_t change_log_limit = StateStore::kDefaultChangeLogLimit;
  // How many bytes (keys plus values) of changes it keeps, likewise.
  int64_t change_log_bytes_limit = StateStore::kDefaultChangeLogBytesLimit;
};

// A `StateStore` in process memory: an ordered map plus a change log, under
// one reader-writer mutex. Not durable (its contents die with the object);
// meant for tests and the simulator, where it behaves exactly like the
// durable stores. Thread-safe.
class MemoryStateStore final : public StateStore {
 public:
  explicit MemoryStateStore(MemoryStateStoreOptions options = {});

  MemoryStateStore(const MemoryStateStore&) = delete;
  MemoryStateStore& operator=(const MemoryStateStore&) = delete;

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
  struct Entry {
    std::string value;
    int64_t version = 0;
  };

  int64_t VersionOf(const std::string& key) const
      ABSL_SHARED_LOCKS_REQUIRED(mu_);
  // Drops the oldest commits from `log_` while it holds more changes or more
  // bytes than the limits.
  void TrimLog() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const MemoryStateStoreOptions options_;

  absl::Mutex mu_;
  std::map<std::string, Entry, std::less<>> data_ ABSL_GUARDED_BY(mu_);
  int64_t revision_ ABSL_GUARDED_BY(mu_) = 0;
  // Every change with a revision above `compacted_revision_`, oldest first.
  std::deque<Change> log_ ABSL_GUARDED_BY(mu_);
  int64_t compacted_revision_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t log_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // keys plus values in `log_`
};

}  // namespace loom
