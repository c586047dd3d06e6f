#include "loom/server/idempotency_keys.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/common/digest.h"
#include "loom/server/job_record.h"
#include "nlohmann/json.hpp"

namespace loom {

std::string RequestDigest(const JobSpec& spec) {
  if (spec.container.has_value() && !spec.container->image_digest.empty()) {
    // The digest is the server's answer, not the request: a retry that
    // resolves the tag again (to the same or a newer digest) is the same
    // request.
    JobSpec request = spec;
    request.container->image_digest.clear();
    return Sha256Hex(JobSpecToJson(request));
  }
  return Sha256Hex(JobSpecToJson(spec));
}

std::string IdempotencyStoreKey(const std::string& key) {
  return absl::StrCat("/requests/", key);
}

std::string IdempotencyStoreValue(const IdempotencyRecord& record) {
  return nlohmann::json{{"job", record.job},
                        {"digest", record.digest},
                        {"time", FormatTimestamp(record.time)}}
      .dump();
}

absl::StatusOr<IdempotencyRecord> ParseIdempotencyValue(
    const KeyValue& kv, absl::Time fallback_time) {
  IdempotencyRecord r;
  r.version = kv.version;
  if (absl::SimpleAtoi(kv.value, &r.job) && r.job > 0) {
    r.time = fallback_time;  // an older server's record: the job ID alone
    return r;
  }
  nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
  if (!j.is_object() || !j.contains("job") || !j["job"].is_number_integer() ||
      !j.contains("time") || !j["time"].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kv.key, ": not an idempotency record"));
  }
  r.job = j["job"].get<JobId>();
  if (j.contains("digest") && j["digest"].is_string()) {
    r.digest = j["digest"].get<std::string>();
  }
  absl::StatusOr<absl::Time> t = ParseTimestamp(j["time"].get<std::string>());
  if (!t.ok()) return t.status();
  r.time = *t;
  return r;
}

const IdempotencyRecord* IdempotencyKeys::Find(const std::string& key,
                                               absl::Time now) const {
  auto it = records_.find(key);
  if (it == records_.end() || now - it->second.time >= lifetime_) {
    return nullptr;
  }
  return &it->second;
}

int64_t IdempotencyKeys::ExpiredVersion(const std::string& key,
                                        absl::Time now) const {
  auto it = records_.find(key);
  if (it == records_.end() || now - it->second.time < lifetime_) return 0;
  return it->second.version;
}

void IdempotencyKeys::Put(const std::string& key, IdempotencyRecord record) {
  records_[key] = std::move(record);
}

std::vector<std::pair<std::string, int64_t>> IdempotencyKeys::Expired(
    absl::Time now, size_t max) const {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const auto& [key, r] : records_) {
    if (out.size() >= max) break;
    if (now - r.time >= lifetime_) out.emplace_back(key, r.version);
  }
  return out;
}

void IdempotencyKeys::PurgeExpired(StateStore& store, absl::Time now,
                                   size_t max) {
  const std::vector<std::pair<std::string, int64_t>> expired =
      Expired(now, max);
  if (expired.empty()) return;
  auto commit = [&](size_t begin, size_t end) {
    std::vector<Condition> conditions;
    std::vector<Mutation> deletes;
    for (size_t i = begin; i < end; ++i) {
      const std::string key = IdempotencyStoreKey(expired[i].first);
      conditions.push_back({key, expired[i].second > 0
                                     ? expired[i].second
                                     : Condition::kMustExist});
      deletes.push_back(Mutation::Delete(key));
    }
    return store.Commit(conditions, deletes).status();
  };
  absl::Status st = commit(0, expired.size());
  if (st.ok()) {
    for (const auto& [key, version] : expired) Erase(key);
    return;
  }
  if (st.code() != absl::StatusCode::kFailedPrecondition) return;  // later
  for (size_t i = 0; i < expired.size(); ++i) {  // one by one, rarely
    absl::Status one = commit(i, i + 1);
    if (one.ok() || one.code() == absl::StatusCode::kFailedPrecondition) {
      Erase(expired[i].first);
    }
  }
}

}  // namespace loom
