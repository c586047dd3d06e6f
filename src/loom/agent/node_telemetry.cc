#include "loom/agent/node_telemetry.h"

#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/agent/agent_metrics.h"
#include "loom/agent/mig_control.h"
#include "loom/agent/nic_probe.h"
#include "loom/common/metrics_text.h"

namespace loom {

std::string CollectAgentMetrics(const NodeTable& nodes,
                                const TelemetrySources& sources,
                                absl::Time now) {
  // Real GPUs: telemetry from NVML now (all nodes of a real agent share
  // the host's GPUs).
  std::vector<GpuDevice> real;
  if (sources.probe != nullptr) {
    absl::StatusOr<std::vector<GpuDevice>> probed = sources.probe->Probe();
    if (probed.ok()) real = *std::move(probed);
  }
  std::map<pid_t, GroupUsage> usage;
  if (!sources.fake_tasks) usage = ReadProcessGroupUsage();
  const std::map<int, int64_t> xids = sources.xid_watcher != nullptr
                                          ? sources.xid_watcher->LastXids()
                                          : std::map<int, int64_t>();
  std::vector<GpuMetricsRow> gpus;
  std::vector<TaskUsageRow> tasks;
  for (const auto& node : nodes.nodes()) {
    std::map<int, int64_t> holder;  // GPU index -> job
    {
      absl::MutexLock lock(&node->mu);
      for (const auto& [id, unit] : node->units) {
        if (unit.launching || SummarizeTask(unit).state != "running") continue;
        for (int g : unit.gpus) holder[g] = unit.job_id;
        TaskUsageRow row;
        row.node = node->name;
        row.task_id = id;
        row.job = unit.job_id;
        row.task_index = unit.task_index;
        for (const TaskProcess& p : unit.procs) {
          if (p.pid <= 0) continue;
          if (auto it = usage.find(p.pid); it != usage.end()) {
            row.cpu_seconds += it->second.cpu_seconds;
            row.rss_bytes += it->second.rss_bytes;
          }
        }
        tasks.push_back(std::move(row));
      }
    }
    const uint32_t failed = node->failed_gpus.load();
    for (const GpuDevice& device : node->gpus) {
      GpuMetricsRow row;
      row.hostname = node->host.hostname;
      row.node = node->name;
      row.emulated = node->emulated;
      row.gpu = device;
      auto held = holder.find(device.index);
      row.job = held == holder.end() ? 0 : held->second;
      if (node->emulated) {
        const bool down =
            device.index < 32 && (failed & (1u << device.index)) != 0;
        EmulateTelemetry(row.gpu, row.job != 0, down, now);
        row.xid = down ? 79 : 0;
      } else {
        for (const GpuDevice& r : real) {
          if (r.index == device.index) row.gpu = r;
        }
        if (sources.xid_watcher != nullptr) {
          auto it = xids.find(device.index);
          row.xid = it == xids.end() ? 0 : it->second;
        }
      }
      gpus.push_back(std::move(row));
    }
  }
  std::string text;
  MetricsWriter out(&text);
  WriteAgentMetrics(out, gpus, tasks);
  // Each node's RDMA NICs (nic_probe.h), as an info metric.
  out.Family("loom_agent_nic_info",
             "An RDMA NIC of a node (1): its link rate (Gb/s), NUMA node "
             "and port state.",
             MetricType::kGauge);
  for (const auto& node : nodes.nodes()) {
    for (const NicDevice& nic : node->nics) {
      out.Sample("loom_agent_nic_info",
                 {{"node", node->name},
                  {"nic", nic.name},
                  {"rate_gbps", absl::StrCat(nic.rate_gbps)},
                  {"numa_node", absl::StrCat(nic.numa_node)},
                  {"state", nic.state}},
                 1);
    }
  }
  // Each node's MIG instances (mig_control.h) with DCGM's MIG labels, and
  // the job whose task runs in each.
  out.Family("loom_agent_mig_instance_info",
             "A MIG instance of a GPU (1), with DCGM's labels GPU_I_PROFILE "
             "(NVIDIA's profile name) and GPU_I_ID (its GPU instance id), "
             "its UUID and the job running in it (empty: free).",
             MetricType::kGauge);
  for (const auto& node : nodes.nodes()) {
    if (node->mig == nullptr) continue;
    std::map<std::string, int64_t> job_of;  // MIG UUID -> job
    {
      absl::MutexLock lock(&node->mu);
      for (const auto& [id, unit] : node->units) {
        if (!unit.mig_uuid.empty()) job_of[unit.mig_uuid] = unit.job_id;
      }
    }
    for (const GpuDevice& device : node->gpus) {
      absl::StatusOr<std::vector<MigInstanceInfo>> instances =
          node->mig->List(device.index);
      if (!instances.ok()) continue;
      for (const MigInstanceInfo& in : *instances) {
        auto job = job_of.find(in.uuid);
        out.Sample("loom_agent_mig_instance_info",
                   {{"node", node->name},
                    {"Hostname", node->host.hostname},
                    {"gpu", std::to_string(device.index)},
                    {"UUID", device.uuid},
                    {"GPU_I_PROFILE", in.profile},
                    {"GPU_I_ID", std::to_string(in.gi_id)},
                    {"MIG_UUID", in.uuid},
                    {"job", job == job_of.end() ? std::string()
                                                : std::to_string(job->second)}},
                   1);
      }
    }
  }
  // Each node's image store (docs/images.md) and the tasks waiting on it.
  out.Family("loom_agent_image_store_bytes",
             "Bytes a node's image store holds: layers and root filesystems.",
             MetricType::kGauge);
  for (const auto& node : nodes.nodes()) {
    if (node->images == nullptr) continue;
    out.Sample("loom_agent_image_store_bytes", {{"node", node->name}},
               static_cast<double>(node->images->BytesUsed()));
  }
  out.Family("loom_agent_tasks_pulling_image",
             "Tasks of a node whose processes wait for their image's pull.",
             MetricType::kGauge);
  for (const auto& node : nodes.nodes()) {
    if (node->images == nullptr) continue;
    int pulling = 0;
    {
      absl::MutexLock lock(&node->mu);
      for (const auto& [id, unit] : node->units) pulling += unit.pull ? 1 : 0;
    }
    out.Sample("loom_agent_tasks_pulling_image", {{"node", node->name}},
               pulling);
  }
  return text;
}

}  // namespace loom
