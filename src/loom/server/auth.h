#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
  int64_t run = 0;                    // kJob: its run (restart count)
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
  // kJoin: single-use. Without `nodes`, used up by its first join; with
  // them, each named node may join with it once.
  bool once = false;
  bool used = false;
  bool revoked = false;
  std::vector<std::string> nodes;   // kJoin: the only nodes it may join
  std::vector<std::string> joined;  // kJoin: the nodes that joined with it
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
  // kJoin: usable by any number of nodes (default: single-use).
  bool reusable = false;
  // kJoin: may join only these nodes (each once, unless `reusable`).
  std::vector<std::string> nodes;
  std::string description;
};

// A node that joined: its new credential (a kNode token, shown once) and
// that token's id.
struct JoinedNode {
  std::string credential;
  std::string credential_id;
};

// Whether run `run` of job `job` is that job's current run and the job has
// not ended: OK, or an error saying why not (never Internal).
using JobRunCheck = std::function<absl::Status(int64_t job, int64_t run)>;

// Bearer tokens, stored hashed in the state store, in the style of
// Kubernetes' bootstrap tokens: "loom.<id>.<secret>", where the 16-hex-digit
// id finds the record and the 64-hex-digit secret is checked against its
// SHA-256 in constant time. A secret is returned once, at creation, and is
// never stored, logged or shown again.
//
// Besides stored tokens, two kinds are derived from the cluster's secret key
// (`secret_key`, kept in a 0600 file outside the store:
// server/server_secrets.h), so that nothing secret is stored per job or per
// agent:
// - a job's token "loomjob.<job>.<run>.<HMAC(key, job:<job>:<run>)>" (it may
//   report its own checkpoints), accepted only while `run` is the job's
//   current run and the job has not ended (`SetJobRunCheck`);
// - the key the server presents to node N's agent,
//   HMAC(key, "agent:" N ":" <id of N's live credential>): new with every
//   join (the credential id is random), gone when the credential is revoked.
//
// With `authoritative` (the leader, or the only server) every token is held
// in memory, loaded at `Load`; a standby reads the store on every check, so
// that revocations made by the leader hold at once. Thread-safe.
class TokenRegistry {
 public:
  // `secret_key`: 64 hex digits (`NewSecretKey`), the same on every server
  // of a cluster.
  TokenRegistry(StateStore* store, bool authoritative, std::string secret_key)
      : store_(store),
        authoritative_(authoritative),
        secret_key_(std::move(secret_key)) {}

  // A fresh secret key: 32 random bytes as 64 hex digits.
  static std::string NewSecretKey();

  // Loads, when authoritative, every token.
  absl::Status Load(absl::Time now);
  // A standby that became the leader: from now on tokens are held in memory.
  absl::Status BecomeAuthoritative(absl::Time now);

  // Sets the check of job tokens' runs (the controller's, or the standby's
  // view of the store). Without one, job tokens are refused.
  void SetJobRunCheck(JobRunCheck check);

  // If no admin token exists, creates one for user `user` (the Unix user
  // that runs the server, so that the admin's jobs run as that user) and
  // returns its secret token; otherwise nullopt.
  absl::StatusOr<std::optional<std::string>> BootstrapAdmin(
      absl::Time now, const std::string& user = "admin");

  // Makes a token; returns its record and the token itself (shown once).
  // InvalidArgument naming the field for a request that is not valid.
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

  // A node joins with a join token (already authenticated as `join`): only
  // a node without a live credential (FailedPrecondition otherwise: an
  // admin revokes the old one first, `loom token revoke --node`), only a
  // node the token names if it names any (PermissionDenied). Marks the
  // token used as `TokenRecord::once` says, and returns the node's new
  // credential. Serialised: of two joins of one node, one wins.
  absl::StatusOr<JoinedNode> JoinNode(const Principal& join,
                                      const std::string& node, absl::Time now);
  // Undoes a `JoinNode` whose registration failed afterwards: revokes the
  // credential and gives the join token its use back.
  absl::Status UndoJoin(const Principal& join, const std::string& node,
                        const JoinedNode& joined, absl::Time now);

  // The token a job's tasks get (LOOM_TOKEN) for run `run` (its restart
  // count), and the key the server presents to node `node`'s agent ("" when
  // the node has no live credential: it gets no key).
  std::string JobToken(int64_t job, int64_t run) const;
  std::string AgentKey(const std::string& node) const;

 private:
  absl::Status LoadFrom(absl::Time now, bool load_tokens);
  absl::StatusOr<TokenRecord> Find(const std::string& id) const;
  absl::Status Save(const TokenRecord& t);
  // The live (not revoked) credential of `node`, if any.
  std::optional<TokenRecord> LiveCredential(const std::string& node) const;

  StateStore* const store_;
  std::atomic<bool> authoritative_;
  const std::string secret_key_;
  absl::Mutex join_mu_;  // held through a whole `JoinNode` / `UndoJoin`
  mutable absl::Mutex mu_;
  std::map<std::string, TokenRecord> tokens_ ABSL_GUARDED_BY(mu_);
  JobRunCheck job_run_check_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
