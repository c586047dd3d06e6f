// A job's history (events, checkpoint) is stored apart from its record
// (issue 14.2): appending to it never rewrites the record.

#include "loom/server/job_events_store.h"

#include <unistd.h>

#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/server/controller_test_util.h"
#include "loom/server/standby_reader.h"
#include "loom/store/memory_state_store.h"
#include "loom/store/sqlite_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

class JobEventsStoreTest : public ::testing::Test {
 protected:
  JobEventsStoreTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) {
    o_.heartbeat_timeout = absl::Hours(1);  // no heartbeats are sent
    o_.suspect_after = absl::Hours(1);
  }
  void Make(StateStore* store) {
    c_.reset();
    auto c = Controller::Create(cluster_, store, o_, T(0));
    ASSERT_TRUE(c.ok()) << c.status();
    c_ = *std::move(c);
  }
  void RunJob() {
    ASSERT_TRUE(
        c_->Register(testing::EmulatedNode("h200-0", "127.0.0.2:7100"), T(1))
            .ok());
    auto spec = ParseJobSpec("name: t\ncommand: [x]\n", "t.yaml");
    ASSERT_TRUE(spec.ok());
    ASSERT_TRUE(c_->Submit(*spec, "a", T(2)).ok());
    c_->Tick(T(2));
    ASSERT_EQ((*c_->GetJob(1, T(2)))["state"], "running");
  }

  Cluster cluster_;
  ControllerOptions o_;
  MemoryStateStore store_;
  std::unique_ptr<Controller> c_;
};

TEST_F(JobEventsStoreTest, CheckpointReportsWriteOnlyTheHistory) {
  Make(&store_);
  RunJob();
  const int64_t record_version = store_.Get(JobKey(1))->version;
  const int64_t rev = *store_.Revision();
  for (int i = 0; i < 50; ++i) {  // spaced past the 5 s rate limit
    ASSERT_TRUE(c_->Checkpoint(1, i, T(10 + i * 6)).ok());
  }
  EXPECT_EQ(store_.Get(JobKey(1))->version, record_version);
  auto changes = store_.ChangesSince("/jobs/", rev, 0);
  ASSERT_TRUE(changes.ok());
  EXPECT_TRUE(changes->empty());
  auto history = store_.ChangesSince(kEventsPrefix, rev, 0);
  ASSERT_TRUE(history.ok());
  EXPECT_EQ(history->size(), 50u);
  EXPECT_FALSE(
      nlohmann::json::parse(store_.Get(JobKey(1))->value).contains("events"));
  nlohmann::json job = *c_->GetJob(1, T(400));
  EXPECT_EQ(job["events"].back()["message"], "checkpoint saved (step 49)");
  EXPECT_EQ(job["checkpoint"]["step"], 49);
  Make(&store_);  // a restart keeps both
  job = *c_->GetJob(1, T(400));
  EXPECT_EQ(job["events"].back()["message"], "checkpoint saved (step 49)");
  EXPECT_EQ(job["checkpoint"]["step"], 49);
  // A standby shows them too.
  StandbyReader standby(&cluster_, &store_);
  nlohmann::json shown = *standby.GetJob(1);
  EXPECT_EQ(shown["events"], job["events"]);
  EXPECT_EQ(shown["checkpoint"]["step"], 49);
  nlohmann::json list = *standby.ListJobs({});
  EXPECT_EQ(list["jobs"][0]["checkpoint"]["step"], 49);
}

TEST_F(JobEventsStoreTest, OlderRecordsWithEventsInsideLoadAndMoveThem) {
  Make(&store_);
  RunJob();
  ASSERT_TRUE(c_->Checkpoint(1, 7, T(10)).ok());
  // Rewrite as an older version stored it: the history inside the record.
  nlohmann::json record = nlohmann::json::parse(store_.Get(JobKey(1))->value);
  nlohmann::json history =
      nlohmann::json::parse(store_.Get(EventsKey(1))->value);
  record["events"] = history["events"];
  record["checkpoint"] = history["checkpoint"];
  ASSERT_TRUE(store_
                  .Commit({}, {Mutation::Put(JobKey(1), record.dump()),
                               Mutation::Delete(EventsKey(1))})
                  .ok());
  Make(&store_);
  nlohmann::json job = *c_->GetJob(1, T(11));
  EXPECT_EQ(job["events"], history["events"]);
  EXPECT_EQ(job["checkpoint"]["step"], 7);
  ASSERT_TRUE(c_->Cancel(1, T(12)).ok());  // the next write moves them
  EXPECT_FALSE(
      nlohmann::json::parse(store_.Get(JobKey(1))->value).contains("events"));
  nlohmann::json moved = nlohmann::json::parse(store_.Get(EventsKey(1))->value);
  EXPECT_EQ(moved["checkpoint"]["step"], 7);
  EXPECT_GT(moved["events"].size(), history["events"].size());
}

TEST_F(JobEventsStoreTest, BadOrOrphanHistoriesNeverStopTheServer) {
  Make(&store_);
  RunJob();
  ASSERT_TRUE(store_
                  .Commit({}, {Mutation::Put(EventsKey(1), "{garbage"),
                               Mutation::Put(EventsKey(42), "{}"),
                               Mutation::Put("/events/x", "{}")})
                  .ok());
  Make(&store_);
  EXPECT_EQ((*c_->GetJob(1, T(3)))["state"], "running");
  EXPECT_EQ(c_->LoadLog().size(), 3u);
  EXPECT_EQ(store_.Get(EventsKey(42)).status().code(),
            absl::StatusCode::kNotFound);
  ASSERT_TRUE(c_->Checkpoint(1, 3, T(10)).ok());  // replaces the bad one
  nlohmann::json h = nlohmann::json::parse(store_.Get(EventsKey(1))->value);
  EXPECT_EQ(h["checkpoint"]["step"], 3);
}

TEST_F(JobEventsStoreTest, SqliteRestartKeepsTheEvents) {
  const std::string dir =
      absl::StrCat(::testing::TempDir(), "/loom_jes_", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  nlohmann::json events;
  {
    auto db = SqliteStateStore::Open(dir + "/state.db");
    ASSERT_TRUE(db.ok()) << db.status();
    Make(db->get());
    RunJob();
    ASSERT_TRUE(c_->Checkpoint(1, 5, T(10)).ok());
    events = (*c_->GetJob(1, T(10)))["events"];
    c_.reset();
  }
  auto db = SqliteStateStore::Open(dir + "/state.db");
  ASSERT_TRUE(db.ok()) << db.status();
  Make(db->get());
  nlohmann::json job = *c_->GetJob(1, T(11));
  EXPECT_EQ(job["events"], events);
  EXPECT_EQ(job["checkpoint"]["step"], 5);
  c_.reset();
}

}  // namespace
}  // namespace loom
