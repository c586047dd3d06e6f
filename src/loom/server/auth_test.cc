#include "loom/server/auth.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

absl::Time T(double s) {
  return absl::FromUnixSeconds(1'800'000'000) + absl::Seconds(s);
}

class TokenRegistryTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(auth_.Load(T(0)).ok()); }
  std::string Make(TokenRequest r) {
    auto made = auth_.Create(r, T(0));
    EXPECT_TRUE(made.ok()) << made.status();
    return made.ok() ? made->second : "";
  }
  absl::StatusOr<Principal> Check(const std::string& token, double t = 1) {
    return auth_.Authenticate("Bearer " + token, T(t));
  }

  // A node joins with a fresh single-use join token.
  absl::StatusOr<JoinedNode> Join(const std::string& node, double t = 2) {
    absl::StatusOr<Principal> j = Check(Make({.role = Role::kJoin}));
    if (!j.ok()) return j.status();
    return auth_.JoinNode(*j, node, T(t));
  }

  MemoryStateStore store_;
  const std::string key_ = TokenRegistry::NewSecretKey();
  TokenRegistry auth_{&store_, /*authoritative=*/true, key_};
};

TEST_F(TokenRegistryTest, TokensAuthenticateAndAreStoredHashed) {
  const std::string alice =
      Make({.role = Role::kUser, .user = "alice", .projects = {"search"}});
  ASSERT_THAT(alice, ::testing::StartsWith("loom."));
  absl::StatusOr<Principal> p = Check(alice);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->user, "alice");
  EXPECT_EQ(p->role, Role::kUser);
  EXPECT_TRUE(p->InProject("search"));
  EXPECT_FALSE(p->InProject("research"));
  // The secret is nowhere in the store: only its SHA-256.
  const std::string secret = alice.substr(alice.rfind('.') + 1);
  absl::StatusOr<std::vector<KeyValue>> all = store_.List("");
  ASSERT_TRUE(all.ok());
  for (const KeyValue& kv : *all) {
    EXPECT_THAT(kv.value, Not(HasSubstr(secret))) << kv.key;
  }
  // Wrong secret, unknown id, garbage, no "Bearer": refused, and the token
  // is never repeated in the error.
  std::string wrong = alice;
  wrong.back() = wrong.back() == '0' ? '1' : '0';
  for (const std::string& bad :
       {wrong, std::string("loom.0123456789abcdef.") + std::string(64, '0'),
        std::string("garbage"), std::string("loom..")}) {
    absl::StatusOr<Principal> r = Check(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
    EXPECT_THAT(r.status().message(), Not(HasSubstr(secret)));
  }
  EXPECT_EQ(auth_.Authenticate(alice, T(1)).status().code(),
            absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_.Authenticate("", T(1)).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(TokenRegistryTest, RevokedExpiredAndUsedTokensAreRefused) {
  auto made = auth_.Create({.role = Role::kUser, .user = "bob"}, T(0));
  ASSERT_TRUE(made.ok());
  ASSERT_TRUE(Check(made->second).ok());
  ASSERT_TRUE(auth_.Revoke(made->first.id, T(1)).ok());
  EXPECT_THAT(Check(made->second).status().message(), HasSubstr("revoked"));

  const std::string brief =
      Make({.role = Role::kUser, .user = "carol", .ttl = absl::Seconds(60)});
  EXPECT_TRUE(Check(brief, 59).ok());
  EXPECT_THAT(Check(brief, 61).status().message(), HasSubstr("expired"));

  // Join tokens are single-use unless made reusable.
  const std::string join = Make({.role = Role::kJoin});
  absl::StatusOr<Principal> j = Check(join);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->role, Role::kJoin);
  absl::StatusOr<JoinedNode> joined = auth_.JoinNode(*j, "h200-0", T(2));
  ASSERT_TRUE(joined.ok()) << joined.status();
  const std::string* cred = &joined->credential;
  EXPECT_THAT(Check(join).status().message(), HasSubstr("already used"));
  absl::StatusOr<Principal> node = Check(*cred);
  ASSERT_TRUE(node.ok());
  EXPECT_EQ(node->role, Role::kNode);
  EXPECT_EQ(node->user, "h200-0");
  // Revoking the node's credential stops it.
  ASSERT_TRUE(auth_.RevokeNode("h200-0", T(3)).ok());
  EXPECT_EQ(Check(*cred).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(auth_.RevokeNode("h200-0", T(3)).code(),
            absl::StatusCode::kNotFound);
}

TEST_F(TokenRegistryTest, JobTokensAndAgentKeysComeFromTheSecretKey) {
  auth_.SetJobRunCheck([](int64_t, int64_t) { return absl::OkStatus(); });
  absl::StatusOr<Principal> p = Check(auth_.JobToken(42, 0));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Role::kJob);
  EXPECT_EQ(p->job, 42);
  EXPECT_EQ(p->run, 0);
  std::string forged = auth_.JobToken(42, 0);
  forged.replace(0, 10, "loomjob.43");  // another job's id, same MAC
  EXPECT_FALSE(Check(forged).ok());
  // Nothing secret is in the store: neither the key nor anything that
  // derives credentials from the store alone.
  absl::StatusOr<std::vector<KeyValue>> all = store_.List("");
  ASSERT_TRUE(all.ok());
  for (const KeyValue& kv : *all) {
    EXPECT_THAT(kv.value, Not(HasSubstr(key_))) << kv.key;
  }
  EXPECT_FALSE(store_.Get("/auth/cluster-secret").ok());
  // No credential, no key: the server presents nothing to a node that has
  // not joined.
  EXPECT_EQ(auth_.AgentKey("h200-0"), "");
  ASSERT_TRUE(Join("h200-0").ok());
  ASSERT_TRUE(Join("h200-1").ok());
  EXPECT_NE(auth_.AgentKey("h200-0"), "");
  EXPECT_NE(auth_.AgentKey("h200-0"), auth_.AgentKey("h200-1"));
  // Another server on the same store with the same key file (a standby)
  // agrees, and sees tokens and revocations at once; one with another key
  // makes other keys.
  TokenRegistry standby(&store_, /*authoritative=*/false, key_);
  ASSERT_TRUE(standby.Load(T(0)).ok());
  EXPECT_EQ(standby.AgentKey("h200-0"), auth_.AgentKey("h200-0"));
  EXPECT_EQ(standby.JobToken(7, 1), auth_.JobToken(7, 1));
  TokenRegistry other(&store_, /*authoritative=*/false,
                      TokenRegistry::NewSecretKey());
  ASSERT_TRUE(other.Load(T(0)).ok());
  EXPECT_NE(other.AgentKey("h200-0"), auth_.AgentKey("h200-0"));
  auto made = auth_.Create({.role = Role::kOperator, .user = "olga"}, T(0));
  ASSERT_TRUE(made.ok());
  EXPECT_TRUE(standby.Authenticate("Bearer " + made->second, T(1)).ok());
  ASSERT_TRUE(auth_.Revoke(made->first.id, T(1)).ok());
  EXPECT_FALSE(standby.Authenticate("Bearer " + made->second, T(1)).ok());
}

// Issue 15, item 7: a job token is its run's, and dies with it; its numbers
// are canonical.
TEST_F(TokenRegistryTest, JobTokensEndWithTheirRunAndParseCanonically) {
  // Job 2 is on run 1, job 3 has ended.
  auth_.SetJobRunCheck([](int64_t job, int64_t run) {
    if (job == 2 && run == 1) return absl::OkStatus();
    return absl::FailedPreconditionError(job == 3 ? "job 3 is succeeded"
                                                  : "not its current run");
  });
  EXPECT_TRUE(Check(auth_.JobToken(2, 1)).ok());
  EXPECT_THAT(Check(auth_.JobToken(2, 0)).status().message(),
              HasSubstr("no longer valid"));
  EXPECT_EQ(Check(auth_.JobToken(3, 0)).status().code(),
            absl::StatusCode::kUnauthenticated);
  const std::string good = auth_.JobToken(2, 1);
  const std::string mac = good.substr(good.rfind('.') + 1);
  for (const std::string& bad :
       {"loomjob.02.1." + mac, "loomjob.+2.1." + mac, "loomjob.2.01." + mac,
        "loomjob.2.+1." + mac, "loomjob.2.-1." + mac, "loomjob. 2.1." + mac,
        "loomjob.2 .1." + mac, "loomjob.2." + mac, "loomjob.2.1.." + mac,
        "loomjob.0000000000000000002.1." + mac}) {
    absl::StatusOr<Principal> r = Check(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  // Without a run check (a server that cannot tell), job tokens fail closed.
  TokenRegistry bare(&store_, /*authoritative=*/true, key_);
  ASSERT_TRUE(bare.Load(T(0)).ok());
  EXPECT_FALSE(bare.Authenticate("Bearer " + good, T(1)).ok());
}

// Issue 15, item 1: a join token takes no node that has joined; re-joining
// needs the admin's revocation, and rotates the agent key.
TEST_F(TokenRegistryTest, AJoinTokenCannotTakeALiveNode) {
  absl::StatusOr<JoinedNode> first = Join("h200-0");
  ASSERT_TRUE(first.ok()) << first.status();
  const std::string key = auth_.AgentKey("h200-0");
  // An impostor with another join token: refused, and nothing changed.
  absl::StatusOr<JoinedNode> impostor = Join("h200-0", 3);
  EXPECT_EQ(impostor.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(impostor.status().message(),
              HasSubstr("loom token revoke --node h200-0"));
  EXPECT_TRUE(Check(first->credential).ok());
  EXPECT_EQ(auth_.AgentKey("h200-0"), key);
  // The admin revokes; the node joins again: a new credential and a new
  // key, the old ones dead at once.
  ASSERT_TRUE(auth_.RevokeNode("h200-0", T(4)).ok());
  EXPECT_EQ(auth_.AgentKey("h200-0"), "");
  absl::StatusOr<JoinedNode> again = Join("h200-0", 5);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(Check(first->credential).ok());
  EXPECT_TRUE(Check(again->credential).ok());
  EXPECT_NE(auth_.AgentKey("h200-0"), "");
  EXPECT_NE(auth_.AgentKey("h200-0"), key);
}

TEST_F(TokenRegistryTest, JoinTokensAreSingleUseReusableOrBoundToNodes) {
  absl::StatusOr<Principal> once = Check(Make({.role = Role::kJoin}));
  ASSERT_TRUE(once.ok());
  ASSERT_TRUE(auth_.JoinNode(*once, "h200-0", T(1)).ok());
  EXPECT_EQ(auth_.JoinNode(*once, "h200-1", T(1)).status().code(),
            absl::StatusCode::kUnauthenticated);

  const std::string reusable = Make({.role = Role::kJoin, .reusable = true});
  for (const char* node : {"h200-1", "h200-2"}) {
    absl::StatusOr<Principal> r = Check(reusable);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_TRUE(auth_.JoinNode(*r, node, T(1)).ok()) << node;
  }

  const std::string bound =
      Make({.role = Role::kJoin, .nodes = {"h200-3", "h200-4"}});
  absl::StatusOr<Principal> b = Check(bound);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(auth_.JoinNode(*b, "h200-5", T(1)).status().code(),
            absl::StatusCode::kPermissionDenied);
  absl::StatusOr<JoinedNode> three = auth_.JoinNode(*b, "h200-3", T(1));
  ASSERT_TRUE(three.ok());
  // A failed registration gives the use back.
  ASSERT_TRUE(auth_.UndoJoin(*b, "h200-3", *three, T(1)).ok());
  EXPECT_FALSE(Check(three->credential).ok());
  ASSERT_TRUE(auth_.JoinNode(*b, "h200-3", T(1)).ok());
  ASSERT_TRUE(auth_.RevokeNode("h200-3", T(2)).ok());
  EXPECT_EQ(auth_.JoinNode(*b, "h200-3", T(2)).status().code(),
            absl::StatusCode::kPermissionDenied);  // each name once
  ASSERT_TRUE(auth_.JoinNode(*b, "h200-4", T(2)).ok());
  EXPECT_THAT(Check(bound).status().message(), HasSubstr("already used"));
}

TEST_F(TokenRegistryTest, BootstrapMakesOneAdminAndBadRequestsAreRefused) {
  absl::StatusOr<std::optional<std::string>> first = auth_.BootstrapAdmin(T(0));
  ASSERT_TRUE(first.ok());
  ASSERT_TRUE(first->has_value());
  EXPECT_EQ(Check(**first)->role, Role::kAdmin);
  absl::StatusOr<std::optional<std::string>> again = auth_.BootstrapAdmin(T(1));
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(again->has_value());
  EXPECT_FALSE(auth_.Create({.role = Role::kUser, .user = ""}, T(0)).ok());
  EXPECT_FALSE(auth_.Create({.role = Role::kUser, .user = "a b"}, T(0)).ok());
  for (const std::string& user :
       {std::string("."), std::string(".."), std::string("-rf"),
        std::string("a/b"), std::string("1000"), std::string(65, 'a')}) {
    EXPECT_FALSE(auth_.Create({.role = Role::kUser, .user = user}, T(0)).ok())
        << user;
  }
  EXPECT_TRUE(
      auth_.Create({.role = Role::kUser, .user = std::string(64, 'a')}, T(0))
          .ok());
  EXPECT_FALSE(
      auth_
          .Create({.role = Role::kUser, .user = "x", .projects = {"a b"}}, T(0))
          .ok());
  EXPECT_FALSE(
      auth_
          .Create(
              {.role = Role::kUser, .user = "x", .ttl = absl::Nanoseconds(1)},
              T(0))
          .ok());
  EXPECT_FALSE(auth_.Create({.role = Role::kJob, .user = "x"}, T(0)).ok());
  EXPECT_FALSE(ParseRole("superuser").ok());
}

}  // namespace
}  // namespace loom
