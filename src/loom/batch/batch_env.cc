#include "loom/batch/batch_env.h"

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "loom/common/hostlist.h"

namespace loom::batch {
namespace {

std::optional<int64_t> IntOf(const Env& env, const std::string& name) {
  auto it = env.find(name);
  int64_t v = 0;
  if (it == env.end() || !absl::SimpleAtoi(it->second, &v)) return std::nullopt;
  return v;
}

std::string Get(const Env& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

int CountGpus(const std::string& visible) {
  if (visible.empty()) return 0;
  int n = 1;
  for (char c : visible) n += c == ',';
  return n;
}

}  // namespace

BatchRuntime RuntimeFromEnv(const Env& env) {
  BatchRuntime rt;
  rt.job_id = static_cast<uint64_t>(IntOf(env, "LOOM_JOB_ID").value_or(0));
  if (auto a = IntOf(env, "LOOM_ARRAY_JOB_ID")) {
    rt.array_job_id = static_cast<uint64_t>(*a);
  }
  auto small = [&](const char* name) -> std::optional<int> {
    if (auto v = IntOf(env, name)) return static_cast<int>(*v);
    return std::nullopt;
  };
  rt.array_task_id = small("LOOM_ARRAY_TASK_ID");
  rt.array_task_count = small("LOOM_ARRAY_TASK_COUNT");
  rt.array_task_min = small("LOOM_ARRAY_TASK_MIN");
  rt.array_task_max = small("LOOM_ARRAY_TASK_MAX");
  rt.restart_count = small("LOOM_RESTART_COUNT").value_or(0);
  rt.user = Get(env, "LOOM_JOB_USER");
  if (rt.user.empty()) rt.user = Get(env, "USER");
  return rt;
}

Env NodeEnvironment(const Env& task_env) {
  Env node;
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "LOOM_NODE",
                           "LOOM_NODE_HOST", "LOOM_CHECKPOINT_DIR"}) {
    if (auto it = task_env.find(name); it != task_env.end()) {
      node[name] = it->second;
    }
  }
  const std::string gpus = Get(task_env, "CUDA_VISIBLE_DEVICES");
  node["SLURM_GPUS_ON_NODE"] = std::to_string(CountGpus(gpus));
  node["SLURM_JOB_GPUS"] = gpus;
  node["SLURMD_NODENAME"] = Get(task_env, "LOOM_NODE");
  return node;
}

Env ScriptEnvironment(const Env& task_env, const BatchInvocation& b,
                      const BatchRuntime& rt, const std::string& shim_dir,
                      const std::string& socket_path) {
  Env env = task_env;
  for (const char* name : kTorchContract) env.erase(name);
  for (const auto& [k, v] : NodeEnvironment(task_env)) env[k] = v;
  std::vector<std::string> hosts;
  for (const AllocationNode& n : rt.nodes) hosts.push_back(n.host);
  const std::string nodelist = CompressHostlist(hosts);
  const std::string id = std::to_string(rt.job_id);
  const std::string nnodes = std::to_string(rt.nodes.size());
  const std::string ntasks = std::to_string(b.ntasks);
  env["SLURM_JOB_ID"] = id;
  env["SLURM_JOBID"] = id;
  env["SLURM_JOB_NAME"] = b.job_name;
  env["SLURM_JOB_NODELIST"] = nodelist;
  env["SLURM_NODELIST"] = nodelist;
  env["SLURM_JOB_NUM_NODES"] = nnodes;
  env["SLURM_NNODES"] = nnodes;
  env["SLURM_NTASKS"] = ntasks;
  env["SLURM_NPROCS"] = ntasks;
  // The job's tasks over all of its nodes (--ntasks-per-node is then a
  // maximum), as a plain srun lays them out.
  SrunOptions whole;
  if (!rt.nodes.empty()) whole.nodes = static_cast<int>(rt.nodes.size());
  whole.ntasks = b.ntasks;
  whole.ntasks_per_node = b.ntasks_per_node;
  if (absl::StatusOr<StepPlan> plan = PlanStep(whole, rt.nodes, b.ntasks);
      plan.ok()) {
    env["SLURM_TASKS_PER_NODE"] = plan->tasks_per_node;
  }
  if (b.ntasks_per_node) {
    env["SLURM_NTASKS_PER_NODE"] = std::to_string(*b.ntasks_per_node);
  }
  if (b.cpus_per_task) {
    env["SLURM_CPUS_PER_TASK"] = std::to_string(*b.cpus_per_task);
  }
  if (b.gpus_per_node) {
    env["SLURM_GPUS_PER_NODE"] = std::to_string(*b.gpus_per_node);
  }
  env["SLURM_SUBMIT_DIR"] = b.submit_dir;
  env["SLURM_SUBMIT_HOST"] = b.submit_host;
  env["SLURM_JOB_ACCOUNT"] = b.account;
  if (!b.partition.empty()) env["SLURM_JOB_PARTITION"] = b.partition;
  env["SLURM_JOB_USER"] = rt.user;
  env["SLURM_CLUSTER_NAME"] = "loom";
  env["SLURM_NODEID"] = "0";
  env["SLURM_PROCID"] = "0";
  env["SLURM_LOCALID"] = "0";
  env["SLURM_RESTART_COUNT"] = std::to_string(rt.restart_count);
  if (rt.array_job_id && rt.array_task_id) {
    env["SLURM_ARRAY_JOB_ID"] = std::to_string(*rt.array_job_id);
    env["SLURM_ARRAY_TASK_ID"] = std::to_string(*rt.array_task_id);
    if (rt.array_task_count) {
      env["SLURM_ARRAY_TASK_COUNT"] = std::to_string(*rt.array_task_count);
    }
    if (rt.array_task_min) {
      env["SLURM_ARRAY_TASK_MIN"] = std::to_string(*rt.array_task_min);
    }
    if (rt.array_task_max) {
      env["SLURM_ARRAY_TASK_MAX"] = std::to_string(*rt.array_task_max);
    }
  }
  const std::string path = Get(task_env, "PATH");
  env["PATH"] = path.empty() ? shim_dir : absl::StrCat(shim_dir, ":", path);
  env["LOOM_BATCH_SOCKET"] = socket_path;
  return env;
}

Env StepTaskEnvironment(const Env& srun_env, const Env& node_env,
                        const std::vector<AllocationNode>& alloc,
                        const StepPlan& plan, uint32_t step_id,
                        size_t step_node, int localid, int master_port) {
  Env env = srun_env;
  for (const auto& [k, v] : node_env) env[k] = v;
  const StepNodePlan& here = plan.nodes[step_node];
  const int procid = here.first_procid + localid;
  const std::string step = std::to_string(step_id);
  const std::string ntasks = std::to_string(plan.ntasks);
  const std::string nnodes = std::to_string(plan.nodes.size());
  env["SLURM_STEP_ID"] = step;
  env["SLURM_STEPID"] = step;
  env["SLURM_STEP_NUM_TASKS"] = ntasks;
  env["SLURM_STEP_NUM_NODES"] = nnodes;
  env["SLURM_STEP_NODELIST"] = plan.nodelist;
  env["SLURM_STEP_TASKS_PER_NODE"] = plan.tasks_per_node;
  env["SLURM_NTASKS"] = ntasks;
  env["SLURM_NPROCS"] = ntasks;
  env["SLURM_NNODES"] = nnodes;
  env["SLURM_NODELIST"] = plan.nodelist;
  env["SLURM_TASKS_PER_NODE"] = plan.tasks_per_node;
  env["SLURM_PROCID"] = std::to_string(procid);
  env["SLURM_LOCALID"] = std::to_string(localid);
  env["SLURM_NODEID"] = std::to_string(step_node);
  env["RANK"] = std::to_string(procid);
  env["LOCAL_RANK"] = std::to_string(localid);
  env["WORLD_SIZE"] = ntasks;
  env["LOCAL_WORLD_SIZE"] = std::to_string(here.tasks);
  env["NODE_RANK"] = std::to_string(step_node);
  env["GROUP_RANK"] = std::to_string(step_node);
  if (!env.contains("MASTER_ADDR") && !plan.nodes.empty()) {
    env["MASTER_ADDR"] = alloc[plan.nodes[0].node].host;
  }
  if (!env.contains("MASTER_PORT")) {
    env["MASTER_PORT"] = std::to_string(master_port);
  }
  return env;
}

}  // namespace loom::batch
