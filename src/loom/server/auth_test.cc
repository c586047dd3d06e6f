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

  MemoryStateStore store_;
  TokenRegistry auth_{&store_, /*authoritative=*/true};
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

  const std::string join = Make({.role = Role::kJoin, .once = true});
  absl::StatusOr<Principal> j = Check(join);
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->role, Role::kJoin);
  absl::StatusOr<std::string> cred = auth_.JoinNode(*j, "h200-0", T(2));
  ASSERT_TRUE(cred.ok()) << cred.status();
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

TEST_F(TokenRegistryTest, JobTokensAndAgentKeysComeFromTheClusterSecret) {
  absl::StatusOr<Principal> p = Check(auth_.JobToken(42));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->role, Role::kJob);
  EXPECT_EQ(p->job, 42);
  std::string forged = auth_.JobToken(42);
  forged.replace(0, 10, "loomjob.43");  // another job's id, same MAC
  EXPECT_FALSE(Check(forged).ok());
  EXPECT_NE(auth_.AgentKey("h200-0"), auth_.AgentKey("h200-1"));
  // Another server on the same store (a standby) shares the secret and sees
  // tokens and revocations at once.
  TokenRegistry standby(&store_, /*authoritative=*/false);
  ASSERT_TRUE(standby.Load(T(0)).ok());
  EXPECT_EQ(standby.AgentKey("h200-0"), auth_.AgentKey("h200-0"));
  EXPECT_EQ(standby.JobToken(7), auth_.JobToken(7));
  auto made = auth_.Create({.role = Role::kOperator, .user = "olga"}, T(0));
  ASSERT_TRUE(made.ok());
  EXPECT_TRUE(standby.Authenticate("Bearer " + made->second, T(1)).ok());
  ASSERT_TRUE(auth_.Revoke(made->first.id, T(1)).ok());
  EXPECT_FALSE(standby.Authenticate("Bearer " + made->second, T(1)).ok());
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
  EXPECT_FALSE(auth_.Create({.role = Role::kJob, .user = "x"}, T(0)).ok());
  EXPECT_FALSE(ParseRole("superuser").ok());
}

}  // namespace
}  // namespace loom
