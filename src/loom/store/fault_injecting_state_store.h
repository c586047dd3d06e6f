#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/store/state_store.h"

namespace loom {

// A `StateStore` decorator for testing callers (LevelDB's `EnvWrapper`
// idea): it forwards every call to a target store, except that it can be
// told to fail the next N commits or reads with a given status, and to delay
// every call. Reads are `Get`, `List`, `Revision` and `ChangesSince`.
//
// A failed commit normally changes nothing. With
// `CommitFault::kAfterApply` the commit is applied and then reported as
// failed, which is what a caller sees when a remote store (etcd) commits but
// the reply is lost; callers must cope with that too.
//
// Thread-safe: the fault settings may change while other threads call the
// store. Counters record how many faults were injected.
class FaultInjectingStateStore final : public StateStore {
 public:
  enum class CommitFault { kBeforeApply, kAfterApply };

  // Wraps `target`, which must outlive this object.
  explicit FaultInjectingStateStore(StateStore* target);
  // Wraps and owns `target`.
  explicit FaultInjectingStateStore(std::unique_ptr<StateStore> target);

  FaultInjectingStateStore(const FaultInjectingStateStore&) = delete;
  FaultInjectingStateStore& operator=(const FaultInjectingStateStore&) = delete;

  // The next `n` commits return `status` (which must not be OK); with
  // `kAfterApply` they are applied first. Replaces any earlier setting.
  void FailNextCommits(int n, absl::Status status,
                       CommitFault when = CommitFault::kBeforeApply);
  // The next `n` reads return `status` (which must not be OK).
  void FailNextReads(int n, absl::Status status);
  // Every call first sleeps this long (0: no delay).
  void SetDelay(absl::Duration delay);
  // Clears all faults and the delay.
  void Reset();

  // How many commits and reads have failed by injection so far.
  int64_t injected_commit_failures() const;
  int64_t injected_read_failures() const;

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
  // Sleeps for the delay, then returns the status a read should fail with
  // (OK: no fault), counting it down.
  absl::Status BeforeRead();

  // Constant after construction.
  std::unique_ptr<StateStore> owned_;
  StateStore* const target_;

  mutable absl::Mutex mu_;
  int commits_to_fail_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status commit_status_ ABSL_GUARDED_BY(mu_);
  CommitFault commit_fault_ ABSL_GUARDED_BY(mu_) = CommitFault::kBeforeApply;
  int reads_to_fail_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status read_status_ ABSL_GUARDED_BY(mu_);
  absl::Duration delay_ ABSL_GUARDED_BY(mu_) = absl::ZeroDuration();
  int64_t injected_commit_failures_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t injected_read_failures_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace loom
