#include "loom/cli/sim_command.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "loom/common/fmt_absl.h"
#include "loom/common/units.h"
#include "loom/core/cluster_spec.h"
#include "loom/report/plot.h"
#include "loom/sim/data_cache.h"
#include "loom/sim/openb_cluster.h"
#include "loom/sim/report.h"
#include "loom/sim/simulator.h"
#include "loom/sim/workload.h"
#include "loom/trace/trace.h"

namespace loom {
namespace {

std::string PresetHelp() {
  std::string s = "Built-in clusters (--cluster NAME):\n";
  for (const std::string& name : ClusterPresetNames()) {
    s += fmt::format("  {:<8} {}\n", name, ClusterPresetSummary(name));
  }
  s += "Or --cluster FILE for a cluster spec (docs/cluster-spec.md).\n";
  s += "Trace formats (--format): auto, canonical, philly, itp, alibaba "
       "(docs/trace-formats.md).\n";
  s += "Policies (--policy): fifo, backfill, las, fair (docs/scheduling.md).\n";
  s += "Failure models (--failure-model): llama3 (docs/simulator.md).";
  return s;
}

int Fail(const std::string& message) {
  std::cerr << "loom sim: " << message << "\n";
  return 2;
}

}  // namespace

CLI::App* AddSimCommand(CLI::App& app, SimFlags* f) {
  CLI::App* sim = app.add_subcommand(
      "sim",
      "Replay a job trace against a simulated cluster, one or more "
      "policies side by side");
  sim->footer(PresetHelp());
  sim->add_option("--cluster", f->cluster,
                  "Preset name (small, large), cluster spec YAML file, or a "
                  "node list CSV (Alibaba openb_node_list_gpu_node.csv)")
      ->capture_default_str();
  sim->add_option("--trace", f->trace, "Job trace file (CSV)")->required();
  sim->add_option("--format", f->format,
                  "Trace format: auto, canonical, philly, itp, alibaba")
      ->capture_default_str();
  sim->add_option("--policy", f->policies,
                  "Comma-separated policies, run side by side: fifo, "
                  "backfill, las, fair")
      ->capture_default_str();
  sim->add_option("--arrival-scale", f->arrival_scale,
                  "Multiply submit times by X (< 1 compresses arrivals and "
                  "raises the load)")
      ->capture_default_str();
  sim->add_option("--limit", f->limit, "Replay only the first N jobs (0: all)");
  sim->add_option("--seed", f->seed,
                  "Seed for time-limit estimates and "
                  "failures")
      ->capture_default_str();
  sim->add_option("--time-limits", f->time_limits,
                  "Time limits given to trace jobs: none, exact, or "
                  "overestimate:K (true duration x U[1,K])")
      ->capture_default_str();
  sim->add_option("--fail-mtbf", f->fail_mtbf_s,
                  "Mean time between failures of each node, seconds (0: no "
                  "failures)");
  sim->add_option("--failure-model", f->failure_model,
                  "A named failure model instead of --fail-mtbf: none, or "
                  "llama3 (Llama 3 pre-training: one interruption per ~3.1 h "
                  "across 16,384 GPUs, scaled per GPU; repair 4h, restart "
                  "5min unless --repair-time / --restart-cost say otherwise)")
      ->capture_default_str();
  sim->add_option("--gang", f->gangs,
                  "NODES:HOURS[:SPARES]: add a long pre-training gang of "
                  "NODES whole nodes and HOURS of work, with SPARES hot "
                  "spares, submitted with the first trace job (repeatable)");
  sim->add_option("--checkpoint-interval", f->checkpoint_interval_s,
                  "Jobs checkpoint every this many seconds of run time (0: "
                  "never; a failure loses the whole run)");
  sim->add_option("--repair-time", f->repair_s,
                  "Seconds a failed node stays down (default 3600, or the "
                  "failure model's)");
  sim->add_option("--restart-cost", f->restart_cost_s,
                  "Seconds a job spends restoring when it starts again after "
                  "preemption or failure (default 30, or the failure "
                  "model's)");
  sim->add_option("--mig-repartition-delay", f->mig_repartition_s,
                  "Seconds a job waits when its MIG slice needs its GPU "
                  "partitioned anew (the agent's NVML calls)")
      ->capture_default_str();
  sim->add_option("--restart-max", f->restart_max,
                  "Restart policy of every job: restarts after failures "
                  "(-1: no limit; a job out of restarts fails)")
      ->capture_default_str();
  sim->add_option("--restart-backoff", f->restart_backoff_s,
                  "Restart policy: seconds a failed job waits before it is "
                  "queued again")
      ->capture_default_str();
  sim->add_option("--requeue-max", f->requeue_max,
                  "Requeues after preemption (-1: no limit)")
      ->capture_default_str();
  sim->add_option("--starvation-age", f->starvation_age_s,
                  "fair: a job pending longer than this (seconds) takes the "
                  "reservation ahead of fair-share order")
      ->capture_default_str();
  sim->add_option("--las-thresholds", f->las_thresholds,
                  "las: queue thresholds in GPU-hours of attained service")
      ->capture_default_str();
  sim->add_option("--half-life", f->half_life_s,
                  "fair: half-life of project usage, seconds")
      ->capture_default_str();
  sim->add_option("--slice-score", f->slice_scores,
                  "Comma-separated placement scores for GPU shares, each run "
                  "side by side with every policy: best_fit, fgd "
                  "(fragmentation gradient descent, ATC'23)")
      ->capture_default_str();
  sim->add_flag("--no-departures", f->no_departures,
                "The FGD paper's experiment: jobs never end, and a job that "
                "cannot start on arrival is dropped");
  sim->add_option("--datasets", f->datasets,
                  "D: every job reads one of D datasets, Zipf popularity "
                  "(docs/simulator.md \"Datasets\"); 0: no data model")
      ->capture_default_str();
  sim->add_option("--dataset-sizes", f->dataset_sizes,
                  "MIN:MAX dataset sizes, log-uniform")
      ->capture_default_str();
  sim->add_option("--dataset-zipf", f->dataset_zipf,
                  "Zipf exponent of dataset popularity")
      ->capture_default_str();
  sim->add_option("--node-cache", f->node_cache,
                  "Per-node dataset cache size(s), comma-separated, each run "
                  "side by side (0: unlimited)")
      ->capture_default_str();
  sim->add_option("--cold-store-bw", f->cold_store_bw,
                  "Cold store egress, bytes/s, cluster-wide (10G = 10 GB/s)")
      ->capture_default_str();
  sim->add_option("--node-link-bw", f->node_link_bw,
                  "Node link, bytes/s (50G = 400 Gb/s)")
      ->capture_default_str();
  sim->add_option("--data-mode", f->data_modes,
                  "Comma-separated, each run side by side: both (locality "
                  "and prefetch), locality, prefetch, none")
      ->capture_default_str();
  sim->add_option("--json", f->json, "Write the results as JSON to FILE");
  sim->add_option("--plot", f->plot,
                  "Write a plot to FILE (.html or .svg): utilisation and "
                  "queue length over time, JCT CDF");
  sim->add_flag("--strict", f->strict,
                "Fail on the first bad trace line instead of skipping it");
  sim->add_flag("--quiet", f->quiet, "No progress line");
  sim->add_option("--threads", f->threads,
                  "Policies simulated in parallel (0: one per core)");
  return sim;
}

int RunSim(const SimFlags& f) {
  const auto wall_start = std::chrono::steady_clock::now();
  absl::StatusOr<Cluster> cluster = LoadSimCluster(f.cluster);
  if (!cluster.ok()) {
    return Fail(fmt::format("--cluster: {}", cluster.status().message()));
  }
  absl::StatusOr<TraceFormat> format = ParseTraceFormat(f.format);
  if (!format.ok()) {
    return Fail(fmt::format("--format: {}", format.status().message()));
  }
  absl::StatusOr<TimeLimitMode> limits = ParseTimeLimitMode(f.time_limits);
  if (!limits.ok()) return Fail(std::string(limits.status().message()));
  if (!(f.arrival_scale > 0) || f.arrival_scale > 1e6) {
    return Fail("--arrival-scale: must be a positive number");
  }
  if (f.limit < 0) return Fail("--limit: must not be negative");
  std::optional<FailureModel> model;
  if (f.failure_model != "none") {
    absl::StatusOr<FailureModel> m = FindFailureModel(f.failure_model);
    if (!m.ok()) return Fail(std::string(m.status().message()));
    if (f.fail_mtbf_s != 0) {
      return Fail("--fail-mtbf and --failure-model: give one of them");
    }
    model = *m;
  }
  const double repair_s =
      f.repair_s != -1 ? f.repair_s : (model ? model->repair_s : 3600);
  const double restart_cost_s = f.restart_cost_s != -1
                                    ? f.restart_cost_s
                                    : (model ? model->restart_cost_s : 30);
  std::vector<GangSpec> gangs;
  for (const std::string& text : f.gangs) {
    absl::StatusOr<GangSpec> g = ParseGangSpec(text);
    if (!g.ok()) return Fail(std::string(g.status().message()));
    gangs.push_back(*g);
  }
  if (f.fail_mtbf_s < 0 || f.checkpoint_interval_s < 0 || repair_s < 0 ||
      restart_cost_s < 0 || f.mig_repartition_s < 0 || f.starvation_age_s < 0 ||
      !(f.half_life_s > 0)) {
    return Fail(
        "--fail-mtbf, --checkpoint-interval, --repair-time, --restart-cost, "
        "--mig-repartition-delay, --starvation-age must not be negative; "
        "--half-life must be positive");
  }
  if (f.restart_max < -1 || f.requeue_max < -1 || f.restart_backoff_s < 0) {
    return Fail(
        "--restart-max and --requeue-max must be -1 (no limit) or more; "
        "--restart-backoff must not be negative");
  }
  PolicyOptions popts;
  popts.starvation_age = absl::Seconds(f.starvation_age_s);
  popts.las_thresholds.clear();
  for (absl::string_view part : absl::StrSplit(f.las_thresholds, ',')) {
    double hours = 0;
    if (!absl::SimpleAtod(part, &hours) || !(hours > 0)) {
      return Fail(
          fmt::format("--las-thresholds: '{}' is not a positive "
                      "number of GPU-hours",
                      std::string(part)));
    }
    popts.las_thresholds.push_back(hours * 3600);
  }
  std::vector<SliceScore> scores;
  for (absl::string_view part : absl::StrSplit(f.slice_scores, ',')) {
    absl::StatusOr<SliceScore> s = ParseSliceScore(std::string(part));
    if (!s.ok()) {
      return Fail(fmt::format("--slice-score: {}", s.status().message()));
    }
    scores.push_back(*s);
  }
  // Datasets: one run per data mode and cache size.
  DataOptions data;
  struct DataRun {
    std::string label;
    bool locality = true, prefetch = true;
    int64_t cache = 0;
  };
  std::vector<DataRun> data_runs = {{}};
  if (f.datasets < 0) return Fail("--datasets: must not be negative");
  if (f.datasets > 0) {
    data.datasets = f.datasets;
    data.zipf_s = f.dataset_zipf;
    absl::StatusOr<std::pair<int64_t, int64_t>> sizes =
        ParseSizeRange(f.dataset_sizes);
    if (!sizes.ok()) {
      return Fail(fmt::format("--dataset-sizes: {}", sizes.status().message()));
    }
    data.size_min = sizes->first;
    data.size_max = sizes->second;
    absl::StatusOr<int64_t> cold = ParseBytes(f.cold_store_bw);
    absl::StatusOr<int64_t> link = ParseBytes(f.node_link_bw);
    if (!cold.ok() || !link.ok() || *cold <= 0 || *link <= 0 ||
        !(f.dataset_zipf >= 0)) {
      return Fail(
          "--cold-store-bw and --node-link-bw must be positive byte rates "
          "(10G, 50G); --dataset-zipf must not be negative");
    }
    data.cold_store_bps = static_cast<double>(*cold);
    data.node_link_bps = static_cast<double>(*link);
    std::vector<std::pair<std::string, int64_t>> caches;
    for (absl::string_view part : absl::StrSplit(f.node_cache, ',')) {
      absl::StatusOr<int64_t> b = ParseBytes(std::string(part));
      if (!b.ok()) {
        return Fail(fmt::format("--node-cache: {}", b.status().message()));
      }
      caches.push_back({std::string(part), *b});
    }
    std::vector<std::string> modes = absl::StrSplit(f.data_modes, ',');
    data_runs.clear();
    for (const std::string& mode : modes) {
      if (mode != "both" && mode != "locality" && mode != "prefetch" &&
          mode != "none") {
        return Fail(fmt::format(
            "--data-mode: '{}' is not both, locality, prefetch or none", mode));
      }
      for (const auto& [text, bytes] : caches) {
        DataRun d;
        d.locality = mode == "both" || mode == "locality";
        d.prefetch = mode == "both" || mode == "prefetch";
        d.cache = bytes;
        if (modes.size() > 1) d.label = mode;
        if (caches.size() > 1) {
          d.label += (d.label.empty() ? "" : "/") + text;
        }
        data_runs.push_back(d);
      }
    }
  }
  std::vector<std::string> policies;
  for (absl::string_view part : absl::StrSplit(f.policies, ',')) {
    std::string name(part);
    absl::StatusOr<std::unique_ptr<QueuePolicy>> p =
        MakeQueuePolicy(name, popts);
    if (!p.ok()) {
      return Fail(
          fmt::format("--policy: {}", std::string(p.status().message())));
    }
    policies.push_back(name);
  }

  absl::StatusOr<Trace> trace = ReadTraceFile(f.trace, *format, f.strict);
  if (!trace.ok()) return Fail(std::string(trace.status().message()));
  for (size_t i = 0; i < trace->issues.size() && i < 10; ++i) {
    std::cerr << f.trace << ": " << FormatTraceIssue(trace->issues[i])
              << " (skipped)\n";
  }
  if (trace->issues.size() > 10) {
    std::cerr << f.trace << ": " << trace->issues.size() - 10
              << " more bad lines skipped\n";
  }
  if (trace->skipped > 0) {
    std::cerr << f.trace << ": skipped " << trace->skipped
              << " lines that are not GPU jobs: " << trace->skipped_reason
              << "\n";
  }
  WorkloadOptions wopts;

  wopts.arrival_scale = f.arrival_scale;
  wopts.limit = f.limit;
  wopts.seed = f.seed;
  wopts.time_limits = *limits;
  Workload workload = BuildWorkload(*trace, *cluster, wopts);
  for (const GangSpec& g : gangs) {
    if (absl::Status st = AddGang(g, *cluster, &workload); !st.ok()) {
      return Fail(std::string(st.message()));
    }
  }
  for (const TraceIssue& issue : workload.issues) {
    if (f.strict) {
      return Fail(fmt::format("{}: {}", f.trace, FormatTraceIssue(issue)));
    }
  }
  for (size_t i = 0; i < workload.issues.size() && i < 10; ++i) {
    std::cerr << f.trace << ": " << FormatTraceIssue(workload.issues[i])
              << " (skipped)\n";
  }
  if (workload.jobs.empty()) return Fail(f.trace + ": no jobs to replay");
  AssignDatasets(f.seed, &data, &workload.jobs);

  SimReport report;
  report.cluster = cluster->name;
  report.cluster_gpus = cluster->TotalGpus();
  report.cluster_nodes = static_cast<int>(cluster->nodes.size());
  report.trace = f.trace;
  report.trace_format = std::string(TraceFormatName(trace->format));
  report.trace_jobs = static_cast<int64_t>(workload.jobs.size());
  report.trace_issues =
      static_cast<int64_t>(trace->issues.size() + workload.issues.size());
  report.trace_skipped = trace->skipped;
  report.arrival_scale = f.arrival_scale;
  report.offered = ComputeOfferedLoad(workload.jobs, *cluster);
  std::cerr << fmt::format(
      "offered load {:.2f} (mean demand {:.0f} of {} GPUs over the arrival "
      "window), peak {:.2f}\n",
      report.offered.mean_load, report.offered.mean_demand_gpus,
      report.cluster_gpus, report.offered.peak_load);
  if (model) {
    std::cerr << fmt::format(
        "failure model {}: {}; a node of 8 GPUs fails every {:.0f} days on "
        "average, the cluster every {}\n",
        model->name, model->summary, model->gpu_mtbf_s / 8 / 86400,
        FormatDurationShort(absl::Seconds(model->gpu_mtbf_s /
                                          std::max(1, report.cluster_gpus))));
  }

  // One simulation per policy and slice score, in parallel.
  bool shares = false;
  for (const SimJob& j : workload.jobs) {
    shares = shares || j.request.shape.slice.partial();
  }
  report.capacity_rows = shares || scores.size() > 1 || f.no_departures;
  report.no_departures = f.no_departures;
  const TargetWorkload target = TargetWorkloadOf(workload.jobs);
  std::vector<std::string> labels;
  struct Run {
    std::string policy;
    SliceScore score;
    DataRun data;
  };
  std::vector<Run> runs;
  for (const std::string& p : policies) {
    for (SliceScore sc : scores) {
      for (const DataRun& d : data_runs) {
        runs.push_back({p, sc, d});
        std::string label =
            scores.size() > 1 ? fmt::format("{}/{}", p, SliceScoreName(sc)) : p;
        if (!d.label.empty()) label += "/" + d.label;
        labels.push_back(label);
      }
    }
  }
  const size_t n = runs.size();
  std::vector<std::atomic<int64_t>> progress(n);
  std::vector<absl::StatusOr<SimResult>> results(n, absl::UnknownError(""));
  std::vector<SimOptions> options(n);
  for (size_t i = 0; i < n; ++i) {
    options[i].policy = runs[i].policy;
    options[i].policy_options = popts;
    options[i].scheduler_options.usage_half_life = absl::Seconds(f.half_life_s);
    options[i].scheduler_options.slice_score = runs[i].score;
    options[i].data = data;
    options[i].data.locality = runs[i].data.locality;
    options[i].data.prefetch = runs[i].data.prefetch;
    options[i].data.node_cache_bytes = runs[i].data.cache;
    // The fgd score places by it; every run measures fragmentation for it.
    options[i].scheduler_options.target_workload = target;
    options[i].no_departures = f.no_departures;
    options[i].seed = f.seed;
    options[i].fail_mtbf_s = model ? model->gpu_mtbf_s : f.fail_mtbf_s;
    options[i].fail_mtbf_per_gpu = model.has_value();
    options[i].repair_s = repair_s;
    options[i].checkpoint_interval_s = f.checkpoint_interval_s;
    options[i].restart_cost_s = restart_cost_s;
    options[i].mig_repartition_s = f.mig_repartition_s;
    options[i].restart = {f.restart_max, absl::Seconds(f.restart_backoff_s)};
    options[i].requeue = {f.requeue_max, absl::ZeroDuration()};
    options[i].progress = &progress[i];
  }
  const size_t threads = std::max<size_t>(
      1, std::min<size_t>(
             n, f.threads > 0
                    ? f.threads
                    : std::max(1u, std::thread::hardware_concurrency())));
  std::atomic<size_t> next{0};
  std::atomic<size_t> done{0};
  std::vector<std::thread> workers;
  for (size_t w = 0; w < threads; ++w) {
    workers.emplace_back([&] {
      for (size_t i = next++; i < n; i = next++) {
        results[i] = RunSimulation(*cluster, workload.jobs, options[i]);
        ++done;
      }
    });
  }
  const bool tty = isatty(STDERR_FILENO);
  auto last_print = std::chrono::steady_clock::now();
  bool printed = false;
  while (done.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto now = std::chrono::steady_clock::now();
    const double elapsed =
        std::chrono::duration<double>(now - wall_start).count();
    if (f.quiet || elapsed < 1.0) continue;
    if (now - last_print < std::chrono::milliseconds(tty ? 250 : 2000))
      continue;
    last_print = now;
    std::string line = fmt::format("[{:5.1f}s]", elapsed);
    for (size_t i = 0; i < n; ++i) {
      line += fmt::format(" {} {:.0f}%", labels[i],
                          100.0 * progress[i].load() / workload.jobs.size());
    }
    std::cerr << (tty ? "\r" : "") << line << (tty ? "" : "\n") << std::flush;
    printed = true;
  }
  for (std::thread& t : workers) t.join();
  if (printed && tty) std::cerr << "\n";
  for (size_t i = 0; i < n; ++i) {
    if (!results[i].ok()) {
      return Fail(fmt::format("{}: {}", labels[i],
                              std::string(results[i].status().message())));
    }
    results[i]->policy = labels[i];
    report.results.push_back(*std::move(results[i]));
  }
  report.wall_seconds = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();
  std::cout << FormatSimTable(report) << std::flush;

  int rc = 0;
  if (!f.json.empty()) {
    std::ofstream out(f.json);
    out << SimReportJson(report).dump(2) << "\n";
    out.close();
    if (!out) {
      std::cerr << "loom sim: --json: cannot write " << f.json << "\n";
      rc = 1;
    } else {
      std::cerr << "wrote " << f.json << "\n";
    }
  }
  if (!f.plot.empty()) {
    PlotInfo info;
    info.title =
        fmt::format("loom sim: {} on {}", report.trace, report.cluster);
    info.subtitle = fmt::format(
        "{} jobs, arrival scale {}, offered load {:.2f} (peak {:.2f})",
        report.trace_jobs, report.arrival_scale, report.offered.mean_load,
        report.offered.peak_load);
    info.arrival_window_end_s =
        report.offered.window_end_s - report.offered.window_start_s;
    // A few multi-week jobs can stretch a run far past the arrival window,
    // which is where policies differ: the time charts stop at three times
    // the window (the JCT CDF keeps every job).
    const double window = info.arrival_window_end_s;
    double end = 0;
    for (const SimResult& r : report.results) end = std::max(end, r.makespan_s);
    const double shown = window > 0 ? std::min(end, 3 * window) : end;
    if (shown < end) {
      info.subtitle += fmt::format(
          "; time charts show the first {} (3x the arrival window) of {}",
          FormatDurationShort(absl::Seconds(shown)),
          FormatDurationShort(absl::Seconds(end)));
    }
    auto clip = [&](const std::vector<std::pair<double, double>>& s) {
      std::vector<std::pair<double, double>> out;
      for (const auto& p : s) {
        if (p.first > shown) break;
        out.push_back(p);
      }
      return out;
    };
    std::vector<PlotSeries> series;
    for (const SimResult& r : report.results) {
      series.push_back({r.policy, clip(r.utilization_series),
                        clip(r.queue_series), r.jct_s});
    }
    absl::Status st = WritePlot(f.plot, info, series);
    if (!st.ok()) {
      std::cerr << "loom sim: --plot: " << st.message() << "\n";
      rc = 1;
    } else {
      std::cerr << "wrote " << f.plot << "\n";
    }
  }
  return rc;
}

}  // namespace loom
