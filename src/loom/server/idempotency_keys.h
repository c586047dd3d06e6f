#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/core/job_spec.h"
#include "loom/store/state_store.h"

namespace loom {

// Idempotency keys of submissions (`Idempotency-Key`, docs/api.md): which
// job a key made, from which request, and until when it holds. Stored
// under "/requests/<key>" as {"job", "digest", "time"} (older stores: the
// job ID alone). Plain data; the controller's lock guards it and the
// controller does the store writes.

// What identifies a submission's request: SHA-256 of the canonical spec
// (after the server filled in the user), so that a retry that formats the
// same spec differently is the same request and one that changes a field
// is not. A container's `image_digest` (the server's resolution of the
// tag, not part of the request) is left out.
std::string RequestDigest(const JobSpec& spec);

struct IdempotencyRecord {
  JobId job = 0;
  std::string digest;   // empty: unknown (written by an older server)
  absl::Time time;      // when the key was first used
  int64_t version = 0;  // of its store key (0: not known)
};

// The store key of an idempotency key.
std::string IdempotencyStoreKey(const std::string& key);
// The stored value of a record.
std::string IdempotencyStoreValue(const IdempotencyRecord& record);
// Reads a stored value; an older store's plain job ID has no digest and
// the time `fallback_time`. InvalidArgument for anything else.
absl::StatusOr<IdempotencyRecord> ParseIdempotencyValue(
    const KeyValue& kv, absl::Time fallback_time);

class IdempotencyKeys {
 public:
  // Keys are forgotten `lifetime` after their first use (Stripe keeps them
  // 24 h): a later submission with the key makes a new job.
  explicit IdempotencyKeys(absl::Duration lifetime) : lifetime_(lifetime) {}

  // The live record of `key` at `now`, or null (unknown or expired).
  const IdempotencyRecord* Find(const std::string& key, absl::Time now) const;
  // The store version of `key`'s record if it has one that expired at
  // `now` (so that a new submission may replace it), else 0.
  int64_t ExpiredVersion(const std::string& key, absl::Time now) const;
  void Put(const std::string& key, IdempotencyRecord record);
  void Erase(const std::string& key) { records_.erase(key); }
  // Up to `max` keys expired at `now`, with their store versions.
  std::vector<std::pair<std::string, int64_t>> Expired(absl::Time now,
                                                       size_t max) const;
  // Deletes up to `max` expired keys from `store` (in one commit; each only
  // if its record is still the expired one, since a submission may just
  // have replaced it) and forgets them. A store error leaves them for the
  // next call.
  void PurgeExpired(StateStore& store, absl::Time now, size_t max);
  size_t size() const { return records_.size(); }

 private:
  const absl::Duration lifetime_;
  absl::flat_hash_map<std::string, IdempotencyRecord> records_;
};

}  // namespace loom
