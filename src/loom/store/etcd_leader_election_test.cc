#include "loom/store/etcd_leader_election.h"

#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/store/etcd_client.h"
#include "loom/store/testing/etcd_process.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class EtcdLeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "loom_election_test_XXXXXX")
            .string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    absl::StatusOr<testing::EtcdProcess> etcd =
        testing::EtcdProcess::Start(dir_);
    ASSERT_TRUE(etcd.ok()) << etcd.status();
    etcd_ = std::make_unique<testing::EtcdProcess>(*std::move(etcd));
  }
  void TearDown() override {
    etcd_.reset();
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  std::unique_ptr<EtcdClient> Client() {
    absl::StatusOr<std::unique_ptr<EtcdClient>> c =
        EtcdClient::Create({.endpoints = etcd_->endpoints()});
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }
  static EtcdLeaderElectionOptions Options(std::string value) {
    return {.key = "/t/leader",
            .value = std::move(value),
            .lease_ttl = absl::Seconds(2),
            .poll = absl::Milliseconds(50)};
  }

  std::string dir_;
  std::unique_ptr<testing::EtcdProcess> etcd_;
};

TEST_F(EtcdLeaderElectionTest, OneLeadsTheOtherWaitsAndTakesOverOnResign) {
  std::unique_ptr<EtcdClient> ca = Client(), cb = Client();
  EtcdLeaderElection a(ca.get(), Options("http://a"));
  EtcdLeaderElection b(cb.get(), Options("http://b"));
  std::atomic<bool> stop{false};
  absl::StatusOr<int64_t> term_a = a.Campaign(stop);
  ASSERT_TRUE(term_a.ok()) << term_a.status();
  EXPECT_TRUE(a.leading());
  a.KeepLeading(nullptr);

  absl::StatusOr<int64_t> term_b = absl::UnknownError("not run");
  absl::Notification b_won;
  std::thread tb([&] {
    term_b = b.Campaign(stop);
    b_won.Notify();
  });
  // b waits (well past a's lease ttl: a keeps it alive) and knows who leads.
  EXPECT_FALSE(b_won.WaitForNotificationWithTimeout(absl::Seconds(3)));
  EXPECT_EQ(b.Leader(), "http://a");
  EXPECT_FALSE(b.leading());

  const absl::Time resigned = absl::Now();
  a.Resign();
  ASSERT_TRUE(b_won.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_LT(absl::Now() - resigned, absl::Seconds(1));
  tb.join();
  ASSERT_TRUE(term_b.ok()) << term_b.status();
  EXPECT_GT(*term_b, *term_a);
  EXPECT_TRUE(b.leading());
  EXPECT_FALSE(a.leading());
  EXPECT_EQ(b.Leader(), "http://b");
}

TEST_F(EtcdLeaderElectionTest, SilentLeaderLosesWhenItsLeaseExpires) {
  std::unique_ptr<EtcdClient> ca = Client(), cb = Client();
  // a wins and then goes silent, as a killed server would: nobody keeps its
  // lease alive and nobody revokes it.
  auto a = std::make_unique<EtcdLeaderElection>(ca.get(), Options("http://a"));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(a->Campaign(stop).ok());
  EtcdLeaderElection b(cb.get(), Options("http://b"));
  const absl::Time start = absl::Now();
  absl::StatusOr<int64_t> term_b = b.Campaign(stop);
  ASSERT_TRUE(term_b.ok()) << term_b.status();
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, absl::Seconds(1));
  EXPECT_LT(took, absl::Seconds(5));
}

TEST_F(EtcdLeaderElectionTest, LeaderNoticesWhenTheKeyIsTaken) {
  std::unique_ptr<EtcdClient> ca = Client(), admin = Client();
  EtcdLeaderElection a(ca.get(), Options("http://a"));
  std::atomic<bool> stop{false};
  ASSERT_TRUE(a.Campaign(stop).ok());
  absl::Notification lost;
  absl::Status why;
  a.KeepLeading([&](const absl::Status& st) {
    why = st;
    lost.Notify();
  });
  // An operator (or a bug) deletes the key: a must step down.
  ASSERT_TRUE(admin
                  ->Call("/v3/kv/deleterange",
                         {{"key", EtcdClient::Encode("/t/leader")}})
                  .ok());
  ASSERT_TRUE(lost.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_FALSE(a.leading());
  EXPECT_THAT(why.message(), HasSubstr("no longer this server's"));
}

TEST_F(EtcdLeaderElectionTest, CampaignStopsWhenAsked) {
  std::unique_ptr<EtcdClient> ca = Client(), cb = Client();
  EtcdLeaderElection a(ca.get(), Options("http://a"));
  EtcdLeaderElection b(cb.get(), Options("http://b"));
  std::atomic<bool> stop_a{false}, stop_b{false};
  ASSERT_TRUE(a.Campaign(stop_a).ok());
  a.KeepLeading(nullptr);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(300));
    stop_b = true;
  });
  absl::StatusOr<int64_t> r = b.Campaign(stop_b);
  stopper.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kCancelled);
  EXPECT_TRUE(a.leading());
}

}  // namespace
}  // namespace loom
