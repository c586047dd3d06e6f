#include "loom/core/retry.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

TEST(DecideRetry, FailuresFollowRestartAndPreemptionsFollowRequeue) {
  const RestartSpec restart{2, absl::Seconds(10)};
  const RestartSpec requeue{-1, absl::Seconds(1)};
  RetryDecision d = DecideRetry(restart, requeue, RunEnd::kFailed, 0, 50);
  EXPECT_TRUE(d.again);
  EXPECT_EQ(d.wait, absl::Seconds(10));
  d = DecideRetry(restart, requeue, RunEnd::kFailed, 2, 0);
  EXPECT_FALSE(d.again);
  EXPECT_EQ(d.why_not, "restart.max (2) reached");
  // Requeues are counted apart: restarts used up do not stop them.
  d = DecideRetry(restart, requeue, RunEnd::kRequeued, 2, 1000);
  EXPECT_TRUE(d.again);
  EXPECT_EQ(d.wait, absl::Seconds(1));
}

TEST(DecideRetry, ZeroMeansNever) {
  const RestartSpec none{0, absl::Seconds(10)};
  RetryDecision d = DecideRetry(none, none, RunEnd::kFailed, 0, 0);
  EXPECT_FALSE(d.again);
  EXPECT_EQ(d.why_not, "");  // no restart policy: nothing to explain
  d = DecideRetry(none, none, RunEnd::kRequeued, 0, 0);
  EXPECT_FALSE(d.again);
  EXPECT_EQ(d.why_not, "requeue.max (0) reached");
}

}  // namespace
}  // namespace loom
