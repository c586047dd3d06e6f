// `loom scontrol` (slurm_verbs.cc).

#include <mutex>
#include <string>
#include <vector>

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

TEST_F(VerbTest, SbatchSubmitsTheScriptAsABatchJob) {
  const std::string script = TempFile("train.sh",
                                      "#!/bin/bash\n"
                                      "#SBATCH -J sweep -N 2\n"
                                      "#SBATCH --gpus-per-node=4 -o o-%j.txt\n"
                                      "#SBATCH --mail-type=END\n"
                                      "srun python3 train.py\n");
  env_["HF_HOME"] = "/data/hf";
  env_["SLURM_JOB_ID"] = "7";  // never passed on
  // The command line wins over the directives.
  CliResult r = Run(
      {"sbatch", "--ntasks-per-node", "2", "-N", "3", script, "--lr", "0.1"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "Submitted batch job 42\n");
  EXPECT_NE(r.err.find("warning: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mail-type"), std::string::npos) << r.err;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_EQ(submitted_.value("name", ""), "sweep");
  EXPECT_EQ(submitted_["resources"].value("nodes", 0), 3);
  EXPECT_EQ(submitted_["resources"].value("gpus", 0), 12);
  EXPECT_EQ(submitted_.value("working_dir", ""), "/home/carol/work");
  EXPECT_EQ(submitted_["env"].value("HF_HOME", ""), "/data/hf");
  EXPECT_FALSE(submitted_["env"].contains("SLURM_JOB_ID"));
  const std::vector<std::string> command =
      submitted_["command"].get<std::vector<std::string>>();
  ASSERT_GE(command.size(), 4u);
  EXPECT_EQ(command[0], "loom");
  EXPECT_EQ(command[1], "_batch");
  EXPECT_EQ(command[2], "--ntasks=6");
  EXPECT_EQ(command[command.size() - 2], "--lr");
  EXPECT_EQ(command.back(), "0.1");
}

TEST_F(VerbTest, SbatchParsableAndExclusive) {
  const std::string script =
      TempFile("x.sh", "#!/bin/sh\n#SBATCH --exclusive -p a100\nsrun true\n");
  CliResult r = Run({"sbatch", "--parsable", script});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "42\n");
  std::lock_guard<std::mutex> lock(mu_);
  // --exclusive: the partition's whole node (4 GPUs in the fake's a100).
  EXPECT_EQ(submitted_["resources"].value("gpus", 0), 4);
}

TEST_F(VerbTest, SbatchRefusesBadScriptsWithTheirLine) {
  const std::string bad =
      TempFile("bad.sh", "#!/bin/sh\n#SBATCH -N 1\n#SBATCH --frobnicate\n");
  CliResult r = Run({"sbatch", bad});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("bad.sh: line 3: unknown option \"--frobnicate\""),
            std::string::npos)
      << r.err;
  r = Run({"sbatch", "/nonexistent/job.sh"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("/nonexistent/job.sh: cannot be read"),
            std::string::npos)
      << r.err;
  r = Run({"sbatch", "--nodes", "x", bad});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--nodes"), std::string::npos) << r.err;
  const std::string no_shebang = TempFile("n.sh", "srun true\n");
  r = Run({"sbatch", "-G", "1", no_shebang});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("#!"), std::string::npos) << r.err;
  std::lock_guard<std::mutex> lock(mu_);
  EXPECT_TRUE(submitted_.is_null()) << submitted_.dump();
}

}  // namespace
}  // namespace loom
