#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/store/etcd_client.h"
#include "loom/store/state_store.h"

namespace loom {

struct EtcdStateStoreOptions {
  EtcdClientOptions client;
  // Every key of the store lives under this prefix in etcd, so that other
  // data (the leader key, another loom cluster, a test) can share the etcd
  // cluster without showing up in `List("")`.
  std::string key_prefix = "/loom/data";
  // Longest wait of `ChangesSince` for etcd's history (a watch stream).
  absl::Duration watch_timeout = absl::Seconds(10);
};

// A `StateStore` on etcd v3 (through its JSON gateway, see `EtcdClient`):
// the backend of a highly available controller (docs/ha.md).
//
// The mapping (docs/store.md has the details):
//   Get           -> Range(key)
//   List          -> Range([prefix, PrefixEnd(prefix)), limit)
//   Commit        -> Txn: compares on MOD (exact version) or VERSION (must
//                    (not) exist); success = the puts and deletes; failure =
//                    a Range of each condition's key, to name the one that
//                    failed and its actual version
//   Revision      -> the header revision of a count-only Range
//   ChangesSince  -> a Watch of the whole key space from the revision after,
//                    read until it reaches the current revision, filtered
//                    to the prefix; a compacted start is `OutOfRange`
//
// Revisions: etcd counts from 1 for an empty cluster, the contract from 0, so
// every store revision and version is etcd's minus one. The store revision
// is etcd's, so it grows by one per commit only while loom is etcd's only
// writer; leader election and other clients make it skip numbers.
//
// The change log's length is etcd's history, bounded by etcd's compaction
// (`--auto-compaction-retention`), not by a count of changes.
//
// Fencing (`SetFence`): once set, every commit also requires that a given key
// still exists with a given create revision (the leader key of this
// server's term), so a deposed leader can write nothing.
//
// Thread-safe.
class EtcdStateStore final : public StateStore {
 public:
  // Connects and checks that etcd answers (`Unavailable` naming the
  // endpoints if none does). `InvalidArgument` for bad endpoints or an empty
  // key prefix.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<EtcdStateStore>> Connect(
      EtcdStateStoreOptions options);

  // From now on every `Commit` requires that etcd key `key` (a raw etcd key,
  // not under the store's prefix) exists with create revision
  // `create_revision` (etcd's). A commit refused for this fails with
  // `FailedPrecondition` ("fenced: ...") and calls `on_fenced` once.
  void SetFence(std::string key, int64_t create_revision,
                std::function<void(const absl::Status&)> on_fenced);

  absl::StatusOr<KeyValue> Get(std::string_view key) override;
  absl::StatusOr<std::vector<KeyValue>> List(std::string_view prefix,
                                             int64_t limit) override;
  absl::StatusOr<int64_t> Commit(
      const std::vector<Condition>& conditions,
      const std::vector<Mutation>& mutations) override;
  absl::StatusOr<int64_t> Revision() override;
  absl::StatusOr<std::vector<Change>> ChangesSince(std::string_view prefix,
                                                   int64_t revision,
                                                   int64_t limit) override;

  EtcdClient& client() { return *client_; }

 private:
  EtcdStateStore(EtcdStateStoreOptions options,
                 std::unique_ptr<EtcdClient> client);

  std::string Full(std::string_view key) const;
  // A KeyValue from a gateway `kv` object (key without the store prefix).
  absl::StatusOr<KeyValue> FromKv(const nlohmann::json& kv) const;

  const EtcdStateStoreOptions options_;
  std::unique_ptr<EtcdClient> client_;

  absl::Mutex mu_;
  std::string fence_key_ ABSL_GUARDED_BY(mu_);
  int64_t fence_revision_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(const absl::Status&)> on_fenced_ ABSL_GUARDED_BY(mu_);
  bool fenced_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace loom
