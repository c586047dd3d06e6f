#include "loom/store/memory_state_store.h"

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loom {

MemoryStateStore::MemoryStateStore(MemoryStateStoreOptions options)
    : options_(options) {}

absl::StatusOr<KeyValue> MemoryStateStore::Get(std::string_view key) {
  if (absl::Status s = ValidateKey(key); !s.ok()) return s;
  absl::ReaderMutexLock lock(&mu_);
  auto it = data_.find(key);
  if (it == data_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "key \"", absl::CEscape(std::string(key)), "\" not found"));
  }
  return KeyValue{it->first, it->second.value, it->second.version};
}

absl::StatusOr<std::vector<KeyValue>> MemoryStateStore::List(
    std::string_view prefix, int64_t limit) {
  if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return s;
  if (limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative list limit ", limit));
  }
  std::vector<KeyValue> result;
  absl::ReaderMutexLock lock(&mu_);
  for (auto it = data_.lower_bound(prefix);
       it != data_.end() && HasPrefix(it->first, prefix); ++it) {
    if (limit > 0 && static_cast<int64_t>(result.size()) >= limit) break;
    result.push_back({it->first, it->second.value, it->second.version});
  }
  return result;
}

int64_t MemoryStateStore::VersionOf(const std::string& key) const {
  auto it = data_.find(key);
  return it == data_.end() ? 0 : it->second.version;
}

absl::StatusOr<int64_t> MemoryStateStore::Commit(
    const std::vector<Condition>& conditions,
    const std::vector<Mutation>& mutations) {
  if (absl::Status s = ValidateCommit(conditions, mutations); !s.ok()) {
    return s;
  }
  absl::MutexLock lock(&mu_);
  for (const Condition& c : conditions) {
    int64_t actual = VersionOf(c.key);
    if (!ConditionHolds(c, actual)) return ConditionFailedError(c, actual);
  }
  const int64_t revision = revision_ + 1;
  bool changed = false;
  for (const Mutation& m : mutations) {
    if (m.kind == Mutation::kPut) {
      data_.insert_or_assign(m.key, Entry{m.value, revision});
      log_.push_back({Mutation::kPut, m.key, m.value, revision});
      log_bytes_ += static_cast<int64_t>(m.key.size() + m.value.size());
      changed = true;
    } else if (data_.erase(m.key) > 0) {
      log_.push_back({Mutation::kDelete, m.key, {}, revision});
      log_bytes_ += static_cast<int64_t>(m.key.size());
      changed = true;
    }
  }
  if (!changed) return revision_;
  revision_ = revision;
  TrimLog();
  return revision_;
}

void MemoryStateStore::TrimLog() {
  while (static_cast<int64_t>(log_.size()) > options_.change_log_limit ||
         log_bytes_ > options_.change_log_bytes_limit) {
    const int64_t oldest = log_.front().revision;
    while (!log_.empty() && log_.front().revision == oldest) {
      log_bytes_ -= static_cast<int64_t>(log_.front().key.size() +
                                         log_.front().value.size());
      log_.pop_front();
    }
    compacted_revision_ = oldest;
  }
}

absl::StatusOr<int64_t> MemoryStateStore::Revision() {
  absl::ReaderMutexLock lock(&mu_);
  return revision_;
}

absl::StatusOr<std::vector<Change>> MemoryStateStore::ChangesSince(
    std::string_view prefix, int64_t revision, int64_t limit) {
  if (absl::Status s = ValidatePrefix(prefix); !s.ok()) return s;
  if (revision < 0 || limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("negative revision ", revision, " or limit ", limit));
  }
  std::vector<Change> result;
  absl::ReaderMutexLock lock(&mu_);
  if (revision < compacted_revision_) {
    return absl::OutOfRangeError(absl::StrCat(
        "changes after revision ", revision,
        " are no longer in the change log (it starts after revision ",
        compacted_revision_, "); re-list"));
  }
  // The log is sorted by revision: skip to the first change after
  // `revision`.
  auto it = std::upper_bound(
      log_.begin(), log_.end(), revision,
      [](int64_t r, const Change& c) { return r < c.revision; });
  for (; it != log_.end(); ++it) {
    if (limit > 0 && static_cast<int64_t>(result.size()) >= limit &&
        it->revision != result.back().revision) {
      break;
    }
    if (HasPrefix(it->key, prefix)) result.push_back(*it);
  }
  return result;
}

}  // namespace loom
