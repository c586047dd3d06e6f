#include "loom/server/redact.h"

#include "gtest/gtest.h"

namespace loom {
namespace {

nlohmann::json AlicesJob() {
  return nlohmann::json::parse(R"({
    "id": 7, "user": "alice",
    "spec": {"command": ["/home/alice/secret-train.py", "--key=s3cr3t", "-v"],
             "env": {"API_KEY": "hunter22"}, "working_dir": "/home/alice/proj"},
    "reason": "launch failed: exec \"/home/alice/secret-train.py\": no such file",
    "events": [{"time": "t", "message": "chdir /home/alice/proj: EACCES"},
               {"time": "t", "message": "argv --key=s3cr3t -v, env hunter22"}],
    "placement": {"tasks": [{"error": "exec /home/alice/secret-train.py"}]}
  })");
}

TEST(RedactJobFor, CutsAnotherUsersArgvFromReasonsAndEvents) {
  Principal bob{.user = "bob", .role = Role::kUser};
  nlohmann::json job = AlicesJob();
  RedactJobFor(bob, job);
  const std::string text = job.dump();
  for (const char* secret :
       {"secret-train", "s3cr3t", "hunter22", "/home/alice/proj"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << ": " << text;
  }
  EXPECT_EQ(job["spec"]["command"], "(hidden: another user's job)");
  EXPECT_EQ(job["reason"], "launch failed: exec \"(hidden)\": no such file");
  EXPECT_EQ(job["events"][0]["message"], "chdir (hidden): EACCES");
  // Short values ("-v") are left in text, or every message would be mangled.
  EXPECT_EQ(job["events"][1]["message"], "argv (hidden) -v, env (hidden)");
}

// Issue 39, finding 10: a dataset's source and version tell what another
// user reads; a named dataset's source is public (`loom dataset list`).
TEST(RedactJobFor, CutsAnotherUsersDatasetSourcesAndVersions) {
  nlohmann::json job = nlohmann::json::parse(R"json({
    "id": 8, "user": "alice",
    "spec": {"command": ["cat"],
             "data": [{"source": "/home/alice/private", "mount": "/d"},
                      {"dataset": "wiki", "source": "cold:wiki",
                       "mount": "/w"}]},
    "reason": "dataset /home/alice/private: cold store unreachable: EACCES",
    "events": [{"time": "t", "message":
                "dataset /home/alice/private: version 0123456789abcdef (1 files, 100 B)"},
               {"time": "t", "message":
                "dataset cold:wiki: version fedcba9876543210 (2 files, 1 KiB)"},
               {"time": "t", "message": "task 8.0.0 on h200-0 (run 0123456789abcdef0)"}]
  })json");
  RedactJobFor(Principal{.user = "bob", .role = Role::kUser}, job);
  EXPECT_EQ(job["spec"]["data"][0]["source"], "(hidden: another user's job)");
  EXPECT_EQ(job["spec"]["data"][0]["mount"], "/d");
  EXPECT_EQ(job["spec"]["data"][1]["source"], "cold:wiki");
  EXPECT_EQ(job["reason"], "dataset (hidden): cold store unreachable: EACCES");
  EXPECT_EQ(job["events"][0]["message"],
            "dataset (hidden): version (hidden) (1 files, 100 B)");
  EXPECT_EQ(job["events"][1]["message"],
            "dataset cold:wiki: version (hidden) (2 files, 1 KiB)");
  // Only whole 16-digit words are versions.
  EXPECT_EQ(job["events"][2]["message"],
            "task 8.0.0 on h200-0 (run 0123456789abcdef0)");
}

TEST(RedactJobFor, TheOwnerAndAdminsSeeEverything) {
  for (const Principal& p : {Principal{.user = "alice", .role = Role::kUser},
                             Principal{.user = "root", .role = Role::kAdmin}}) {
    nlohmann::json job = AlicesJob();
    RedactJobFor(p, job);
    EXPECT_EQ(job, AlicesJob()) << p.user;
  }
}

TEST(MaySeeJob, PrivateJobsAreTheirUsersAndProjectsOnly) {
  const PrivateData open;
  const PrivateData private_jobs{.jobs = true};
  const Principal bob{
      .user = "bob", .role = Role::kUser, .projects = {"research"}};
  EXPECT_TRUE(MaySeeJob(bob, open, "alice", "search"));
  EXPECT_FALSE(MaySeeJob(bob, private_jobs, "alice", "search"));
  EXPECT_TRUE(MaySeeJob(bob, private_jobs, "bob", "search"));
  EXPECT_TRUE(MaySeeJob(bob, private_jobs, "carol", "research"));
  const Principal all{.user = "dan", .role = Role::kUser, .projects = {"*"}};
  EXPECT_TRUE(MaySeeJob(all, private_jobs, "alice", "search"));
  for (Role r : {Role::kAdmin, Role::kOperator}) {
    EXPECT_TRUE(MaySeeJob(Principal{.user = "x", .role = r}, private_jobs,
                          "alice", "search"));
  }
  nlohmann::json rows = nlohmann::json::parse(R"([
    {"id": 1, "user": "alice", "project": "search"},
    {"id": 2, "user": "bob", "project": "search"},
    {"id": 3, "user": "carol", "project": "research"},
    {"id": 4, "user": "bob", "project": "x"}])");
  FilterJobsFor(bob, private_jobs, 2, rows);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["id"], 2);
  EXPECT_EQ(rows[1]["id"], 3);
}

}  // namespace
}  // namespace loom
