#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/common/digest.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// Who may do what (docs/security.md).
enum class Role {
  kAdmin,     // everything
  kOperator,  // a user's rights plus nodes, drain, chaos, quotas
  kUser,      // submits to its projects; sees, cancels, reads logs of its jobs
  kNode,      // an agent's per-node credential: the agent protocol, its node
  kJoin,      // a bootstrap token: registers new nodes (and nothing else)
  kJob,       // a running job's own token: reports its checkpoints
};

std::string_view RoleName(Role role);
absl::StatusOr<Role> ParseRole(std::string_view name);

// The authenticated caller of a request.
struct Principal {
  std::string token_id;
  std::string user;  // user name (admin, operator, user); node name (node)
  Role role = Role::kUser;
  std::vector<std::string> projects;  // a user's projects; empty: none
  int64_t job = 0;                    // kJob: the job
  bool admin() const { return role == Role::kAdmin; }
  bool operator_or_admin() const {
    return role == Role::kAdmin || role == Role::kOperator;
  }
  bool InProject(const std::string& project) const;
};

// A token as stored (`/auth/tokens/<id>`): the secret only as its SHA-256.
struct TokenRecord {
  std::string id;
  Role role = Role::kUser;
  std::string user;                   // kNode: the node's name
  std::vector<std::string> projects;  // kUser/kOperator
  std::string secret_sha256;          // hex
  absl::Time created = absl::InfinitePast();
  std::optional<absl::Time> expires;
  bool once = false;  // kJoin: redeemable once
  bool used = false;
  bool revoked = false;
  std::string description;
};

nlohmann::json TokenRecordToJson(const TokenRecord& t, bool with_hash);
absl::StatusOr<TokenRecord> TokenRecordFromJson(const nlohmann::json& j);

// What `TokenRegistry::Create` is asked for.
struct TokenRequest {
  Role role = Role::kUser;
  std::string user;
  std::vector<std::string> projects;
  absl::Duration ttl = absl::ZeroDuration();  // zero: no expiry
  bool once = false;
  std::string description;
};

// Bearer tokens, stored hashed in the state store, in the style of
// Kubernetes' bootstrap tokens: "loom.<id>.<secret>", where the 16-hex-digit
// id finds the record and the 64-hex-digit secret is checked against its
// SHA-256 in constant time. A secret is returned once, at creation, and is
// never stored, logged or shown again.
//
// Besides stored tokens, two kinds are derived from a cluster secret (32
// random bytes at `/auth/cluster-secret`, made once), so that nothing needs
// storing per job or per agent: a job's token "loomjob.<id>.<HMAC>" (it may
// report its own checkpoints) and the key the server presents to an agent
// ("HMAC(secret, agent:<node>)", `AgentKey`).
//
// With `authoritative` (the leader, or the only server) every token is held
// in memory, loaded at `Load`; a standby reads the store on every check, so
// that revocations made by the leader hold at once. Thread-safe.
class TokenRegistry {
 public:
  TokenRegistry(StateStore* store, bool authoritative)
      : store_(store), authoritative_(authoritative) {}

  // Loads the cluster secret (creating it if missing) and, when
  // authoritative, every token.
  absl::Status Load(absl::Time now);
  // A standby that became the leader: from now on tokens are held in memory.
  absl::Status BecomeAuthoritative(absl::Time now);

  // If no admin token exists, creates one for user `user` (the Unix user
  // that runs the server, so that the admin's jobs run as that user) and
  // returns its secret token; otherwise nullopt.
  absl::StatusOr<std::optional<std::string>> BootstrapAdmin(
      absl::Time now, const std::string& user = "admin");

  // Makes a token; returns its record and the token itself (shown once).
  absl::StatusOr<std::pair<TokenRecord, std::string>> Create(
      const TokenRequest& request, absl::Time now);
  // Revokes a token by id. NotFound if there is none.
  absl::StatusOr<TokenRecord> Revoke(const std::string& id, absl::Time now);
  // Revokes node `node`'s credential(s). NotFound if it has none.
  absl::Status RevokeNode(const std::string& node, absl::Time now);
  std::vector<TokenRecord> List() const;

  // The caller of an `Authorization` header value ("Bearer <token>").
  // `Unauthenticated` with a reason that never repeats the token.
  absl::StatusOr<Principal> Authenticate(std::string_view authorization,
                                         absl::Time now) const;

  // A node joins with a join token (already authenticated as `join`):
  // revokes the node's earlier credentials, marks a one-time token used,
  // and returns the new node credential (a token of role kNode).
  absl::StatusOr<std::string> JoinNode(const Principal& join,
                                       const std::string& node, absl::Time now);

  // The token a job's tasks get (LOOM_TOKEN), and the key the server
  // presents to node `node`'s agent.
  std::string JobToken(int64_t job) const;
  std::string AgentKey(const std::string& node) const;

 private:
  absl::Status LoadFrom(absl::Time now, bool load_tokens);
  absl::StatusOr<TokenRecord> Find(const std::string& id) const;
  absl::Status Save(const TokenRecord& t);

  StateStore* const store_;
  std::atomic<bool> authoritative_;
  mutable absl::Mutex mu_;
  std::string cluster_secret_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, TokenRecord> tokens_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
