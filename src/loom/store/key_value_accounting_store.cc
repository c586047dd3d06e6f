#include "loom/store/key_value_accounting_store.h"

#include <algorithm>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

// The names below carry an `Acct` prefix because unity builds compile this
// file in one translation unit with the store's other sources.

// Digits of the id in a key: enough for any positive int64_t.
constexpr size_t kAcctIdDigits = 20;

// Keys plus values per commit, besides the count: etcd also refuses a
// request over `--max-request-bytes` (1.5 MiB by default). A single larger
// job still goes alone.
constexpr size_t kAcctMaxBytesPerCommit = 512 * 1024;

std::string AcctEncodeJob(const FinishedJob& job) {
  nlohmann::json value = nlohmann::json::object();
  value["id"] = job.id;
  value["user"] = job.user;
  value["project"] = job.project;
  value["state"] = job.state;
  value["submit_us"] = absl::ToUnixMicros(job.submit_time);
  value["end_us"] = absl::ToUnixMicros(job.end_time);
  value["document"] = job.document;
  // `replace`: invalid UTF-8 becomes U+FFFD instead of an exception.
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool AcctIntField(const nlohmann::json& object, const char* name,
                  int64_t* out) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_number_integer()) return false;
  if (it->is_number_unsigned() &&
      it->get<uint64_t>() >
          static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
    return false;
  }
  *out = it->get<int64_t>();
  return true;
}

bool AcctStringField(const nlohmann::json& object, const char* name,
                     std::string* out) {
  auto it = object.find(name);
  if (it == object.end() || !it->is_string()) return false;
  *out = it->get_ref<const std::string&>();
  return true;
}

}  // namespace

KeyValueAccountingStore::KeyValueAccountingStore(StateStore* store,
                                                 std::string prefix)
    : store_(store), prefix_(std::move(prefix)) {}

std::string KeyValueAccountingStore::KeyOf(int64_t id) const {
  return absl::StrFormat("%s%020d", prefix_, id);
}

std::optional<FinishedJob> KeyValueAccountingStore::Decode(
    const KeyValue& kv) const {
  if (!HasPrefix(kv.key, prefix_)) return std::nullopt;
  const std::string_view digits =
      std::string_view(kv.key).substr(prefix_.size());
  if (digits.size() != kAcctIdDigits ||
      !std::all_of(digits.begin(), digits.end(),
                   [](char c) { return absl::ascii_isdigit(c); })) {
    return std::nullopt;
  }
  int64_t key_id = 0;
  if (!absl::SimpleAtoi(absl::string_view(digits.data(), digits.size()),
                        &key_id)) {
    return std::nullopt;  // over int64_t
  }
  const nlohmann::json value =
      nlohmann::json::parse(kv.value, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded() || !value.is_object()) return std::nullopt;
  FinishedJob job;
  int64_t submit_us = 0;
  int64_t end_us = 0;
  if (!AcctIntField(value, "id", &job.id) || job.id != key_id ||
      !AcctStringField(value, "user", &job.user) ||
      !AcctStringField(value, "project", &job.project) ||
      !AcctStringField(value, "state", &job.state) ||
      !AcctIntField(value, "submit_us", &submit_us) ||
      !AcctIntField(value, "end_us", &end_us) ||
      !AcctStringField(value, "document", &job.document)) {
    return std::nullopt;
  }
  job.submit_time = absl::FromUnixMicros(submit_us);
  job.end_time = absl::FromUnixMicros(end_us);
  return job;
}

absl::Status KeyValueAccountingStore::Add(
    const std::vector<FinishedJob>& jobs) {
  for (const FinishedJob& job : jobs) {
    if (job.id < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("accounting: job id ", job.id, " is below 1"));
    }
  }
  // The last of each id wins, and one commit may not put a key twice.
  std::map<int64_t, const FinishedJob*> latest;
  for (const FinishedJob& job : jobs) latest[job.id] = &job;

  std::vector<Mutation> batch;
  size_t batch_bytes = 0;
  int64_t first_id = 0;  // of the batch, for the error message
  int64_t last_id = 0;
  auto flush = [&]() -> absl::Status {
    if (batch.empty()) return absl::OkStatus();
    absl::StatusOr<int64_t> committed = store_->Commit({}, batch);
    if (!committed.ok()) {
      return absl::Status(
          committed.status().code(),
          absl::StrCat("accounting: storing jobs ", first_id, " to ", last_id,
                       ": ", std::string(committed.status().message())));
    }
    batch.clear();
    batch_bytes = 0;
    return absl::OkStatus();
  };
  for (const auto& [id, job] : latest) {
    std::string key = KeyOf(id);
    std::string value = AcctEncodeJob(*job);
    const size_t bytes = key.size() + value.size();
    if (!batch.empty() && (batch.size() >= kMaxPutsPerCommit ||
                           batch_bytes + bytes > kAcctMaxBytesPerCommit)) {
      if (absl::Status s = flush(); !s.ok()) return s;
    }
    if (batch.empty()) first_id = id;
    last_id = id;
    batch.push_back(Mutation::Put(std::move(key), std::move(value)));
    batch_bytes += bytes;
  }
  return flush();
}

absl::StatusOr<std::vector<FinishedJob>> KeyValueAccountingStore::Find(
    const FinishedJobQuery& query) {
  if (query.limit < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("accounting: negative limit ", query.limit));
  }
  // The ids sorted, for binary search (and, when read one by one, for id
  // order); the other filters go to `FinishedJobMatches`.
  std::vector<int64_t> ids = query.ids;
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  FinishedJobQuery filters = query;
  filters.ids.clear();

  std::vector<FinishedJob> result;
  auto full = [&] {
    return query.limit > 0 &&
           static_cast<int64_t>(result.size()) >= query.limit;
  };
  if (!ids.empty() && ids.size() <= kMaxIdsToGet) {
    for (int64_t id : ids) {
      if (full()) break;
      if (id < 1) continue;
      absl::StatusOr<KeyValue> kv = store_->Get(KeyOf(id));
      if (absl::IsNotFound(kv.status())) continue;
      if (!kv.ok()) return kv.status();
      std::optional<FinishedJob> job = Decode(*kv);
      if (job.has_value() && FinishedJobMatches(filters, *job)) {
        result.push_back(*std::move(job));
      }
    }
    return result;
  }
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(prefix_);
  if (!kvs.ok()) return kvs.status();
  for (const KeyValue& kv : *kvs) {
    if (full()) break;
    std::optional<FinishedJob> job = Decode(kv);
    if (!job.has_value()) continue;
    if (!ids.empty() && !std::binary_search(ids.begin(), ids.end(), job->id)) {
      continue;
    }
    if (FinishedJobMatches(filters, *job)) result.push_back(*std::move(job));
  }
  return result;
}

absl::StatusOr<std::optional<FinishedJob>> KeyValueAccountingStore::Get(
    int64_t id) {
  if (id < 1) return std::optional<FinishedJob>();
  absl::StatusOr<KeyValue> kv = store_->Get(KeyOf(id));
  if (absl::IsNotFound(kv.status())) return std::optional<FinishedJob>();
  if (!kv.ok()) return kv.status();
  return Decode(*kv);
}

absl::StatusOr<int64_t> KeyValueAccountingStore::Count() {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(prefix_);
  if (!kvs.ok()) return kvs.status();
  int64_t count = 0;
  for (const KeyValue& kv : *kvs) {
    if (Decode(kv).has_value()) ++count;
  }
  return count;
}

}  // namespace loom
