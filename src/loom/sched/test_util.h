#pragma once

// Helpers for sched tests: hand-built clusters and jobs.

#include <string>

#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/job.h"

namespace loom::testing {

// `pools` of (node count, GPU model id) with `gpus` GPUs per node, on a
// uniform tree. Models are the defaults (0 = h200, 1 = a100).
inline Cluster MakeCluster(std::vector<std::pair<int, GpuModelId>> pools,
                           int nodes_per_leaf, int leaves_per_spine,
                           int gpus = 8) {
  Cluster c;
  c.name = "test";
  c.gpu_models = DefaultGpuModels();
  c.priority_classes = DefaultPriorityClasses();
  int id = 0;
  for (size_t p = 0; p < pools.size(); ++p) {
    PoolSpec pool;
    pool.name = c.gpu_models[pools[p].second].name;
    pool.node_count = pools[p].first;
    pool.gpu_model = pools[p].second;
    pool.gpus_per_node = gpus;
    pool.cpus_milli = 64000;
    pool.memory_bytes = int64_t{512} << 30;
    c.pools.push_back(pool);
    for (int i = 0; i < pools[p].first; ++i, ++id) {
      NodeSpec n;
      n.name = pool.name + "-" + std::to_string(i);
      n.pool = static_cast<int>(p);
      n.gpu_model = pool.gpu_model;
      n.gpus = gpus;
      n.cpus_milli = pool.cpus_milli;
      n.memory_bytes = pool.memory_bytes;
      c.nodes.push_back(n);
    }
  }
  c.topology = *Topology::Uniform(id, nodes_per_leaf, leaves_per_spine);
  return c;
}

inline JobRequest MakeJob(JobId id, int tasks, int gpus_per_task,
                          absl::Time submit = absl::UnixEpoch(),
                          GpuModelId model = kAnyGpuModel) {
  JobRequest j;
  j.id = id;
  j.name = "job" + std::to_string(id);
  j.shape.tasks = tasks;
  j.shape.gpus_per_task = gpus_per_task;
  j.shape.gpu_model = model;
  j.submit_time = submit;
  return j;
}

inline absl::Time T(double seconds) {
  return absl::UnixEpoch() + absl::Seconds(seconds);
}

}  // namespace loom::testing
