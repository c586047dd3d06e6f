#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/store/etcd_client.h"

namespace loom {

struct EtcdLeaderElectionOptions {
  // The campaign key: whoever created it (bound to their lease) leads.
  std::string key = "/loom/leader";
  // This candidate's identity, stored as the key's value (the server's API
  // URL, so that standbys can point clients at the leader).
  std::string value;
  // The lease's time to live: how long a leader that stopped (SIGKILL, a
  // frozen machine, lost network) keeps the key, so the upper bound of a
  // failover's detection. etcd's minimum is 2 s.
  absl::Duration lease_ttl = absl::Seconds(3);
  // How often a standby looks at the key.
  absl::Duration poll = absl::Milliseconds(200);
};

// Leader election on etcd, the way etcd's own `concurrency.Election` and
// Kubernetes' lease locks do it, over `EtcdClient`:
//
//   campaign: grant a lease; Txn(if CREATE(key) == 0 then PUT key=value with
//             the lease); the revision of the winning Txn is the term
//   lead:     keep the lease alive every ttl/3; check the key is still ours
//   lose:     the lease expired (we were silent for a ttl), the key is gone
//             or was re-created, or etcd was unreachable for a ttl
//   resign:   revoke the lease (the key goes with it: a standby takes over
//             at once instead of after the ttl)
//
// The term is what fences the leader's writes (`EtcdStateStore::SetFence`):
// once the key is re-created by another candidate, its create revision
// differs and every write of the old leader is refused by etcd itself.
//
// Thread-safe.
class EtcdLeaderElection {
 public:
  EtcdLeaderElection(EtcdClient* client, EtcdLeaderElectionOptions options);
  // Stops keeping the lease alive and resigns if leading.
  ~EtcdLeaderElection();

  EtcdLeaderElection(const EtcdLeaderElection&) = delete;
  EtcdLeaderElection& operator=(const EtcdLeaderElection&) = delete;

  // Blocks until this candidate leads and returns its term (the key's create
  // revision in etcd), or returns `Cancelled` once `stop` is set. Meanwhile
  // `Leader()` follows the key. Errors talking to etcd are retried.
  absl::StatusOr<int64_t> Campaign(const std::atomic<bool>& stop);

  // After a successful `Campaign`: keeps the lease alive in a thread and
  // calls `on_lost` once (from that thread) when leadership is lost.
  void KeepLeading(std::function<void(const absl::Status&)> on_lost);

  // Revokes the lease (and so the key) if leading. Idempotent.
  void Resign();

  // The value of the key as last seen ("" when there is no leader), and
  // whether this candidate leads.
  std::string Leader() const;
  bool leading() const { return leading_; }

 private:
  absl::StatusOr<int64_t> GrantLease();
  // OK with the lease's remaining TTL in seconds (0: expired).
  absl::StatusOr<int64_t> KeepAlive(int64_t lease);
  void KeepLoop();

  EtcdClient* const client_;
  const EtcdLeaderElectionOptions options_;
  std::atomic<bool> leading_{false};
  std::atomic<bool> stop_{false};
  std::thread keeper_;

  mutable absl::Mutex mu_;
  std::string leader_ ABSL_GUARDED_BY(mu_);
  int64_t lease_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t term_ ABSL_GUARDED_BY(mu_) = 0;
  std::function<void(const absl::Status&)> on_lost_ ABSL_GUARDED_BY(mu_);
  absl::CondVar wake_;
};

}  // namespace loom
