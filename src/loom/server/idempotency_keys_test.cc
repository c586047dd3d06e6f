#include "loom/server/idempotency_keys.h"

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

JobSpec Spec(const std::string& name) {
  absl::StatusOr<JobSpec> s =
      ParseJobSpec("name: " + name + "\ncommand: [x]\n", "t.yaml");
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

class IdempotencyTest : public ::testing::Test {
 protected:
  IdempotencyTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) { Make(); }
  void Make() {
    c_.reset();
    auto c = Controller::Create(cluster_, &store_, ControllerOptions{}, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  absl::StatusOr<nlohmann::json> Submit(const std::string& name,
                                        const std::string& key, double t,
                                        bool* created) {
    return c_->Submit(Spec(name), "alice", T(t), key, created);
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(IdempotencyTest, SameKeyOtherRequestIsRefusedAlsoAfterARestart) {
  bool created = false;
  ASSERT_TRUE(Submit("a", "k", 1, &created).ok());
  EXPECT_TRUE(created);
  absl::StatusOr<nlohmann::json> other = Submit("b", "k", 2, &created);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(
      std::string(other.status().message()).rfind("Idempotency-Key k ", 0), 0u)
      << other.status();
  Make();  // the digest is stored with the key
  EXPECT_EQ(Submit("b", "k", 3, &created).status().code(),
            absl::StatusCode::kAlreadyExists);
  absl::StatusOr<nlohmann::json> same = Submit("a", "k", 3, &created);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_FALSE(created);
  EXPECT_EQ((*same)["id"], 1);
}

// Keys used to be kept for ever.
TEST_F(IdempotencyTest, KeysExpireAfterADayAndArePurged) {
  bool created = false;
  ASSERT_TRUE(Submit("a", "k", 1, &created).ok());
  ASSERT_TRUE(Submit("a", "old", 2, &created).ok());
  ASSERT_TRUE(store_.Get("/requests/k").ok());
  const double day = 24 * 3600;
  // Within the day: the first job.
  ASSERT_TRUE(Submit("a", "k", day - 10, &created).ok());
  EXPECT_FALSE(created);
  // After it: a new job, even with another spec.
  absl::StatusOr<nlohmann::json> fresh = Submit("b", "k", day + 5, &created);
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_TRUE(created);
  EXPECT_EQ((*fresh)["id"], 3);
  // The purge deletes what expired ("old") and keeps the renewed "k".
  c_->Tick(T(day + 10));
  EXPECT_EQ(store_.Get("/requests/old").status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(store_.Get("/requests/k").ok());
  Make();
  absl::StatusOr<nlohmann::json> again = Submit("b", "k", day + 20, &created);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_FALSE(created);
  EXPECT_EQ((*again)["id"], 3);
}

TEST(IdempotencyValue, ReadsOlderPlainJobIds) {
  absl::StatusOr<IdempotencyRecord> r =
      ParseIdempotencyValue({"/requests/k", "17", 4}, T(9));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->job, 17);
  EXPECT_EQ(r->digest, "");
  EXPECT_EQ(r->time, T(9));
  EXPECT_EQ(r->version, 4);
  EXPECT_FALSE(ParseIdempotencyValue({"/requests/k", "{}", 1}, T(0)).ok());
}

}  // namespace
}  // namespace loom
