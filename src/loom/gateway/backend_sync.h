#pragma once

// Keeps one HAProxy backend's servers equal to a service's replicas through
// the runtime API, never through a reload.
//
// A replica is wanted either serving (in rotation) or draining (on its way
// out: no new requests, the ones in flight finish). The reconciler moves
// each server one step per pass:
//   wanted serving, absent               -> add (ready at once)
//   wanted serving, in drain or maint    -> ready
//   wanted serving, at another address   -> treated as draining; re-added
//                                           in the pass that deletes it
//   wanted draining (or not wanted), ready  -> drain
//   ... in drain or maint, scur == 0 and qcur == 0 -> maint, then delete
//   ... still with sessions              -> wait (listed in `waiting`)
//   wanted draining, absent              -> done
// A server is drained in one pass and deleted in a later one, so that a
// request that reached it between the read and the drain is seen. HAProxy
// itself refuses to delete a server with connections, so a race costs a
// retry, not a request.
//
// `DiffBackend` and `MergeObservation` are pure (no I/O); `ApplyActions`
// and `SyncBackend` talk to HAProxy. Thread-compatible.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/gateway/haproxy_config.h"
#include "loom/gateway/haproxy_runtime.h"

namespace loom::gateway {

struct DesiredServer {
  std::string address;  // "ip:port" or "[ipv6]:port"
  bool serving = true;  // false: draining
};
// By server (replica) name.
using DesiredBackend = std::map<std::string, DesiredServer>;

// A server as HAProxy has it now.
struct ObservedServer {
  std::string name;
  std::string address;  // FormatServerAddress form; "" if unknown
  ServerAdminState admin = ServerAdminState::kReady;
  int64_t sessions = 0;  // scur
  int64_t queued = 0;    // qcur
};

struct SyncAction {
  enum class Kind { kAdd, kReady, kDrain, kMaint, kDelete };
  Kind kind = Kind::kAdd;
  std::string server;
  std::string address;  // kAdd only
  bool operator==(const SyncAction&) const = default;
};
// "add r1 127.0.0.1:8080", "drain r1", "delete r1", ...
std::string DescribeAction(const SyncAction& action);

struct BackendDiff {
  // In the order to apply them: adds and readies first (capacity before
  // removal), then drains, then maint+delete (with a replacement's add
  // right after its delete). Servers in name order within each group.
  std::vector<SyncAction> actions;
  // Servers on their way out that still have sessions or a queue.
  std::vector<std::string> waiting;
  // Wanted servers left alone because their name or address is invalid,
  // one message each.
  std::vector<std::string> rejected;
};

// What to do to bring `observed` to `desired`. Pure.
BackendDiff DiffBackend(const DesiredBackend& desired,
                        const std::vector<ObservedServer>& observed);

// Servers per backend from `show servers state` (admin state, address)
// joined with `show stat` (sessions, queue). Pure.
std::map<std::string, std::vector<ObservedServer>> MergeObservation(
    const std::vector<ServerStateRow>& states,
    const std::vector<StatRow>& stats);

// Reads both and merges them.
absl::StatusOr<std::map<std::string, std::vector<ObservedServer>>>
ObserveBackends(const HaproxyRuntime& runtime);

struct SyncReport {
  std::vector<SyncAction> applied;
  std::vector<std::pair<SyncAction, absl::Status>> failed;
  std::vector<std::string> waiting;   // from the diff
  std::vector<std::string> rejected;  // from the diff
  // OK when nothing failed; else the first failure, with the count.
  absl::Status status() const;
};

// Applies `actions` to `backend` in order, with `options` for adds. After a
// server's action fails, that server's later actions are skipped (no
// delete after a failed maint); other servers go on.
SyncReport ApplyActions(const HaproxyRuntime& runtime, std::string_view backend,
                        const std::vector<SyncAction>& actions,
                        const ServerOptions& options);

// One pass: observe, diff, apply. Errors only when HAProxy cannot be read;
// failed actions are in the report.
absl::StatusOr<SyncReport> SyncBackend(const HaproxyRuntime& runtime,
                                       std::string_view backend,
                                       const DesiredBackend& desired,
                                       const ServerOptions& options);

}  // namespace loom::gateway
