#pragma once

// What `GET /metrics` of an agent shows: each GPU of each node (real ones
// from NVML now, emulated ones made up) with the job that holds it, and each
// running task's CPU and memory (agent_metrics.h writes the text).

#include <string>

#include "absl/time/time.h"
#include "loom/agent/gpu_probe.h"
#include "loom/agent/node_table.h"

namespace loom {

struct TelemetrySources {
  // Real GPUs (null when emulated). Not owned.
  GpuProbe* probe = nullptr;
  const NvmlXidWatcher* xid_watcher = nullptr;
  // Fake tasks have no processes to measure.
  bool fake_tasks = false;
};

// The agent's metrics text (Prometheus exposition format) at `now`.
std::string CollectAgentMetrics(const NodeTable& nodes,
                                const TelemetrySources& sources,
                                absl::Time now);

}  // namespace loom
