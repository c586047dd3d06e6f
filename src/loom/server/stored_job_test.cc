#include "loom/server/stored_job.h"

#include <string>

#include "gtest/gtest.h"
#include "loom/sched/test_util.h"
#include "loom/server/controller.h"
#include "loom/store/memory_state_store.h"
#include "loom/store/sqlite_state_store.h"

namespace loom {
namespace {

using testing::MakeCluster;
using testing::T;

class StoredJobTest : public ::testing::Test {
 protected:
  StoredJobTest() : cluster_(MakeCluster({{2, 0}}, 2, 8)) {}

  absl::StatusOr<std::unique_ptr<Controller>> Start(StateStore* store,
                                                    double t) {
    return Controller::Create(cluster_, store, ControllerOptions{}, T(t));
  }

  Cluster cluster_;
  MemoryStateStore store_;
};

// A spec just under the 1 MiB input limit whose stored canonical form is
// over it: the next start used to refuse the record and the server exited.
TEST_F(StoredJobTest, RecordLongerThanTheInputLimitLoads) {
  {
    auto c = Start(&store_, 0);
    ASSERT_TRUE(c.ok()) << c.status();
    const std::string yaml = "name: big\ncommand: [sh, -c, 'env']\nenv: {A: " +
                             std::string(1'048'445 - 60, 'a') + "}\n";
    ASSERT_LT(yaml.size(), size_t{1} << 20);
    absl::StatusOr<JobSpec> spec = ParseJobSpec(yaml, "big.yaml");
    ASSERT_TRUE(spec.ok()) << spec.status();
    ASSERT_TRUE((*c)->Submit(*spec, "alice", T(1)).ok());
  }
  absl::StatusOr<KeyValue> kv = store_.Get(JobKey(1));
  ASSERT_TRUE(kv.ok());
  ASSERT_GT(kv->value.size(), size_t{1} << 20);  // as in the report: 1048832+
  auto c = Start(&store_, 2);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE((*c)->LoadLog().empty());
  absl::StatusOr<nlohmann::json> job = (*c)->GetJob(1, T(2));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ((*job)["state"], "pending");
  EXPECT_EQ((*job)["spec"]["env"]["A"].get<std::string>().size(),
            size_t{1'048'445 - 60});
}

TEST_F(StoredJobTest, UnreadableRecordsBecomeFailedJobsAndTheServerStarts) {
  const std::string garbage = "{\"id\": 2, \"spec\": {not json";
  const std::string bad_spec =
      R"({"id": 3, "state": "pending", "submit_time": "2026-01-01T00:00:00Z",)"
      R"( "spec": {"name": "x", "user": "bob", "command": ["true"],)"
      R"( "tasks": -4}, "tasks": [], "events": []})";
  const std::string wrong_id =
      R"({"id": 9, "state": "pending", "submit_time": "2026-01-01T00:00:00Z",)"
      R"( "spec": {"name": "x", "command": ["true"]}, "tasks": [],)"
      R"( "events": []})";
  ASSERT_TRUE(store_
                  .Commit({}, {Mutation::Put(JobKey(2), garbage),
                               Mutation::Put(JobKey(3), bad_spec),
                               Mutation::Put(JobKey(4), wrong_id),
                               Mutation::Put("/jobs/not-a-job", "x")})
                  .ok());
  const int64_t version = store_.Get(JobKey(2))->version;

  auto c = Start(&store_, 10);
  ASSERT_TRUE(c.ok()) << c.status();
  const std::vector<std::string> log = (*c)->LoadLog();
  ASSERT_EQ(log.size(), 4u);  // one structured line per record
  for (const std::string& line : log) {
    nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j["event"], "unreadable_record") << line;
    EXPECT_FALSE(j["reason"].get<std::string>().empty()) << line;
  }
  for (JobId id : {2, 3, 4}) {
    absl::StatusOr<nlohmann::json> job = (*c)->GetJob(id, T(10));
    ASSERT_TRUE(job.ok()) << id;
    EXPECT_EQ((*job)["state"], "failed") << id;
    EXPECT_EQ(
        (*job)["reason"].get<std::string>().rfind("unreadable record: ", 0), 0u)
        << (*job)["reason"];
  }
  // What identifies the job to its owner is kept.
  EXPECT_EQ((*(*c)->GetJob(3, T(10)))["user"], "bob");
  // The raw bytes are kept for an admin.
  absl::StatusOr<KeyValue> kept = store_.Get(QuarantineKey(JobKey(2), version));
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(kept->value, garbage);
  // Ids are never reused.
  absl::StatusOr<JobSpec> spec =
      ParseJobSpec("name: next\ncommand: [true]\n", "t.yaml");
  absl::StatusOr<nlohmann::json> next = (*c)->Submit(*spec, "alice", T(11));
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ((*next)["id"], 5);
  c->reset();

  // The next start reads the stand-ins back without complaint.
  auto again = Start(&store_, 20);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ((*again)->LoadLog().size(), 1u);  // only the key that is no job
  EXPECT_EQ((*(*again)->GetJob(2, T(20)))["state"], "failed");
  EXPECT_EQ((*(*again)->GetJob(2, T(20)))["reason"].get<std::string>().rfind(
                "unreadable record: not JSON", 0),
            0u);
}

TEST_F(StoredJobTest, GarbageInSqliteDoesNotStopTheServer) {
  const std::string dir = ::testing::TempDir();
  const std::string path = dir + "/stored_job_test.db";
  std::remove(path.c_str());
  auto store = SqliteStateStore::Open(path);
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)
                  ->Commit({}, {Mutation::Put(JobKey(1), "\xff\xfe garbage")})
                  .ok());
  auto c = Start(store->get(), 1);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ((*(*c)->GetJob(1, T(1)))["state"], "failed");
  std::remove(path.c_str());
}

TEST(ReadStoredJob, StandInsAlwaysReadBack) {
  for (const std::string value :
       {std::string(""), std::string("null"), std::string("[1,2]"),
        std::string(R"({"spec": {"user": "a b c", "project": 7}})"),
        std::string(R"({"spec": {"name": "-bad-", "user": "\u0000"}})")}) {
    absl::StatusOr<StoredJob> s = ReadStoredJob({JobKey(7), value, 1}, T(0));
    ASSERT_TRUE(s.ok()) << value;
    EXPECT_FALSE(s->problem.ok()) << value;
    EXPECT_EQ(s->record.id, 7);
    absl::StatusOr<JobRecord> back =
        JobRecordFromJson(JobRecordToJson(s->record));
    EXPECT_TRUE(back.ok()) << value << ": " << back.status();
  }
  EXPECT_FALSE(ReadStoredJob({"/jobs/7", "{}", 1}, T(0)).ok());
  EXPECT_FALSE(ReadStoredJob({JobKey(0), "{}", 1}, T(0)).ok());
}

}  // namespace
}  // namespace loom
