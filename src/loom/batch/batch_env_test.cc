#include "loom/batch/batch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "loom/core/sbatch_job.h"
#include "loom/core/srun_options.h"

namespace loom::batch {
namespace {

using ::testing::Contains;
using ::testing::Key;
using ::testing::Not;
using ::testing::Pair;

// The job's nodes in job order. Node 0 (which runs the script) sorts last
// in the nodelist: gpu3, gpu4, gpu12.
std::vector<AllocationNode> EnvTestAlloc() {
  return {{"node-a", "gpu12"}, {"node-b", "gpu3"}, {"node-c", "gpu4"}};
}

// The head task's environment as the agent gives it.
Env EnvTestTaskEnv() {
  return {
      {"PATH", "/usr/local/bin:/usr/bin:/bin"},
      {"HOME", "/home/alice"},
      {"USER", "alice"},
      {"LOOM_JOB_ID", "4242"},
      {"LOOM_RESTART_COUNT", "2"},
      {"LOOM_NODE", "node-a"},
      {"LOOM_NODE_HOST", "gpu12"},
      {"LOOM_CHECKPOINT_DIR", "/ckpt/4242"},
      {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
      {"LOOM_TOKEN", "secret"},
      // The torch contract of the allocation's control channel.
      {"MASTER_ADDR", "gpu12"},
      {"MASTER_PORT", "29400"},
      {"WORLD_SIZE", "3"},
      {"RANK", "0"},
      {"LOCAL_RANK", "0"},
      {"LOCAL_WORLD_SIZE", "1"},
      {"NODE_RANK", "0"},
      {"GROUP_RANK", "0"},
  };
}

BatchInvocation EnvTestInvocation() {
  BatchInvocation b;
  b.ntasks = 6;
  b.job_name = "train";
  b.submit_dir = "/home/alice/proj";
  b.submit_host = "login1";
  b.account = "vision";
  b.output = "slurm-%j.out";
  b.script = "#!/bin/bash\nsrun hostname\n";
  return b;
}

std::string EnvTestGet(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "<unset>" : it->second;
}

StepPlan EnvTestPlan(const SrunOptions& o,
                     const std::vector<AllocationNode>& alloc,
                     int default_ntasks) {
  absl::StatusOr<StepPlan> plan = PlanStep(o, alloc, default_ntasks);
  EXPECT_TRUE(plan.ok()) << plan.status();
  return plan.ok() ? *plan : StepPlan{};
}

TEST(RuntimeFromEnv, ReadsJobFacts) {
  BatchRuntime rt = RuntimeFromEnv(EnvTestTaskEnv());
  EXPECT_EQ(rt.job_id, 4242u);
  EXPECT_EQ(rt.restart_count, 2);
  EXPECT_EQ(rt.user, "alice");
  EXPECT_FALSE(rt.array_job_id.has_value());
  EXPECT_FALSE(rt.array_task_id.has_value());
  EXPECT_FALSE(rt.array_task_count.has_value());
  EXPECT_FALSE(rt.array_task_min.has_value());
  EXPECT_FALSE(rt.array_task_max.has_value());
  EXPECT_TRUE(rt.nodes.empty());
}

TEST(RuntimeFromEnv, ArrayElement) {
  Env env = EnvTestTaskEnv();
  env["LOOM_ARRAY_JOB_ID"] = "9000000001";  // beyond 32 bits
  env["LOOM_ARRAY_TASK_ID"] = "7";
  env["LOOM_ARRAY_TASK_COUNT"] = "10";
  env["LOOM_ARRAY_TASK_MIN"] = "0";
  env["LOOM_ARRAY_TASK_MAX"] = "9";
  BatchRuntime rt = RuntimeFromEnv(env);
  EXPECT_EQ(rt.array_job_id, uint64_t{9000000001});
  EXPECT_EQ(rt.array_task_id, 7);
  EXPECT_EQ(rt.array_task_count, 10);
  EXPECT_EQ(rt.array_task_min, 0);
  EXPECT_EQ(rt.array_task_max, 9);
}

TEST(RuntimeFromEnv, MissingOrMalformedValuesDefault) {
  BatchRuntime rt = RuntimeFromEnv({{"LOOM_JOB_ID", "x"},
                                    {"LOOM_RESTART_COUNT", ""},
                                    {"LOOM_ARRAY_TASK_ID", "3a"}});
  EXPECT_EQ(rt.job_id, 0u);
  EXPECT_EQ(rt.restart_count, 0);
  EXPECT_EQ(rt.user, "");
  EXPECT_FALSE(rt.array_task_id.has_value());
  EXPECT_EQ(RuntimeFromEnv({}).job_id, 0u);
}

TEST(NodeEnvironment, CountsGpusAndNamesTheNode) {
  Env node = NodeEnvironment(EnvTestTaskEnv());
  EXPECT_EQ(node, (Env{{"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
                       {"LOOM_NODE", "node-a"},
                       {"LOOM_NODE_HOST", "gpu12"},
                       {"LOOM_CHECKPOINT_DIR", "/ckpt/4242"},
                       {"SLURM_GPUS_ON_NODE", "4"},
                       {"SLURM_JOB_GPUS", "0,1,2,3"},
                       {"SLURMD_NODENAME", "node-a"}}));
}

TEST(NodeEnvironment, GpuCounts) {
  EXPECT_EQ(
      NodeEnvironment({{"CUDA_VISIBLE_DEVICES", "5"}}).at("SLURM_GPUS_ON_NODE"),
      "1");
  EXPECT_EQ(NodeEnvironment({{"CUDA_VISIBLE_DEVICES", "GPU-aa,GPU-bb"}})
                .at("SLURM_GPUS_ON_NODE"),
            "2");
  // No GPUs: the count is 0, the list empty, and nothing else is invented.
  Env none = NodeEnvironment({{"HOME", "/root"}});
  EXPECT_EQ(none, (Env{{"SLURM_GPUS_ON_NODE", "0"},
                       {"SLURM_JOB_GPUS", ""},
                       {"SLURMD_NODENAME", ""}}));
  EXPECT_EQ(
      NodeEnvironment({{"CUDA_VISIBLE_DEVICES", ""}}).at("SLURM_GPUS_ON_NODE"),
      "0");
}

TEST(ScriptEnvironment, SlurmVariablesAndNoTorchContract) {
  const Env task = EnvTestTaskEnv();
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = EnvTestAlloc();
  const Env env = ScriptEnvironment(task, EnvTestInvocation(), rt,
                                    "/tmp/loom-batch/bin", "/tmp/s.sock");
  for (const char* name : kTorchContract) {
    EXPECT_THAT(env, Not(Contains(Key(name)))) << name;
  }
  // The rest of the task's environment is kept.
  EXPECT_EQ(EnvTestGet(env, "HOME"), "/home/alice");
  EXPECT_EQ(EnvTestGet(env, "LOOM_TOKEN"), "secret");
  EXPECT_EQ(EnvTestGet(env, "LOOM_CHECKPOINT_DIR"), "/ckpt/4242");

  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_ID"), "4242");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOBID"), "4242");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_NAME"), "train");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_NODELIST"), "gpu[3-4,12]");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NODELIST"), "gpu[3-4,12]");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_NUM_NODES"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NNODES"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NTASKS"), "6");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NPROCS"), "6");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"), "2(x3)");
  EXPECT_EQ(EnvTestGet(env, "SLURM_SUBMIT_DIR"), "/home/alice/proj");
  EXPECT_EQ(EnvTestGet(env, "SLURM_SUBMIT_HOST"), "login1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_ACCOUNT"), "vision");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_USER"), "alice");
  EXPECT_EQ(EnvTestGet(env, "SLURM_CLUSTER_NAME"), "loom");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NODEID"), "0");
  EXPECT_EQ(EnvTestGet(env, "SLURM_PROCID"), "0");
  EXPECT_EQ(EnvTestGet(env, "SLURM_LOCALID"), "0");
  EXPECT_EQ(EnvTestGet(env, "SLURM_RESTART_COUNT"), "2");
  // The node's own variables.
  EXPECT_EQ(EnvTestGet(env, "SLURM_GPUS_ON_NODE"), "4");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_GPUS"), "0,1,2,3");
  EXPECT_EQ(EnvTestGet(env, "SLURMD_NODENAME"), "node-a");
  // Only what was given.
  for (const char* name :
       {"SLURM_JOB_PARTITION", "SLURM_NTASKS_PER_NODE", "SLURM_CPUS_PER_TASK",
        "SLURM_GPUS_PER_NODE", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX"}) {
    EXPECT_THAT(env, Not(Contains(Key(name)))) << name;
  }
  // The shims come first on PATH; the head's socket is named.
  EXPECT_EQ(EnvTestGet(env, "PATH"),
            "/tmp/loom-batch/bin:/usr/local/bin:/usr/bin:/bin");
  EXPECT_EQ(EnvTestGet(env, "LOOM_BATCH_SOCKET"), "/tmp/s.sock");
}

TEST(ScriptEnvironment, OptionalShapeVariables) {
  const Env task = EnvTestTaskEnv();
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = EnvTestAlloc();
  BatchInvocation b = EnvTestInvocation();
  b.ntasks = 5;
  b.ntasks_per_node = 2;
  b.cpus_per_task = 8;
  b.gpus_per_node = 4;
  b.partition = "h200";
  const Env env = ScriptEnvironment(task, b, rt, "/shim", "/sock");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NTASKS"), "5");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"), "2(x2),1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NTASKS_PER_NODE"), "2");
  EXPECT_EQ(EnvTestGet(env, "SLURM_CPUS_PER_TASK"), "8");
  EXPECT_EQ(EnvTestGet(env, "SLURM_GPUS_PER_NODE"), "4");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_PARTITION"), "h200");
}

// sbatch -N 4 -n 8 --ntasks-per-node=4: the job has 4 nodes, so its tasks
// are spread over all 4 (--ntasks-per-node is then a maximum), as a plain
// srun in the script lays them out; not packed onto the 2 nodes that would
// hold them.
TEST(ScriptEnvironment, TasksPerNodeCoversEveryNodeOfTheJob) {
  const Env task = EnvTestTaskEnv();
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = {{"n1", "h1"}, {"n2", "h2"}, {"n3", "h3"}, {"n4", "h4"}};
  BatchInvocation b = EnvTestInvocation();
  b.ntasks = 8;
  b.ntasks_per_node = 4;
  const Env env = ScriptEnvironment(task, b, rt, "/shim", "/sock");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_NUM_NODES"), "4");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"), "2(x4)");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"),
            EnvTestPlan(SrunOptions{}, rt.nodes, b.ntasks).tasks_per_node);
  // More tasks than nodes without a per-node count: blocks, first ones
  // fuller.
  b.ntasks = 6;
  b.ntasks_per_node.reset();
  EXPECT_EQ(EnvTestGet(ScriptEnvironment(task, b, rt, "/shim", "/sock"),
                       "SLURM_TASKS_PER_NODE"),
            "2(x2),1(x2)");
}

TEST(ScriptEnvironment, ArrayVariablesOnlyForArrays) {
  Env task = EnvTestTaskEnv();
  task["LOOM_ARRAY_JOB_ID"] = "4200";
  task["LOOM_ARRAY_TASK_ID"] = "3";
  task["LOOM_ARRAY_TASK_COUNT"] = "8";
  task["LOOM_ARRAY_TASK_MIN"] = "1";
  task["LOOM_ARRAY_TASK_MAX"] = "8";
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = EnvTestAlloc();
  Env env = ScriptEnvironment(task, EnvTestInvocation(), rt, "/shim", "/sock");
  EXPECT_EQ(EnvTestGet(env, "SLURM_ARRAY_JOB_ID"), "4200");
  EXPECT_EQ(EnvTestGet(env, "SLURM_ARRAY_TASK_ID"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_ARRAY_TASK_COUNT"), "8");
  EXPECT_EQ(EnvTestGet(env, "SLURM_ARRAY_TASK_MIN"), "1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_ARRAY_TASK_MAX"), "8");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_ID"), "4242");

  // An array job id without a task id is not an array element.
  rt.array_task_id.reset();
  env = ScriptEnvironment(task, EnvTestInvocation(), rt, "/shim", "/sock");
  EXPECT_THAT(env, Not(Contains(Key("SLURM_ARRAY_JOB_ID"))));
  EXPECT_THAT(env, Not(Contains(Key("SLURM_ARRAY_TASK_ID"))));
}

TEST(ScriptEnvironment, PathIsTheShimDirWhenUnset) {
  Env task = EnvTestTaskEnv();
  task.erase("PATH");
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = EnvTestAlloc();
  Env env = ScriptEnvironment(task, EnvTestInvocation(), rt, "/shim", "/sock");
  EXPECT_EQ(EnvTestGet(env, "PATH"), "/shim");
}

TEST(ScriptEnvironment, OneNode) {
  const Env task = EnvTestTaskEnv();
  BatchRuntime rt = RuntimeFromEnv(task);
  rt.nodes = {{"node-a", "gpu12"}};
  BatchInvocation b = EnvTestInvocation();
  b.ntasks = 1;
  Env env = ScriptEnvironment(task, b, rt, "/shim", "/sock");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_NODELIST"), "gpu12");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"), "1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NNODES"), "1");
}

// A step of 6 tasks over the 3 nodes: gpu3 (alloc 1) runs procids 0-1,
// gpu4 (alloc 2) 2-3 and gpu12 (alloc 0) 4-5.
class StepTaskEnvironmentTest : public ::testing::Test {
 protected:
  void SetUp() override {
    plan_ = EnvTestPlan(SrunOptions{}, alloc_, 6);
    ASSERT_EQ(plan_.nodes,
              (std::vector<StepNodePlan>{{1, 2, 0}, {2, 2, 2}, {0, 2, 4}}));
    srun_env_ = EnvTestTaskEnv();
    for (const char* name : kTorchContract) srun_env_.erase(name);
    srun_env_["SLURM_JOB_ID"] = "4242";
    srun_env_["SLURM_NTASKS"] = "99";  // the job's: replaced by the step's
    srun_env_["SLURM_PROCID"] = "0";
    node_env_ = NodeEnvironment({{"CUDA_VISIBLE_DEVICES", "6,7"},
                                 {"LOOM_NODE", "node-c"},
                                 {"LOOM_NODE_HOST", "gpu4"}});
  }

  std::vector<AllocationNode> alloc_ = EnvTestAlloc();
  StepPlan plan_;
  Env srun_env_;
  Env node_env_;
};

TEST_F(StepTaskEnvironmentTest, RanksFollowTheStep) {
  // The second task on the step's second node (gpu4).
  const Env env = StepTaskEnvironment(srun_env_, node_env_, alloc_, plan_,
                                      /*step_id=*/3, /*step_node=*/1,
                                      /*localid=*/1, /*master_port=*/31337);
  EXPECT_EQ(EnvTestGet(env, "SLURM_PROCID"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_LOCALID"), "1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NODEID"), "1");
  EXPECT_EQ(EnvTestGet(env, "RANK"), "3");
  EXPECT_EQ(EnvTestGet(env, "LOCAL_RANK"), "1");
  EXPECT_EQ(EnvTestGet(env, "WORLD_SIZE"), "6");
  EXPECT_EQ(EnvTestGet(env, "LOCAL_WORLD_SIZE"), "2");
  EXPECT_EQ(EnvTestGet(env, "NODE_RANK"), "1");
  EXPECT_EQ(EnvTestGet(env, "GROUP_RANK"), "1");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_ID"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEPID"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_NUM_TASKS"), "6");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_NUM_NODES"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_NODELIST"), "gpu[3-4,12]");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_TASKS_PER_NODE"), "2(x3)");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NTASKS"), "6");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NPROCS"), "6");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NNODES"), "3");
  EXPECT_EQ(EnvTestGet(env, "SLURM_NODELIST"), "gpu[3-4,12]");
  EXPECT_EQ(EnvTestGet(env, "SLURM_TASKS_PER_NODE"), "2(x3)");
  // MASTER_ADDR is the host of the step's first node (procid 0's), not of
  // the job's node 0.
  EXPECT_EQ(EnvTestGet(env, "MASTER_ADDR"), "gpu3");
  EXPECT_EQ(EnvTestGet(env, "MASTER_PORT"), "31337");
  // The node's variables over srun's; the rest of srun's kept.
  EXPECT_EQ(EnvTestGet(env, "CUDA_VISIBLE_DEVICES"), "6,7");
  EXPECT_EQ(EnvTestGet(env, "SLURM_GPUS_ON_NODE"), "2");
  EXPECT_EQ(EnvTestGet(env, "LOOM_NODE"), "node-c");
  EXPECT_EQ(EnvTestGet(env, "SLURMD_NODENAME"), "node-c");
  EXPECT_EQ(EnvTestGet(env, "HOME"), "/home/alice");
  EXPECT_EQ(EnvTestGet(env, "SLURM_JOB_ID"), "4242");
}

TEST_F(StepTaskEnvironmentTest, ProcidIsFirstProcidPlusLocalid) {
  for (size_t step_node = 0; step_node < plan_.nodes.size(); ++step_node) {
    for (int localid = 0; localid < 2; ++localid) {
      const Env env = StepTaskEnvironment(srun_env_, node_env_, alloc_, plan_,
                                          0, step_node, localid, 29500);
      const std::string procid =
          std::to_string(plan_.nodes[step_node].first_procid + localid);
      EXPECT_EQ(EnvTestGet(env, "SLURM_PROCID"), procid);
      EXPECT_EQ(EnvTestGet(env, "RANK"), procid);
      EXPECT_EQ(EnvTestGet(env, "NODE_RANK"), std::to_string(step_node));
      // Every task of the step agrees on its master.
      EXPECT_EQ(EnvTestGet(env, "MASTER_ADDR"), "gpu3");
    }
  }
}

TEST_F(StepTaskEnvironmentTest, UnevenStep) {
  // -n 5: 2, 2, 1.
  SrunOptions o;
  o.ntasks = 5;
  const StepPlan plan = EnvTestPlan(o, alloc_, 6);
  const Env env = StepTaskEnvironment(srun_env_, node_env_, alloc_, plan, 1,
                                      /*step_node=*/2, /*localid=*/0, 29500);
  EXPECT_EQ(EnvTestGet(env, "SLURM_PROCID"), "4");
  EXPECT_EQ(EnvTestGet(env, "LOCAL_WORLD_SIZE"), "1");
  EXPECT_EQ(EnvTestGet(env, "WORLD_SIZE"), "5");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_TASKS_PER_NODE"), "2(x2),1");
}

TEST_F(StepTaskEnvironmentTest, StepOnLaterNodesOnly) {
  // -x gpu3: the step's first node is gpu4 (alloc 2).
  SrunOptions o;
  o.exclude = "gpu3";
  const StepPlan plan = EnvTestPlan(o, alloc_, 6);
  const Env env =
      StepTaskEnvironment(srun_env_, node_env_, alloc_, plan, 2, 1, 0, 29500);
  EXPECT_EQ(EnvTestGet(env, "MASTER_ADDR"), "gpu4");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_NODELIST"), "gpu[4,12]");
  EXPECT_EQ(EnvTestGet(env, "SLURM_STEP_NUM_NODES"), "2");
}

TEST_F(StepTaskEnvironmentTest, SrunEnvironmentMasterWins) {
  srun_env_["MASTER_ADDR"] = "10.9.9.9";
  Env env =
      StepTaskEnvironment(srun_env_, node_env_, alloc_, plan_, 0, 0, 0, 29500);
  EXPECT_EQ(EnvTestGet(env, "MASTER_ADDR"), "10.9.9.9");
  EXPECT_EQ(EnvTestGet(env, "MASTER_PORT"), "29500");

  srun_env_.erase("MASTER_ADDR");
  srun_env_["MASTER_PORT"] = "12345";
  env =
      StepTaskEnvironment(srun_env_, node_env_, alloc_, plan_, 0, 0, 0, 29500);
  EXPECT_EQ(EnvTestGet(env, "MASTER_ADDR"), "gpu3");
  EXPECT_EQ(EnvTestGet(env, "MASTER_PORT"), "12345");
}

TEST_F(StepTaskEnvironmentTest, RanksFromSrunEnvironmentAreReplaced) {
  srun_env_["RANK"] = "77";
  srun_env_["LOCAL_RANK"] = "77";
  srun_env_["WORLD_SIZE"] = "77";
  srun_env_["LOCAL_WORLD_SIZE"] = "77";
  srun_env_["NODE_RANK"] = "77";
  const Env env =
      StepTaskEnvironment(srun_env_, node_env_, alloc_, plan_, 0, 2, 1, 29500);
  EXPECT_THAT(env, Contains(Pair("RANK", "5")));
  EXPECT_THAT(env, Contains(Pair("LOCAL_RANK", "1")));
  EXPECT_THAT(env, Contains(Pair("WORLD_SIZE", "6")));
  EXPECT_THAT(env, Contains(Pair("LOCAL_WORLD_SIZE", "2")));
  EXPECT_THAT(env, Contains(Pair("NODE_RANK", "2")));
}

}  // namespace
}  // namespace loom::batch
