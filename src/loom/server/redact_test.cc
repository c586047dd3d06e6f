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
  for (const char* secret : {"secret-train", "s3cr3t", "hunter22",
                             "/home/alice/proj"}) {
    EXPECT_EQ(text.find(secret), std::string::npos) << secret << ": " << text;
  }
  EXPECT_EQ(job["spec"]["command"], "(hidden: another user's job)");
  EXPECT_EQ(job["reason"],
            "launch failed: exec \"(hidden)\": no such file");
  EXPECT_EQ(job["events"][0]["message"], "chdir (hidden): EACCES");
  // Short values ("-v") are left in text, or every message would be mangled.
  EXPECT_EQ(job["events"][1]["message"], "argv (hidden) -v, env (hidden)");
}

TEST(RedactJobFor, TheOwnerAndAdminsSeeEverything) {
  for (const Principal& p :
       {Principal{.user = "alice", .role = Role::kUser},
        Principal{.user = "root", .role = Role::kAdmin}}) {
    nlohmann::json job = AlicesJob();
    RedactJobFor(p, job);
    EXPECT_EQ(job, AlicesJob()) << p.user;
  }
}

}  // namespace
}  // namespace loom
