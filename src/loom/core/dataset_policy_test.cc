#include "loom/core/dataset_policy.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/core/cluster_diff.h"
#include "loom/core/cluster_spec.h"

namespace loom {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kPolicyPools[] =
    "pools:\n"
    "  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, "
    "memory: 2Ti}\n";

absl::StatusOr<Cluster> ParsePolicy(const std::string& extra) {
  return ParseClusterSpec(std::string(kPolicyPools) + extra, "spec.yaml");
}

std::string PolicyError(const std::string& extra) {
  absl::StatusOr<Cluster> c = ParsePolicy(extra);
  EXPECT_FALSE(c.ok()) << extra;
  return c.ok() ? "" : std::string(c.status().message());
}

TEST(DatasetPolicy, DefaultsAllowNoLocalSourceAndMountUnderData) {
  absl::StatusOr<Cluster> c = ParsePolicy("");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->datasets.local_roots.empty());
  EXPECT_THAT(c->datasets.mount_roots, ElementsAre("/data", "/datasets", "/mnt"));
  EXPECT_FALSE(c->pools[0].allow_privilege_escalation);
}

TEST(DatasetPolicy, ParsesRootsAndPrivilegeEscalation) {
  absl::StatusOr<Cluster> c = ParseClusterSpec(
      "pools:\n"
      "  - {name: h200, nodes: 2, gpu: {model: h200, count: 8}, cpus: 192, "
      "memory: 2Ti, allow_privilege_escalation: true}\n"
      "datasets: {local_roots: [/nfs/datasets/, /scratch], "
      "mount_roots: [/data]}\n",
      "spec.yaml");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_THAT(c->datasets.local_roots,
              ElementsAre("/nfs/datasets", "/scratch"));
  EXPECT_THAT(c->datasets.mount_roots, ElementsAre("/data"));
  EXPECT_TRUE(c->pools[0].allow_privilege_escalation);
}

TEST(DatasetPolicy, BadRootsNameTheField) {
  EXPECT_THAT(PolicyError("datasets: {local_roots: [/]}\n"),
              HasSubstr("datasets.local_roots[0]: must not be '/'"));
  EXPECT_THAT(PolicyError("datasets: {local_roots: [nfs]}\n"),
              HasSubstr("datasets.local_roots[0]: must be an absolute path"));
  EXPECT_THAT(PolicyError("datasets: {mount_roots: [/data, /etc]}\n"),
              HasSubstr("datasets.mount_roots[1]: '/etc' is a system "
                        "directory"));
  EXPECT_THAT(PolicyError("datasets: {mount_roots: [/data, /data/]}\n"),
              HasSubstr("'/data' is already listed as datasets.mount_roots[0]"));
  EXPECT_THAT(PolicyError("datasets: {roots: [/x]}\n"), HasSubstr("roots"));
  EXPECT_THAT(PolicyError("datasets: {local_roots: [~]}\n"),
              HasSubstr("datasets.local_roots[0]: has no value"));
}

TEST(DatasetPolicy, SystemDirectories) {
  for (const char* p : {"/", "/etc", "/etc/pam.d", "/usr/lib", "/lib64/x",
                        "/root/x", "/proc/1", "/var/lib/loom", "/bin"}) {
    EXPECT_TRUE(IsSystemDirectory(p)) << p;
  }
  for (const char* p : {"/data", "/datasets/x", "/mnt/a", "/home/a", "/etcx",
                        "/usrdata", "/tmp/x", "/scratch"}) {
    EXPECT_FALSE(IsSystemDirectory(p)) << p;
  }
}

TEST(DatasetPolicy, JobsAreCheckedAgainstThePolicy) {
  DatasetPolicy policy;
  policy.local_roots = {"/nfs/datasets"};
  auto check = [&](std::string source, std::string mount) {
    return CheckJobDatasets(policy, {DatasetSpec{source, mount, ""}});
  };
  EXPECT_TRUE(check("cold:sets/a", "/data/a").ok());
  EXPECT_TRUE(check("/nfs/datasets/a", "/mnt/x/y").ok());
  EXPECT_THAT(check("/etc/shadow", "/data/a").message(),
              HasSubstr("data[0].source: '/etc/shadow' is a local path"));
  EXPECT_THAT(check("/nfs/datasetsx", "/data/a").message(),
              HasSubstr("datasets.local_roots (/nfs/datasets)"));
  EXPECT_THAT(check("cold:a", "/etc/pam.d").message(),
              HasSubstr("data[0].mount: '/etc/pam.d' is a system directory"));
  EXPECT_THAT(check("cold:a", "/home/alice/x").message(),
              HasSubstr("datasets.mount_roots: /data, /datasets, /mnt"));
  // A root itself is not a mount point: it would hide all of it.
  EXPECT_THAT(check("cold:a", "/data").message(), HasSubstr("not under"));
  policy.local_roots.clear();
  EXPECT_THAT(check("/nfs/datasets/a", "/data/a").message(),
              HasSubstr("(none)"));
}

TEST(DatasetPolicy, PlanShowsPolicyChanges) {
  absl::StatusOr<Cluster> a = ParsePolicy("");
  absl::StatusOr<Cluster> b =
      ParsePolicy("datasets: {local_roots: [/nfs], mount_roots: [/data]}\n");
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<std::string> lines;
  for (const ClusterDiffLine& l : DiffClusters(*a, *b)) {
    lines.push_back(FormatDiffLine(l));
  }
  EXPECT_THAT(lines, ElementsAre(HasSubstr("local_roots"),
                                 HasSubstr("mount_roots")));
}

}  // namespace
}  // namespace loom
