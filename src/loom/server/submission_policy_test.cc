#include "loom/server/submission_policy.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

Cluster WithProjects() {
  absl::StatusOr<Cluster> c = ParseClusterSpec(R"(
pools:
  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, memory: 2Ti}
priority_classes:
  - {name: low, value: 0}
  - {name: normal, value: 100}
  - {name: high, value: 1000}
  - {name: urgent, value: 5000}
projects:
  - {name: search}
  - {name: research, priority_classes: [low, normal, high]}
)",
                                               "cluster.yaml");
  EXPECT_TRUE(c.ok()) << c.status();
  return *c;
}

JobSpec Job(const std::string& project, const std::string& priority) {
  JobSpec s;
  s.name = "x";
  s.project = project;
  s.priority = priority;
  return s;
}

Principal User(std::vector<std::string> projects) {
  return {.user = "alice", .role = Role::kUser, .projects = projects};
}

// Issue 15, item 6: `high` is not every user's.
TEST(SubmissionPolicyTest, PriorityClassesFollowTheProject) {
  const Cluster cluster = WithProjects();
  const Principal alice = User({"search", "research"});
  JobSpec s = Job("search", "high");
  absl::Status st = CheckSubmission(alice, cluster, &s);
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(st.message(),
              HasSubstr("project search may not use priority class 'high' "
                        "(it may use low, normal;"));
  for (const char* ok : {"low", "normal"}) {
    s = Job("search", ok);
    EXPECT_TRUE(CheckSubmission(alice, cluster, &s).ok()) << ok;
    EXPECT_EQ(s.user, "alice");
  }
  s = Job("research", "high");
  EXPECT_TRUE(CheckSubmission(alice, cluster, &s).ok());
  s = Job("research", "urgent");
  EXPECT_EQ(CheckSubmission(alice, cluster, &s).code(),
            absl::StatusCode::kPermissionDenied);
  // Operators follow their projects too; admins use any class.
  Principal olga = User({"*"});
  olga.role = Role::kOperator;
  s = Job("search", "urgent");
  EXPECT_FALSE(CheckSubmission(olga, cluster, &s).ok());
  const Principal admin = {.user = "root", .role = Role::kAdmin};
  s = Job("search", "urgent");
  EXPECT_TRUE(CheckSubmission(admin, cluster, &s).ok());
  // A class the cluster lacks is left to ToJobRequest's error.
  s = Job("search", "mystery");
  EXPECT_TRUE(CheckSubmission(alice, cluster, &s).ok());
}

// Issue 15, item 8: a project the cluster spec does not declare is refused,
// also for an admin.
TEST(SubmissionPolicyTest, ProjectsMustBeDeclared) {
  const Cluster cluster = WithProjects();
  const Principal admin = {.user = "root", .role = Role::kAdmin};
  JobSpec s = Job("nowhere", "normal");
  absl::Status st = CheckSubmission(admin, cluster, &s);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("project: the cluster has no project "
                                      "'nowhere' (it has search, research)"));
  // Without `projects:` in the spec, any project name goes.
  Cluster open = cluster;
  open.projects.clear();
  s = Job("nowhere", "normal");
  EXPECT_TRUE(CheckSubmission(admin, open, &s).ok());
  s = Job("nowhere", "high");
  EXPECT_FALSE(CheckSubmission(User({"*"}), open, &s).ok());
}

TEST(SubmissionPolicyTest, OnlyAnAdminNamesAnotherUserOrRoot) {
  const Cluster cluster = WithProjects();
  JobSpec s = Job("search", "normal");
  s.user = "bob";
  EXPECT_EQ(CheckSubmission(User({"*"}), cluster, &s).code(),
            absl::StatusCode::kPermissionDenied);
  Principal root_named = User({"*"});
  root_named.user = "root";
  s = Job("search", "normal");
  EXPECT_EQ(CheckSubmission(root_named, cluster, &s).code(),
            absl::StatusCode::kPermissionDenied);
  s = Job("search", "normal");
  s.user = "root";
  EXPECT_TRUE(
      CheckSubmission({.user = "ops", .role = Role::kAdmin}, cluster, &s).ok());
  s = Job("research", "normal");
  EXPECT_EQ(CheckSubmission(User({"search"}), cluster, &s).code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace loom
