#include "loom/sim/workload.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "loom/sched/placement.h"

namespace loom {

absl::StatusOr<TimeLimitMode> ParseTimeLimitMode(std::string_view text) {
  TimeLimitMode mode;
  if (text == "none") return mode;
  if (text == "exact") {
    mode.kind = TimeLimitMode::Kind::kExact;
    return mode;
  }
  constexpr std::string_view kPrefix = "overestimate:";
  if (text.substr(0, kPrefix.size()) == kPrefix) {
    double k = 0;
    if (absl::SimpleAtod(std::string(text.substr(kPrefix.size())), &k) &&
        k >= 1.0 && k <= 1000.0) {
      mode.kind = TimeLimitMode::Kind::kOverestimate;
      mode.factor = k;
      return mode;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--time-limits: '", std::string(text),
                   "' is not none, exact or overestimate:K with 1 <= K <= "
                   "1000"));
}

namespace {

// A GPU's memory when the cluster's models declare none.
constexpr int64_t kSliceFallbackGpuMemory = int64_t{80} << 30;

// Splits `total` GPUs into equal tasks that each fit a node of `per_node`.
JobShape ShapeFor(int total, int per_node) {
  absl::StatusOr<JobShape> s = ShapeFromTotalGpus(total, per_node);
  if (s.ok()) return *s;
  JobShape shape;
  int g = per_node;
  while (g > 1 && total % g != 0) --g;
  shape.tasks = total / g;
  shape.gpus_per_task = g;
  return shape;
}

}  // namespace

Workload BuildWorkload(const Trace& trace, const Cluster& cluster,
                       const WorkloadOptions& options) {
  Workload w;
  std::mt19937_64 rng(options.seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int max_node = 0;
  std::vector<int> model_max(cluster.gpu_models.size(), 0);
  double slowest_any = 1e9;
  for (const NodeSpec& n : cluster.nodes) {
    max_node = std::max(max_node, n.gpus);
    model_max[n.gpu_model] = std::max(model_max[n.gpu_model], n.gpus);
    slowest_any = std::min(slowest_any, cluster.gpu_models[n.gpu_model].speed);
  }
  const PriorityClass* normal = cluster.FindPriorityClass("normal");
  int64_t smallest_memory = 0;
  for (const GpuModel& m : cluster.gpu_models) {
    if (m.memory_bytes > 0 &&
        (smallest_memory == 0 || m.memory_bytes < smallest_memory)) {
      smallest_memory = m.memory_bytes;
    }
  }
  if (smallest_memory == 0) smallest_memory = kSliceFallbackGpuMemory;
  JobId next_id = 1;
  for (const TraceJob& t : trace.jobs) {
    if (options.limit > 0 &&
        static_cast<int64_t>(w.jobs.size()) >= options.limit) {
      break;
    }
    SimJob job;
    JobRequest& r = job.request;
    r.id = next_id;
    r.name = t.id;
    r.project = t.project.empty() ? "default" : t.project;
    r.user = t.user.empty() ? r.project : t.user;
    r.kind = JobKind::kTrain;
    GpuModelId model = kAnyGpuModel;
    if (!t.gpu_model_choices.empty()) {
      // Several models allowed: the one the cluster has, or any model when
      // it has several of them (a job shape names one model or any).
      std::vector<GpuModelId> have;
      for (const std::string& name : t.gpu_model_choices) {
        if (GpuModelId m = cluster.FindGpuModel(name); m >= 0) {
          have.push_back(m);
        }
      }
      if (have.empty()) {
        w.issues.push_back(
            {t.line,
             absl::StrCat("gpu_model: the cluster has none of '",
                          absl::StrJoin(t.gpu_model_choices, "|"), "'")});
        continue;
      }
      model = have.size() == 1 ? have[0] : kAnyGpuModel;
    } else if (!t.gpu_model.empty() && t.gpu_model != "any") {
      model = cluster.FindGpuModel(t.gpu_model);
      if (model < 0) {
        w.issues.push_back(
            {t.line, absl::StrCat("gpu_model: the cluster has no '",
                                  t.gpu_model, "' GPUs")});
        continue;
      }
    }
    if (t.priority.empty()) {
      r.priority = normal != nullptr ? normal->value : 100;
    } else if (const PriorityClass* pc =
                   cluster.FindPriorityClass(t.priority)) {
      r.priority = pc->value;
    } else {
      w.issues.push_back(
          {t.line, absl::StrCat("priority: unknown class '", t.priority, "'")});
      continue;
    }
    // Trace jobs may be preempted unless the trace says otherwise.
    r.preemptible = t.preemptible.value_or(true);
    const int per_node = model == kAnyGpuModel ? max_node : model_max[model];
    r.shape = ShapeFor(t.num_gpus, std::max(per_node, 1));
    r.shape.gpu_model = model;
    if (t.gpu_milli > 0) {
      // A share of one GPU: that fraction of the GPU's memory (of the
      // smallest GPU the job may land on; 1000 MiB on a node-list cluster,
      // so gpu_milli MiB).
      const int64_t memory = model == kAnyGpuModel
                                 ? smallest_memory
                                 : cluster.gpu_models[model].memory_bytes;
      r.shape.slice.share_bytes =
          std::max<int64_t>(1, memory / 1000 * t.gpu_milli);
    }
    if (t.cpu_milli > 0) {
      r.shape.cpus_milli_per_task = t.cpu_milli / r.shape.tasks;
    }
    if (t.memory_mib > 0) {
      r.shape.memory_bytes_per_task = (t.memory_mib << 20) / r.shape.tasks;
    }
    job.submit_s = t.submit_s * options.arrival_scale;
    job.duration_s = t.duration_s;
    job.trace_id = t.id;
    r.submit_time = absl::UnixEpoch() + absl::Seconds(job.submit_s);
    // A limit is wall time: the run time on the slowest GPU the job may get.
    const double slowest =
        model == kAnyGpuModel ? slowest_any : cluster.gpu_models[model].speed;
    const double exact = t.duration_s / std::max(slowest, 1e-6);
    double limit_s = -1;
    if (t.time_limit_s.has_value()) {
      limit_s = *t.time_limit_s;
    } else if (options.time_limits.kind == TimeLimitMode::Kind::kExact) {
      limit_s = exact;
    } else if (options.time_limits.kind == TimeLimitMode::Kind::kOverestimate) {
      limit_s = exact * (1.0 + (options.time_limits.factor - 1.0) * unit(rng));
    }
    if (limit_s > 0) r.time_limit = absl::Seconds(std::ceil(limit_s));
    w.jobs.push_back(std::move(job));
    ++next_id;
  }
  return w;
}

TargetWorkload TargetWorkloadOf(const std::vector<SimJob>& jobs) {
  std::vector<TaskType> counted;
  counted.reserve(jobs.size());
  for (const SimJob& j : jobs) {
    if (j.gang) continue;
    const JobShape& s = j.request.shape;
    TaskType t;
    t.gpu_model = s.gpu_model;
    t.gpus = s.slice.share_bytes > 0 ? 0 : s.gpus_per_task;
    t.share_bytes = s.slice.share_bytes;
    t.cpus_milli = s.cpus_milli_per_task;
    t.memory_bytes = s.memory_bytes_per_task;
    t.popularity = s.tasks;
    if (!s.slice.mig.empty()) continue;  // MIG is not in the measure
    counted.push_back(t);
  }
  return MakeTargetWorkload(counted);
}

absl::StatusOr<GangSpec> ParseGangSpec(std::string_view text) {
  const std::string whole(text);
  std::vector<std::string> parts = absl::StrSplit(whole, ':');
  GangSpec g;
  double nodes = 0;
  bool ok = (parts.size() == 2 || parts.size() == 3) &&
            absl::SimpleAtod(parts[0], &nodes) && nodes >= 1 && nodes <= 1e6 &&
            nodes == std::floor(nodes) &&
            absl::SimpleAtod(parts[1], &g.hours) && g.hours > 0 &&
            g.hours <= 24 * 3650;
  if (ok && parts.size() == 3) {
    ok = absl::SimpleAtoi(parts[2], &g.spares) && g.spares >= 0 &&
         g.spares <= kMaxSpares;
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gang: '", std::string(text),
        "' is not NODES:HOURS[:SPARES] (NODES a positive whole number, HOURS "
        "positive, SPARES 0 to ",
        kMaxSpares, ")"));
  }
  g.nodes = static_cast<int>(nodes);
  return g;
}

absl::Status AddGang(const GangSpec& gang, const Cluster& cluster,
                     Workload* workload) {
  // Whole nodes of the largest size; its GPU model (the first such node's).
  int per_node = 0;
  GpuModelId model = 0;
  for (const NodeSpec& n : cluster.nodes) {
    if (n.gpus > per_node) {
      per_node = n.gpus;
      model = n.gpu_model;
    }
  }
  int count = 0;
  for (const NodeSpec& n : cluster.nodes) {
    count += n.gpus == per_node && n.gpu_model == model ? 1 : 0;
  }
  if (per_node == 0 || gang.nodes > count) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gang: ", gang.nodes, " nodes of ", per_node, " ",
                     per_node > 0 ? cluster.gpu_models[model].name : "",
                     " GPUs; the cluster has ", count));
  }
  SimJob job;
  JobRequest& r = job.request;
  r.name = absl::StrCat("gang-", gang.nodes, "x", per_node);
  r.project = "pretrain";
  r.user = "pretrain";
  r.kind = JobKind::kTrain;
  const PriorityClass* normal = cluster.FindPriorityClass("normal");
  r.priority = normal != nullptr ? normal->value : 100;
  r.preemptible = false;
  r.shape.tasks = gang.nodes;
  r.shape.gpus_per_task = per_node;
  r.shape.gpu_model = model;
  r.spares = gang.spares;
  job.submit_s = workload->jobs.empty() ? 0.0 : workload->jobs.front().submit_s;
  r.submit_time = absl::UnixEpoch() + absl::Seconds(job.submit_s);
  // Useful work in hours on its own GPUs: the trace duration is at speed 1.
  job.duration_s = gang.hours * 3600 * cluster.gpu_models[model].speed;
  job.trace_id = r.name;
  job.gang = true;
  workload->jobs.insert(workload->jobs.begin(), std::move(job));
  for (size_t i = 0; i < workload->jobs.size(); ++i) {
    workload->jobs[i].request.id = static_cast<JobId>(i + 1);
  }
  return absl::OkStatus();
}

OfferedLoad ComputeOfferedLoad(const std::vector<SimJob>& jobs,
                               const Cluster& cluster) {
  OfferedLoad load;
  const int cluster_gpus = cluster.TotalGpus();
  if (jobs.empty() || cluster_gpus <= 0) return load;
  std::vector<std::pair<double, int>> events;
  events.reserve(jobs.size() * 2);
  load.window_start_s = jobs.front().submit_s;
  load.window_end_s = jobs.front().submit_s;
  for (const SimJob& j : jobs) {
    if (!CouldEverRun(cluster, j.request.shape, nullptr)) continue;
    const int gpus = j.request.shape.TotalGpus();
    events.emplace_back(j.submit_s, gpus);
    events.emplace_back(j.submit_s + j.duration_s, -gpus);
    load.window_start_s = std::min(load.window_start_s, j.submit_s);
    load.window_end_s = std::max(load.window_end_s, j.submit_s);
  }
  std::sort(events.begin(), events.end());
  double demand = 0, area = 0, last = load.window_start_s;
  for (const auto& [t, delta] : events) {
    const double a = std::clamp(last, load.window_start_s, load.window_end_s);
    const double b = std::clamp(t, load.window_start_s, load.window_end_s);
    area += demand * (b - a);
    last = t;
    demand += delta;
    load.peak_demand_gpus = std::max(load.peak_demand_gpus, demand);
  }
  const double window = load.window_end_s - load.window_start_s;
  load.mean_demand_gpus = window > 0 ? area / window : demand;
  load.mean_load = load.mean_demand_gpus / cluster_gpus;
  load.peak_load = load.peak_demand_gpus / cluster_gpus;
  return load;
}

}  // namespace loom
