#pragma once

// Who may call the agent API (docs/security.md, "Agents fail closed").
//
// The agent's task routes (`POST /v1/tasks`, stop, logs, faults, ...) run
// programs, as root when the agent is root. Only the loom server the agent
// registered with may call them: it presents its agent key (`Authorization:
// Bearer <key>`), which the agent learns from its registration reply and
// keeps in `<node dir>/agent_key`. Until it knows a key, the agent answers
// 503 to every such route: it fails closed. The one exception is an agent
// started with `--insecure` (tests on loopback): while it knows no key, it
// serves anyone; once a key is known it requires it like any other agent.
// `--insecure` is refused on addresses that are not loopback.

#include <atomic>
#include <map>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"

struct sockaddr;

namespace loom {

// What `ApiGuard::Check` decided about one request.
struct ApiVerdict {
  bool allowed = false;
  // When not allowed: the HTTP status (401 or 503), the error code
  // ("unauthenticated", "unavailable") and a message for people.
  int status = 0;
  std::string code;
  std::string message;
};

// The keys the agent's server presents, and the decision for each request.
//
// Thread-safety: thread-safe.
class ApiGuard {
 public:
  // `insecure`: serve requests without a key while no key is known
  // (`--insecure`).
  explicit ApiGuard(bool insecure) : insecure_(insecure) {}

  // The agent has a join token or a credential, so that registering will
  // teach it its server's key (this only changes the message of a 503).
  void SetCanRegister(bool can) { can_register_ = can; }

  // Sets node `node`'s key (the server presents one per node; a fleet
  // emulator serves thousands), replacing the one it had: a key the server
  // rotated (a re-join) is dead at once. Returns false when it was that
  // node's key already. Only the key's SHA-256 is kept.
  bool SetKey(std::string_view node, std::string_view key);

  // Whether a key is known.
  bool HasKey() const;

  // For the agent's log while no key is known: what the API does.
  std::string Describe() const;

  // Decides on a request whose `Authorization` header is `authorization`
  // ("" when it has none). Looking up what a request presents costs one
  // hash whatever the number of keys, and its timing tells nothing about
  // the keys themselves.
  ApiVerdict Check(std::string_view authorization) const;

  // Decides on a peer's request for dataset version `version` of node
  // `node` (docs/datasets.md, "Peers"): it must present the token the
  // server derived from that node's key (`DatasetPeerToken`). While no key
  // is known, as `Check`: anyone with `--insecure`, else 503.
  ApiVerdict CheckDatasetPeer(std::string_view node, std::string_view version,
                              std::string_view authorization) const;

 private:
  // Constant after construction.
  const bool insecure_;

  std::atomic<bool> can_register_{false};

  mutable absl::Mutex mu_;
  // Digest -> how many nodes have it, and each node's digest.
  std::map<std::string, int> digests_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string, std::less<>> by_node_ ABSL_GUARDED_BY(mu_);
};

// Whether `sa` is a loopback address (127.0.0.0/8, ::1, or 127.x mapped
// into IPv6).
bool IsLoopbackAddress(const sockaddr* sa);

// True when every address `host` resolves to is a loopback address
// (127.0.0.0/8, ::1); false when it resolves to any other address or not at
// all.
bool IsLoopbackHost(const std::string& host);

// `InvalidArgument` (naming the flag) when `--insecure` is asked for on a
// listen address that is not loopback; OK otherwise.
absl::Status CheckInsecureListen(bool insecure, const std::string& host);

}  // namespace loom
