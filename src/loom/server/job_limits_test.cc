// Bounds on what one job's token or one user can make the controller store
// (issue 14.2): events per job, checkpoint writes, jobs per user.

#include "loom/server/job_limits.h"

#include <string>

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/job_events.h"
#include "loom/server/job_events_store.h"
#include "loom/store/memory_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

using testing::Spec;

class JobLimitsTest : public ::testing::Test {
 protected:
  JobLimitsTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) {}
  void Make(ControllerOptions o = {}) {
    c_.reset();
    auto c = Controller::Create(cluster_, &store_, o, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  void RegisterNode() {
    ASSERT_TRUE(
        c_->Register(testing::EmulatedNode("h200-0", "127.0.0.2:7100"), T(1))
            .ok());
  }
  int64_t Revision() { return *store_.Revision(); }
  nlohmann::json Stored(JobId id) {
    return nlohmann::json::parse(store_.Get(JobKey(id))->value);
  }

  Cluster cluster_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

// As in the report: 3,000 checkpoint calls used to be 3,000 whole-record
// writes and 3,000 events.
TEST_F(JobLimitsTest, CheckpointReportsAreThrottledAndTheirEventsCoalesced) {
  ControllerOptions o;
  o.heartbeat_timeout = absl::Hours(1);  // the test sends no heartbeats
  o.suspect_after = absl::Hours(1);
  Make(o);
  RegisterNode();
  ASSERT_TRUE(c_->Submit(Spec("name: t\ncommand: [x]\n"), "a", T(2)).ok());
  c_->Tick(T(2));
  ASSERT_EQ((*c_->GetJob(1, T(2)))["state"], "running");
  const int64_t before = Revision();
  // 3,000 reports over 30 s: 100 a second.
  for (int i = 0; i < 3000; ++i) {
    auto j = c_->Checkpoint(1, i, T(3 + i * 0.01));
    ASSERT_TRUE(j.ok()) << j.status();
    EXPECT_EQ((*j)["checkpoint"]["step"], i);  // seen at once
    if (i % 50 == 0) c_->Tick(T(3 + i * 0.01));
  }
  // One write per job per 5 s (plus at most one more per interval for the
  // held report): about 6-12, not 3,000.
  EXPECT_LE(Revision() - before, 14);
  c_->Tick(T(40));  // the last held report is written when due
  // The checkpoint is in the job's history, stored apart from the record.
  EXPECT_EQ(nlohmann::json::parse(
                store_.Get(EventsKey(1))->value)["checkpoint"]["step"],
            2999);
  nlohmann::json job = *c_->GetJob(1, T(40));
  EXPECT_LE(job["events"].size(), 4u) << job["events"].dump();
  const nlohmann::json& last = job["events"].back();
  EXPECT_EQ(last["message"], "checkpoint saved (step 2999)");
  EXPECT_GE(last["count"].get<int>(), 6);
  EXPECT_LT(job.dump().size(), 8'000u);
}

TEST_F(JobLimitsTest, ReportsFarApartAreEachWrittenAndTheHistoryStaysBounded) {
  Make();
  RegisterNode();
  ASSERT_TRUE(c_->Submit(Spec("name: t\ncommand: [x]\n"), "a", T(2)).ok());
  c_->Tick(T(2));
  const int64_t before = Revision();
  for (int i = 0; i < 300; ++i) {
    ASSERT_TRUE(c_->Checkpoint(1, i, T(10 + i * 6)).ok());
  }
  EXPECT_EQ(Revision() - before, 300);  // each is outside the interval
  nlohmann::json job = *c_->GetJob(1, T(2000));
  EXPECT_LE(job["events"].size(), JobEvents::kMaxJobEvents);
  EXPECT_LT(job.dump().size(), 8'000u);
}

TEST(JobEvents, KeepsTheLastHundredAndCoalescesRepeats) {
  JobEvents e;
  for (int i = 0; i < 250; ++i) e.Add(T(i), "event " + std::to_string(i));
  ASSERT_EQ(e.events().size(), JobEvents::kMaxJobEvents);
  EXPECT_EQ(e.dropped(), 150);
  EXPECT_EQ(e.events().front().message, "event 150");
  for (int i = 0; i < 5; ++i) e.Add(T(300 + i), "node h200-0 is down");
  EXPECT_EQ(e.events().size(), JobEvents::kMaxJobEvents);
  EXPECT_EQ(e.events().back().count, 5);
  EXPECT_EQ(e.events().back().time, T(300));
  EXPECT_EQ(e.events().back().last_time, T(304));
  // Stored and read back as they were.
  absl::StatusOr<JobEvents> back = JobEvents::FromJson(e.ToJson(), e.dropped());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(*back == e);
  // A record written before the bound, with more events, is cut on load.
  nlohmann::json old = nlohmann::json::array();
  for (int i = 0; i < 150; ++i) {
    old.push_back({{"time", "2026-01-01T00:00:00Z"}, {"message", "x"}});
  }
  back = JobEvents::FromJson(old, 0);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->events().size(), JobEvents::kMaxJobEvents);
  EXPECT_EQ(back->dropped(), 50);
}

TEST(CheckpointThrottle, OnePerIntervalAndTheHeldOneWhenDue) {
  CheckpointThrottle t(absl::Seconds(5));
  EXPECT_TRUE(t.ShouldWrite(1, T(0)));
  EXPECT_FALSE(t.ShouldWrite(1, T(1)));
  EXPECT_TRUE(t.ShouldWrite(2, T(1)));  // per job
  EXPECT_TRUE(t.TakeDue(T(4)).empty());
  EXPECT_EQ(t.TakeDue(T(5)), std::vector<JobId>{1});
  EXPECT_FALSE(t.ShouldWrite(1, T(6)));  // the due write counts
  EXPECT_TRUE(t.ShouldWrite(1, T(10)));
}

TEST_F(JobLimitsTest, UnfinishedJobsPerUserAreCapped) {
  ControllerOptions o;
  o.max_jobs_per_user = 3;
  Make(o);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(
        c_->Submit(Spec("name: t\ncommand: [x]\n"), "alice", T(2)).ok());
  }
  absl::StatusOr<nlohmann::json> refused =
      c_->Submit(Spec("name: t\ncommand: [x]\n"), "alice", T(2));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(std::string(refused.status().message()).rfind("limit: ", 0), 0u);
  EXPECT_NE(refused.status().message().find("--max-jobs-per-user"),
            std::string::npos);
  // Held jobs count; another user is not affected.
  EXPECT_TRUE(
      c_->Submit(Spec("name: t\ncommand: [x]\nhold: true\n"), "bob", T(2))
          .ok());
  // A job that ends makes room.
  ASSERT_TRUE(c_->Cancel(2, T(3)).ok());
  EXPECT_TRUE(c_->Submit(Spec("name: t\ncommand: [x]\n"), "alice", T(4)).ok());
  // The count survives a restart.
  Make(o);
  EXPECT_EQ(c_->Submit(Spec("name: t\ncommand: [x]\n"), "alice", T(5))
                .status()
                .code(),
            absl::StatusCode::kResourceExhausted);
}

TEST(UserJobCounter, ForgetsEndedJobsOnlyAtTheLimit) {
  UserJobCounter c;
  int asked = 0;
  auto ended = [&](JobId id) {
    ++asked;
    return id == 1;
  };
  c.Add("a", 1);
  c.Add("a", 2);
  EXPECT_FALSE(c.AtLimit("a", 3, ended));
  EXPECT_EQ(asked, 0);
  c.Add("a", 3);
  EXPECT_FALSE(c.AtLimit("a", 3, ended));  // job 1 ended
  EXPECT_EQ(asked, 3);
  c.Add("a", 4);
  EXPECT_TRUE(c.AtLimit("a", 3, ended));
  c.Remove("a", 4);
  EXPECT_FALSE(c.AtLimit("a", 3, ended));
  EXPECT_FALSE(c.AtLimit("a", 0, ended));  // 0: no limit
}

}  // namespace
}  // namespace loom
