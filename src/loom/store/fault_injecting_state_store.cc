#include "loom/store/fault_injecting_state_store.h"

#include <utility>

#include "absl/time/clock.h"

namespace loom {

FaultInjectingStateStore::FaultInjectingStateStore(StateStore* target)
    : target_(target) {}

FaultInjectingStateStore::FaultInjectingStateStore(
    std::unique_ptr<StateStore> target)
    : owned_(std::move(target)), target_(owned_.get()) {}

void FaultInjectingStateStore::FailNextCommits(int n, absl::Status status,
                                               CommitFault when) {
  absl::MutexLock lock(&mu_);
  commits_to_fail_ = status.ok() ? 0 : n;
  commit_status_ = std::move(status);
  commit_fault_ = when;
}

void FaultInjectingStateStore::FailNextReads(int n, absl::Status status) {
  absl::MutexLock lock(&mu_);
  reads_to_fail_ = status.ok() ? 0 : n;
  read_status_ = std::move(status);
}

void FaultInjectingStateStore::SetDelay(absl::Duration delay) {
  absl::MutexLock lock(&mu_);
  delay_ = delay;
}

void FaultInjectingStateStore::Reset() {
  absl::MutexLock lock(&mu_);
  commits_to_fail_ = 0;
  reads_to_fail_ = 0;
  delay_ = absl::ZeroDuration();
}

int64_t FaultInjectingStateStore::injected_commit_failures() const {
  absl::MutexLock lock(&mu_);
  return injected_commit_failures_;
}

int64_t FaultInjectingStateStore::injected_read_failures() const {
  absl::MutexLock lock(&mu_);
  return injected_read_failures_;
}

absl::Status FaultInjectingStateStore::BeforeRead() {
  absl::Duration delay;
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    delay = delay_;
    if (reads_to_fail_ > 0) {
      --reads_to_fail_;
      ++injected_read_failures_;
      status = read_status_;
    }
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  return status;
}

absl::StatusOr<KeyValue> FaultInjectingStateStore::Get(std::string_view key) {
  if (absl::Status s = BeforeRead(); !s.ok()) return s;
  return target_->Get(key);
}

absl::StatusOr<std::vector<KeyValue>> FaultInjectingStateStore::List(
    std::string_view prefix, int64_t limit) {
  if (absl::Status s = BeforeRead(); !s.ok()) return s;
  return target_->List(prefix, limit);
}

absl::StatusOr<int64_t> FaultInjectingStateStore::Revision() {
  if (absl::Status s = BeforeRead(); !s.ok()) return s;
  return target_->Revision();
}

absl::StatusOr<std::vector<Change>> FaultInjectingStateStore::ChangesSince(
    std::string_view prefix, int64_t revision, int64_t limit) {
  if (absl::Status s = BeforeRead(); !s.ok()) return s;
  return target_->ChangesSince(prefix, revision, limit);
}

absl::StatusOr<int64_t> FaultInjectingStateStore::Commit(
    const std::vector<Condition>& conditions,
    const std::vector<Mutation>& mutations) {
  absl::Duration delay;
  absl::Status fault;
  CommitFault when = CommitFault::kBeforeApply;
  {
    absl::MutexLock lock(&mu_);
    delay = delay_;
    if (commits_to_fail_ > 0) {
      --commits_to_fail_;
      ++injected_commit_failures_;
      fault = commit_status_;
      when = commit_fault_;
    }
  }
  if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
  if (fault.ok()) return target_->Commit(conditions, mutations);
  if (when == CommitFault::kAfterApply) {
    // The outcome of the real commit is deliberately hidden from the caller.
    (void)target_->Commit(conditions, mutations);
  }
  return fault;
}

}  // namespace loom
