#pragma once

// What `GET /metrics` of `loom agent` exports (docs/metrics.md): GPU telemetry
// under the names and labels of NVIDIA's DCGM exporter (so that existing
// Grafana dashboards work), plus the job holding each GPU, and the CPU and
// memory of each task. Rendering is separate from collection so that it can
// be tested without GPUs or processes.

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "loom/agent/gpu_probe.h"
#include "loom/common/metrics_text.h"

namespace loom {

// One GPU as exported.
struct GpuMetricsRow {
  std::string hostname;  // DCGM's `Hostname`
  std::string node;      // loom's node name
  GpuDevice gpu;         // with telemetry (-1: not known, not exported)
  bool emulated = false;
  // The last Xid error (emulated: 79, "fallen off the bus", for an injected
  // failure); 0: none. -1: not known (real GPUs: Xid events are not read).
  int xid = -1;
  int64_t job = 0;  // the job holding the GPU; 0: idle
};

// One task's resource use: its processes' groups summed.
struct TaskUsageRow {
  std::string node;
  std::string task_id;
  int64_t job = 0;
  int64_t task_index = 0;
  double cpu_seconds = 0;  // user + system, of every process in its groups
  int64_t rss_bytes = 0;
};

// Writes DCGM_FI_DEV_GPU_UTIL, _FB_USED, _FB_FREE (MiB), _GPU_TEMP,
// _POWER_USAGE (W), _SM_CLOCK (MHz) and _XID_ERRORS with the labels gpu, UUID,
// device, modelName, Hostname, plus node, job ("" when idle) and emulated
// ("true"/"false"), then loom_task_cpu_seconds_total and
// loom_task_memory_bytes by node, job, task and task_id.
void WriteAgentMetrics(MetricsWriter& out,
                       const std::vector<GpuMetricsRow>& gpus,
                       const std::vector<TaskUsageRow>& tasks);

// Plausible telemetry for an emulated GPU: busy GPUs at 85-99% utilisation,
// most of their memory used, warm and drawing most of their power; idle
// ones cool and clocked down; failed ones idle. Deterministic in (uuid,
// time to the second).
void EmulateTelemetry(GpuDevice& gpu, bool busy, bool failed, absl::Time now);

// CPU seconds and resident memory per process group, from `proc_root`
// (/proc): every process is counted in its group. Unreadable entries (a
// process that just ended) are skipped.
struct GroupUsage {
  double cpu_seconds = 0;
  int64_t rss_bytes = 0;
};
std::map<pid_t, GroupUsage> ReadProcessGroupUsage(
    const std::string& proc_root = "/proc");

// CUDA_VISIBLE_DEVICES of a running process (from /proc/PID/environ), as GPU
// indices; empty when unreadable or not set.
std::vector<int> VisibleGpusOf(pid_t pid,
                               const std::string& proc_root = "/proc");

}  // namespace loom
