#include "loom/agent/agent_metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loom/common/fnv.h"

namespace loom {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

uint64_t Mix(std::string_view text, uint64_t seed) {
  uint64_t h = Fnv1a64(text, seed * 0x9E3779B97F4A7C15ULL);
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  return h;
}

// A number in [lo, hi) from (uuid, salt, second).
double Between(const GpuDevice& gpu, uint64_t salt, int64_t second, double lo,
               double hi) {
  const uint64_t h = Mix(gpu.uuid, salt * 1000003ULL + second);
  return lo + (hi - lo) * static_cast<double>(h % 10000) / 10000.0;
}

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

}  // namespace

void EmulateTelemetry(GpuDevice& gpu, bool busy, bool failed, absl::Time now) {
  const int64_t second = absl::ToUnixSeconds(now);
  const double mem = static_cast<double>(gpu.memory_bytes);
  if (busy && !failed) {
    gpu.utilization_percent = std::round(Between(gpu, 1, second, 85, 99.5));
    gpu.memory_used_bytes =
        static_cast<int64_t>(mem * Between(gpu, 2, second / 60, 0.70, 0.92));
    gpu.temperature_c = std::round(Between(gpu, 3, second, 62, 76));
    gpu.power_watts = std::round(Between(gpu, 4, second, 520, 660));
    gpu.sm_clock_mhz = 1980;
  } else {
    gpu.utilization_percent = 0;
    gpu.memory_used_bytes = failed ? 0 : 512 * 1024 * 1024;
    gpu.temperature_c = std::round(Between(gpu, 3, second, 31, 37));
    gpu.power_watts = failed ? 0 : std::round(Between(gpu, 4, second, 72, 90));
    gpu.sm_clock_mhz = failed ? 0 : 345;
  }
}

void WriteAgentMetrics(MetricsWriter& out,
                       const std::vector<GpuMetricsRow>& gpus,
                       const std::vector<TaskUsageRow>& tasks) {
  auto labels = [](const GpuMetricsRow& r) {
    return MetricLabels{{"gpu", std::to_string(r.gpu.index)},
                        {"UUID", r.gpu.uuid},
                        {"device", absl::StrCat("nvidia", r.gpu.index)},
                        {"modelName", r.gpu.name},
                        {"Hostname", r.hostname},
                        {"node", r.node},
                        {"job", r.job > 0 ? std::to_string(r.job) : ""},
                        {"emulated", r.emulated ? "true" : "false"}};
  };
  struct Field {
    const char* name;
    const char* help;
    double (*value)(const GpuMetricsRow&);
  };
  static const Field kFields[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).",
       [](const GpuMetricsRow& r) { return r.gpu.utilization_percent; }},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).",
       [](const GpuMetricsRow& r) {
         return r.gpu.memory_used_bytes < 0
                    ? -1.0
                    : std::floor(r.gpu.memory_used_bytes / kMiB);
       }},
      {"DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).",
       [](const GpuMetricsRow& r) {
         return r.gpu.memory_used_bytes < 0
                    ? -1.0
                    : std::floor(
                          (r.gpu.memory_bytes - r.gpu.memory_used_bytes) /
                          kMiB);
       }},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).",
       [](const GpuMetricsRow& r) { return r.gpu.temperature_c; }},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).",
       [](const GpuMetricsRow& r) { return r.gpu.power_watts; }},
      {"DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).",
       [](const GpuMetricsRow& r) { return r.gpu.sm_clock_mhz; }},
      {"DCGM_FI_DEV_XID_ERRORS",
       "Value of the last XID error encountered (0: none).",
       [](const GpuMetricsRow& r) { return static_cast<double>(r.xid); }},
  };
  for (const Field& f : kFields) {
    out.Family(f.name, f.help, MetricType::kGauge);
    for (const GpuMetricsRow& r : gpus) {
      const double v = f.value(r);
      if (v < 0) continue;  // not known: not exported (as DCGM does)
      out.Sample(f.name, labels(r), v);
    }
  }
  out.Family("loom_task_cpu_seconds_total",
             "CPU time (user and system) of a task's processes.",
             MetricType::kCounter);
  for (const TaskUsageRow& t : tasks) {
    out.Sample("loom_task_cpu_seconds_total",
               {{"node", t.node},
                {"job", std::to_string(t.job)},
                {"task", std::to_string(t.task_index)},
                {"task_id", t.task_id}},
               t.cpu_seconds);
  }
  out.Family("loom_task_memory_bytes", "Resident memory of a task's processes.",
             MetricType::kGauge);
  for (const TaskUsageRow& t : tasks) {
    out.Sample("loom_task_memory_bytes",
               {{"node", t.node},
                {"job", std::to_string(t.job)},
                {"task", std::to_string(t.task_index)},
                {"task_id", t.task_id}},
               static_cast<double>(t.rss_bytes));
  }
}

std::map<pid_t, GroupUsage> ReadProcessGroupUsage(
    const std::string& proc_root) {
  std::map<pid_t, GroupUsage> out;
  DIR* dir = opendir(proc_root.c_str());
  if (dir == nullptr) return out;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const int64_t page = sysconf(_SC_PAGESIZE);
  std::string text;
  while (dirent* e = readdir(dir)) {
    int pid = 0;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    if (!ReadFile(absl::StrCat(proc_root, "/", pid, "/stat"), &text)) continue;
    // "pid (comm) state ppid pgrp ...": comm may hold spaces and parens.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<absl::string_view> f = absl::StrSplit(
        absl::string_view(text).substr(close + 1), ' ', absl::SkipEmpty());
    // f[0] is field 3 (state): pgrp is field 5, utime 14, stime 15, rss 24.
    if (f.size() < 22) continue;
    int pgrp = 0;
    double utime = 0, stime = 0;
    int64_t rss = 0;
    if (!absl::SimpleAtoi(f[2], &pgrp) || !absl::SimpleAtod(f[11], &utime) ||
        !absl::SimpleAtod(f[12], &stime) || !absl::SimpleAtoi(f[21], &rss)) {
      continue;
    }
    GroupUsage& g = out[pgrp];
    g.cpu_seconds += (utime + stime) / ticks;
    g.rss_bytes += rss * page;
  }
  closedir(dir);
  return out;
}

std::vector<int> VisibleGpusOf(pid_t pid, const std::string& proc_root) {
  std::string env;
  std::vector<int> gpus;
  if (!ReadFile(absl::StrCat(proc_root, "/", pid, "/environ"), &env)) {
    return gpus;
  }
  for (absl::string_view var : absl::StrSplit(env, '\0')) {
    if (!absl::ConsumePrefix(&var, "CUDA_VISIBLE_DEVICES=")) continue;
    for (absl::string_view g : absl::StrSplit(var, ',', absl::SkipEmpty())) {
      int index = 0;
      if (absl::SimpleAtoi(g, &index) && index >= 0) gpus.push_back(index);
    }
  }
  return gpus;
}

}  // namespace loom
