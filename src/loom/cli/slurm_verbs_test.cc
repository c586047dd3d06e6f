// `loom scontrol` (slurm_verbs.cc).

#include "gtest/gtest.h"
#include "loom/cli/cli_test_util.h"

namespace loom {
namespace {

TEST_F(VerbTest, ScontrolShowHostnamesExpandsTheJobsNodeList) {
  CliResult r = Run({"scontrol", "show", "hostnames", "node[01-03],gpu7"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "node01\nnode02\nnode03\ngpu7\n");
  // In a batch job: $SLURM_JOB_NODELIST, and `head -1` is the head node.
  env_["SLURM_JOB_NODELIST"] = "127.0.0.[2-3]";
  r = Run({"scontrol", "show", "hostnames"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "127.0.0.2\n127.0.0.3\n");
  r = Run({"scontrol", "show", "hostlist", "n3,n1,n2"});
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "n[1-3]\n");
}

TEST_F(VerbTest, ScontrolRefusesWhatItDoesNotDo) {
  CliResult r = Run({"scontrol", "show", "hostnames", "n[3-1]"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("n[3-1]"), std::string::npos) << r.err;
  r = Run({"scontrol", "update", "job", "12"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("show hostnames"), std::string::npos) << r.err;
  r = Run({"scontrol", "show", "hostnames"});  // no list, no job
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("SLURM_JOB_NODELIST"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace loom
