#include "loom/agent/api_guard.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(ApiGuard, FailsClosedUntilItKnowsAKey) {
  ApiGuard guard(/*insecure=*/false);
  EXPECT_FALSE(guard.HasKey());
  const ApiVerdict v = guard.Check("");
  EXPECT_FALSE(v.allowed);
  EXPECT_EQ(v.status, 503);
  guard.SetKey("h200-0", "k1");
  EXPECT_TRUE(guard.Check("Bearer k1").allowed);
  EXPECT_EQ(guard.Check("Bearer k2").status, 401);
  EXPECT_EQ(guard.Check("").status, 401);
}

// A node that re-joins gets a new key; the old one (perhaps stolen) is dead
// at once, while other nodes' keys stay good.
TEST(ApiGuard, ARotatedKeyReplacesTheOldOne) {
  ApiGuard guard(/*insecure=*/false);
  EXPECT_TRUE(guard.SetKey("h200-0", "old"));
  EXPECT_TRUE(guard.SetKey("h200-1", "other"));
  EXPECT_FALSE(guard.SetKey("h200-0", "old"));  // known already
  EXPECT_TRUE(guard.SetKey("h200-0", "new"));
  EXPECT_FALSE(guard.Check("Bearer old").allowed);
  EXPECT_TRUE(guard.Check("Bearer new").allowed);
  EXPECT_TRUE(guard.Check("Bearer other").allowed);
  // Two nodes sharing a key: replacing one keeps it for the other.
  guard.SetKey("h200-1", "new");
  guard.SetKey("h200-0", "newer");
  EXPECT_TRUE(guard.Check("Bearer new").allowed);
}

}  // namespace
}  // namespace loom
