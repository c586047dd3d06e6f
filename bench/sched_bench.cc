// sched_bench: how long one scheduling decision takes on a big, busy cluster.
//
// For each queue policy it drives a `Scheduler` on the `large` preset (2,000
// nodes x 8 H200) with about 10,000 jobs pending and the cluster full, one
// finish event at a time, and times every `Scheduler::Schedule(now)` call
// (one decision cycle) with `std::chrono::steady_clock`. It then times
// `FindPlacement` alone for a few gang sizes on the same cluster state, full
// and drained to 75% busy. See bench/README.md for the input and the output
// columns.
//
// Deterministic: the job stream comes from a seeded `std::mt19937_64` and
// the scheduler is pure, so the same flags make the same decisions; only
// the timings differ between runs.

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <iostream>
#include <queue>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "fmt/format.h"
#include "loom/core/cluster.h"
#include "loom/core/cluster_spec.h"
#include "loom/core/job.h"
#include "loom/sched/cluster_state.h"
#include "loom/sched/placement.h"
#include "loom/sched/queue_policy.h"
#include "loom/sched/scheduler.h"
#include "nlohmann/json.hpp"

#ifndef LOOM_BENCH_BUILD_TYPE
#define LOOM_BENCH_BUILD_TYPE "unknown"
#endif

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

double MicrosSince(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

struct BenchOptions {
  std::string cluster = "large";
  std::vector<std::string> policies;
  int pending = 10000;
  int warmup_steps = 5000;
  int steps = 20000;
  int placement_samples = 2000;
  uint64_t seed = 1;
  std::string json_path;
  // The share of 1-GPU jobs that ask for part of one GPU instead (10% to
  // 90% of its memory, uniform in steps of 10%), and how shares are placed.
  double shares = 0;
  SliceScore slice_score = SliceScore::kBestFit;
};

// The share sizes the stream draws from, in tenths of a GPU.
constexpr int kShareTenths[] = {1, 2, 3, 4, 5, 6, 7, 8, 9};

// Nearest-rank percentiles of a sample, in the sample's unit.
struct Summary {
  size_t n = 0;
  double mean = 0;
  double median = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

Summary Summarize(std::vector<double> v) {
  Summary s;
  s.n = v.size();
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  auto rank = [&](double p) {
    size_t k = static_cast<size_t>(std::ceil(p / 100.0 * v.size()));
    return v[std::clamp<size_t>(k, 1, v.size()) - 1];
  };
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  s.median = rank(50);
  s.p90 = rank(90);
  s.p99 = rank(99);
  s.max = v.back();
  return s;
}

nlohmann::json ToJson(const Summary& s) {
  return {{"n", s.n},     {"mean", s.mean}, {"median", s.median},
          {"p90", s.p90}, {"p99", s.p99},   {"max", s.max}};
}

struct MachineInfo {
  int nproc = 0;  // CPUs this process may run on
  unsigned hardware_threads = 0;
  std::string cpu_model;
};

MachineInfo ProbeMachine() {
  MachineInfo m;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) m.nproc = CPU_COUNT(&set);
  m.hardware_threads = std::thread::hardware_concurrency();
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    m.cpu_model = line.substr(line.find_first_not_of(" \t", colon + 1));
    break;
  }
  if (m.cpu_model.empty()) m.cpu_model = "unknown";
  return m;
}

// The job mix. Sizes: 80% 1 GPU, 8% 2-4 GPUs, 7% 8 GPUs (one node), 5% gangs
// of 2-32 whole nodes (16-256 GPUs, node count log-uniform). Durations are
// log-uniform between 10 minutes and 12 hours and independent of size. Half
// of the jobs have a time limit (the duration times 1-2, rounded up to 10
// minutes); half are preemptible. Projects p0..p9, uniform.
class JobStream {
 public:
  JobStream(uint64_t seed, int gpus_per_node, double shares, int64_t gpu_memory)
      : rng_(seed),
        gpus_per_node_(gpus_per_node),
        shares_(shares),
        gpu_memory_(gpu_memory) {}

  struct Generated {
    JobRequest request;
    absl::Duration duration;  // the true run time, unknown to the scheduler
  };

  absl::StatusOr<Generated> Next(absl::Time now) {
    Generated g;
    JobRequest& r = g.request;
    r.id = next_id_++;
    r.name = fmt::format("bench-{}", r.id);
    r.project =
        fmt::format("p{}", std::uniform_int_distribution<int>(0, 9)(rng_));
    r.user = r.project;
    r.submit_time = now;
    const double u = Uniform(0, 1);
    int gpus = 1;
    if (u < 0.80) {
      gpus = 1;
    } else if (u < 0.88) {
      gpus = std::uniform_int_distribution<int>(2, 4)(rng_);
    } else if (u < 0.95) {
      gpus = gpus_per_node_;
    } else {
      const int nodes = std::clamp(
          static_cast<int>(
              std::lround(std::exp(Uniform(std::log(2.0), std::log(32.0))))),
          2, 32);
      gpus = nodes * gpus_per_node_;
    }
    absl::StatusOr<JobShape> shape = ShapeFromTotalGpus(gpus, gpus_per_node_);
    if (!shape.ok()) return shape.status();
    r.shape = *shape;
    // Only drawn with --shares, so that the default stream is unchanged.
    if (gpus == 1 && shares_ > 0 && Uniform(0, 1) < shares_) {
      const int tenths = kShareTenths[std::uniform_int_distribution<int>(
          0, std::size(kShareTenths) - 1)(rng_)];
      r.shape.slice.share_bytes = gpu_memory_ / 10 * tenths;
    }
    const double seconds =
        std::exp(Uniform(std::log(600.0), std::log(43200.0)));
    g.duration = absl::Seconds(std::round(seconds));
    if (Uniform(0, 1) < 0.5) {
      const double limit = seconds * Uniform(1.0, 2.0);
      r.time_limit = absl::Minutes(10 * std::ceil(limit / 600.0));
    }
    r.preemptible = Uniform(0, 1) < 0.5;
    return g;
  }

  std::mt19937_64& rng() { return rng_; }

 private:
  double Uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng_);
  }

  std::mt19937_64 rng_;
  const int gpus_per_node_;
  const double shares_;
  const int64_t gpu_memory_;
  JobId next_id_ = 1;
};

// FindPlacement timings for one gang size on one cluster state.
struct PlacementFigures {
  std::string load;  // "full" or "75%"
  int gpus = 0;
  double busy_fraction = 0;  // of all GPUs when measured
  int found = 0;             // samples that found a placement
  Summary micros;
};

struct PolicyResult {
  std::string policy;
  double fill_pass_ms = 0;  // the first pass, on an empty cluster
  int fill_started = 0;
  int passes = 0;
  int64_t started = 0;
  int64_t finished = 0;
  int64_t preempted = 0;
  int pending_min = 0;
  int pending_max = 0;
  int running_min = 0;
  int running_max = 0;
  double busy_min = 0;   // fraction of GPUs busy right before a pass, min
  double busy_mean = 0;  // and mean
  Summary pass_micros;
  double micros_per_started = 0;
  double simulated_hours = 0;
  std::vector<PlacementFigures> placement;
  double wall_seconds = 0;
  std::string invariants = "ok";
};

// Drives one scheduler: submits the stream, finishes jobs at their true end,
// requeues preempted ones, and keeps the queue at its target length.
class Driver {
 public:
  Driver(const Cluster& cluster, std::unique_ptr<QueuePolicy> policy,
         const BenchOptions& options)
      : cluster_(cluster),
        options_(options),
        scheduler_(cluster, std::move(policy), MakeOptions(cluster, options)),
        stream_(options.seed, cluster.nodes.front().gpus, options.shares,
                cluster.pools.front().gpu_memory_bytes) {}

  // The slice score, and for fgd the stream's own mix as the workload.
  static SchedulerOptions MakeOptions(const Cluster& cluster,
                                      const BenchOptions& o) {
    SchedulerOptions s;
    s.slice_score = o.slice_score;
    std::vector<TaskType> types;
    TaskType whole;
    whole.gpus = 1;
    whole.popularity = 0.80 * (1 - o.shares);
    types.push_back(whole);
    whole.gpus = cluster.nodes.front().gpus;
    whole.popularity = 0.12;
    types.push_back(whole);
    for (int tenths : kShareTenths) {
      TaskType share;
      share.gpus = 0;
      share.share_bytes = cluster.pools.front().gpu_memory_bytes / 10 * tenths;
      share.popularity = 0.80 * o.shares / std::size(kShareTenths);
      types.push_back(share);
    }
    s.target_workload = MakeTargetWorkload(types);
    return s;
  }

  Scheduler& scheduler() { return scheduler_; }
  absl::Time now() const { return now_; }

  // Submits new jobs until `target` are pending.
  absl::Status TopUp(int target) {
    while (scheduler_.pending_count() < target) {
      absl::StatusOr<JobStream::Generated> g = stream_.Next(now_);
      if (!g.ok()) return g.status();
      absl::StatusOr<SubmitOutcome> out = scheduler_.Submit(g->request, now_);
      if (!out.ok()) return out.status();
      if (out->kind != SubmitOutcome::Kind::kQueued) {
        return absl::InternalError(
            fmt::format("job {} was rejected as infeasible: {}", g->request.id,
                        out->reason));
      }
      live_[g->request.id] = Live{g->duration, now_, 0, false};
    }
    return absl::OkStatus();
  }

  // Carries out a pass's decisions: started jobs get an end event at their
  // true end; preempted jobs stop at once and go back to the queue with the
  // work they have left.
  absl::Status Apply(const PassResult& result) {
    for (JobId id : result.started) {
      Live& j = live_.at(id);
      j.running = true;
      j.start = now_;
      ends_.push({now_ + j.remaining, id, j.run});
    }
    for (const Preemption& p : result.preempted) {
      Live& j = live_.at(p.victim);
      j.remaining -= now_ - j.start;
      j.running = false;
      j.run += 1;  // its end event is stale now
      if (absl::Status st = scheduler_.Requeue(p.victim, now_); !st.ok()) {
        return st;
      }
    }
    return absl::OkStatus();
  }

  // Advances time to the earliest end of a running job and finishes every
  // job that ends then. Returns how many finished.
  absl::StatusOr<int> FinishEarliest() {
    int finished = 0;
    while (!ends_.empty()) {
      const End e = ends_.top();
      auto it = live_.find(e.id);
      if (it == live_.end() || !it->second.running || it->second.run != e.run) {
        ends_.pop();  // stale: preempted since
        continue;
      }
      if (finished > 0 && e.end > now_) break;
      ends_.pop();
      now_ = std::max(now_, e.end);
      if (absl::Status st = scheduler_.Finish(e.id, now_); !st.ok()) return st;
      live_.erase(it);
      ++finished;
    }
    if (finished == 0) {
      return absl::InternalError("no job is running, yet none can start");
    }
    return finished;
  }

  // One decision cycle: a finish event, new arrivals, one timed pass.
  struct StepFigures {
    double micros = 0;
    int started = 0;
    int preempted = 0;
    int finished = 0;
    int pending = 0;  // when the pass ran
    int running = 0;
    int free_gpus = 0;
  };
  absl::StatusOr<StepFigures> Step() {
    StepFigures f;
    absl::StatusOr<int> finished = FinishEarliest();
    if (!finished.ok()) return finished.status();
    f.finished = *finished;
    if (absl::Status st = TopUp(options_.pending); !st.ok()) return st;
    f.pending = scheduler_.pending_count();
    f.running = scheduler_.running_count();
    f.free_gpus = scheduler_.state().TotalFreeGpus();
    const Clock::time_point t0 = Clock::now();
    PassResult result = scheduler_.Schedule(now_);
    const Clock::time_point t1 = Clock::now();
    f.micros = MicrosSince(t0, t1);
    f.started = static_cast<int>(result.started.size());
    f.preempted = static_cast<int>(result.preempted.size());
    if (absl::Status st = Apply(result); !st.ok()) return st;
    return f;
  }

  // Finishes running jobs in random order until at least `free_fraction` of
  // the GPUs are free.
  absl::Status DrainTo(double free_fraction) {
    std::vector<JobId> running;
    for (const auto& [id, j] : live_) {
      if (j.running) running.push_back(id);
    }
    std::sort(running.begin(), running.end());  // hash order is not stable
    std::shuffle(running.begin(), running.end(), stream_.rng());
    const int total = cluster_.TotalGpus();
    for (JobId id : running) {
      if (scheduler_.state().TotalFreeGpus() >= free_fraction * total) break;
      if (absl::Status st = scheduler_.Finish(id, now_); !st.ok()) return st;
      live_.erase(id);
    }
    return absl::OkStatus();
  }

 private:
  struct Live {
    absl::Duration remaining;  // true run time left
    absl::Time start;          // of the current run
    uint32_t run = 0;          // bumped on preemption
    bool running = false;
  };
  struct End {
    absl::Time end;
    JobId id;
    uint32_t run;
    friend bool operator>(const End& a, const End& b) {
      return std::tie(a.end, a.id) > std::tie(b.end, b.id);
    }
  };

  const Cluster& cluster_;
  const BenchOptions& options_;
  Scheduler scheduler_;
  JobStream stream_;
  absl::Time now_ = absl::FromUnixSeconds(1'700'000'000);
  absl::flat_hash_map<JobId, Live> live_;
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends_;
};

// Times `FindPlacement` alone for each probe size on the scheduler's state.
void ProbePlacement(const ClusterState& state, const std::string& load,
                    int samples, std::vector<PlacementFigures>* out) {
  const int gpus_per_node = state.cluster().nodes.front().gpus;
  const int total = state.cluster().TotalGpus();
  for (int gpus : {1, 8, 64, 256}) {
    absl::StatusOr<JobShape> shape = ShapeFromTotalGpus(gpus, gpus_per_node);
    if (!shape.ok()) continue;
    PlacementFigures f;
    f.load = load;
    f.gpus = gpus;
    f.busy_fraction = 1.0 - static_cast<double>(state.TotalFreeGpus()) / total;
    std::vector<double> micros;
    micros.reserve(samples);
    for (int i = 0; i < samples; ++i) {
      const Clock::time_point t0 = Clock::now();
      std::optional<Placement> p =
          FindPlacement(state, *shape, nullptr, nullptr, nullptr);
      const Clock::time_point t1 = Clock::now();
      micros.push_back(MicrosSince(t0, t1));
      f.found += p.has_value() ? 1 : 0;
    }
    f.micros = Summarize(std::move(micros));
    out->push_back(std::move(f));
  }
}

absl::StatusOr<PolicyResult> RunPolicy(const Cluster& cluster,
                                       const std::string& name,
                                       const BenchOptions& options) {
  const Clock::time_point wall_start = Clock::now();
  absl::StatusOr<std::unique_ptr<QueuePolicy>> policy =
      MakeQueuePolicy(name, PolicyOptions{});
  if (!policy.ok()) return policy.status();
  Driver driver(cluster, std::move(*policy), options);
  Scheduler& sched = driver.scheduler();
  PolicyResult r;
  r.policy = name;

  // Fill: the whole queue arrives at once on an empty cluster.
  if (absl::Status st = driver.TopUp(options.pending); !st.ok()) return st;
  {
    const Clock::time_point t0 = Clock::now();
    PassResult fill = sched.Schedule(driver.now());
    const Clock::time_point t1 = Clock::now();
    r.fill_pass_ms = MicrosSince(t0, t1) / 1000.0;
    r.fill_started = static_cast<int>(fill.started.size());
    if (absl::Status st = driver.Apply(fill); !st.ok()) return st;
  }

  // Warm-up: the same steps, untimed, until the running set has turned over.
  for (int i = 0; i < options.warmup_steps; ++i) {
    absl::StatusOr<Driver::StepFigures> f = driver.Step();
    if (!f.ok()) return f.status();
  }

  // Measured phase.
  const absl::Time measure_start = driver.now();
  const int total_gpus = cluster.TotalGpus();
  std::vector<double> micros;
  micros.reserve(options.steps);
  r.pending_min = r.running_min = INT32_MAX;
  r.busy_min = 1.0;
  double busy_sum = 0;
  for (int i = 0; i < options.steps; ++i) {
    absl::StatusOr<Driver::StepFigures> f = driver.Step();
    if (!f.ok()) return f.status();
    micros.push_back(f->micros);
    r.started += f->started;
    r.finished += f->finished;
    r.preempted += f->preempted;
    r.pending_min = std::min(r.pending_min, f->pending);
    r.pending_max = std::max(r.pending_max, f->pending);
    r.running_min = std::min(r.running_min, f->running);
    r.running_max = std::max(r.running_max, f->running);
    const double busy = 1.0 - static_cast<double>(f->free_gpus) / total_gpus;
    r.busy_min = std::min(r.busy_min, busy);
    busy_sum += busy;
  }
  r.passes = options.steps;
  r.busy_mean = options.steps > 0 ? busy_sum / options.steps : 0;
  double total_micros = 0;
  for (double m : micros) total_micros += m;
  r.micros_per_started = r.started > 0 ? total_micros / r.started : 0;
  r.pass_micros = Summarize(std::move(micros));
  r.simulated_hours = absl::ToDoubleHours(driver.now() - measure_start);

  // FindPlacement alone, on the state the policy left, then drained.
  ProbePlacement(sched.state(), "full", options.placement_samples,
                 &r.placement);
  if (absl::Status st = driver.DrainTo(0.25); !st.ok()) return st;
  ProbePlacement(sched.state(), "75%", options.placement_samples, &r.placement);

  if (absl::Status st = sched.state().CheckInvariants(); !st.ok()) {
    r.invariants = st.ToString();
  }
  r.wall_seconds = MicrosSince(wall_start, Clock::now()) / 1e6;
  return r;
}

std::string Us(double micros) {
  return micros < 10 ? fmt::format("{:.2f}", micros)
                     : fmt::format("{:.1f}", micros);
}

void PrintHeader(const MachineInfo& m, const Cluster& cluster,
                 const BenchOptions& o) {
  fmt::print(
      "sched_bench: scheduling decisions on cluster '{}' ({} nodes, {} "
      "GPUs)\n",
      cluster.name, cluster.nodes.size(), cluster.TotalGpus());
  fmt::print("machine: nproc {} (hardware threads {}), cpu '{}', build {}\n",
             m.nproc, m.hardware_threads, m.cpu_model, LOOM_BENCH_BUILD_TYPE);
  fmt::print(
      "input: {} jobs pending, {} warm-up steps, {} measured steps, "
      "seed {}\n",
      o.pending, o.warmup_steps, o.steps, o.seed);
  fmt::print(
      "mix: 80% 1 GPU, 8% 2-4 GPUs, 7% 8 GPUs, 5% gangs of 16-256 GPUs; "
      "half with time limits, half preemptible, projects p0..p9\n");
  fmt::print(
      "shares: {:.0f}% of the 1-GPU jobs ask 10-90% of one GPU's memory; "
      "slice score {}\n\n",
      100 * o.shares, SliceScoreName(o.slice_score));
}

void PrintPassTable(const std::vector<PolicyResult>& results) {
  fmt::print(
      "Scheduling passes: one timed Scheduler::Schedule(now) call per "
      "finish event (microseconds)\n");
  fmt::print(
      "{:<9}{:>7}{:>9}{:>10}{:>14}{:>8}{:>10}{:>9}{:>9}{:>10}{:>10}"
      "{:>10}{:>8}\n",
      "policy", "passes", "started", "preempted", "pending", "busy%", "median",
      "p90", "p99", "max", "us/start", "fill_ms", "p99<1ms");
  for (const PolicyResult& r : results) {
    fmt::print(
        "{:<9}{:>7}{:>9}{:>10}{:>14}{:>8.2f}{:>10}{:>9}{:>9}{:>10}{:>10}"
        "{:>10.1f}{:>8}\n",
        r.policy, r.passes, r.started, r.preempted,
        fmt::format("{}-{}", r.pending_min, r.pending_max), 100 * r.busy_mean,
        Us(r.pass_micros.median), Us(r.pass_micros.p90), Us(r.pass_micros.p99),
        Us(r.pass_micros.max), Us(r.micros_per_started), r.fill_pass_ms,
        r.pass_micros.p99 < 1000 ? "yes" : "NO");
  }
  fmt::print("\n");
}

void PrintPlacementTable(const std::vector<PolicyResult>& results) {
  fmt::print(
      "FindPlacement alone on the policy's cluster state "
      "(microseconds)\n");
  fmt::print("{:<9}{:>6}{:>7}{:>7}{:>9}{:>8}{:>9}{:>9}{:>9}\n", "policy",
             "load", "busy%", "gpus", "samples", "found", "median", "p99",
             "max");
  for (const PolicyResult& r : results) {
    for (const PlacementFigures& p : r.placement) {
      fmt::print("{:<9}{:>6}{:>7.1f}{:>7}{:>9}{:>8}{:>9}{:>9}{:>9}\n", r.policy,
                 p.load, 100 * p.busy_fraction, p.gpus, p.micros.n, p.found,
                 Us(p.micros.median), Us(p.micros.p99), Us(p.micros.max));
    }
  }
  fmt::print("\n");
}

nlohmann::json ToJson(const MachineInfo& m, const Cluster& cluster,
                      const BenchOptions& o,
                      const std::vector<PolicyResult>& results) {
  nlohmann::json j;
  j["benchmark"] = "sched_bench";
  j["machine"] = {{"nproc", m.nproc},
                  {"hardware_threads", m.hardware_threads},
                  {"cpu_model", m.cpu_model},
                  {"build_type", LOOM_BENCH_BUILD_TYPE}};
  j["input"] = {{"cluster", cluster.name},
                {"nodes", cluster.nodes.size()},
                {"gpus", cluster.TotalGpus()},
                {"pending", o.pending},
                {"warmup_steps", o.warmup_steps},
                {"steps", o.steps},
                {"placement_samples", o.placement_samples},
                {"seed", o.seed}};
  j["policies"] = nlohmann::json::array();
  for (const PolicyResult& r : results) {
    nlohmann::json p;
    p["policy"] = r.policy;
    p["fill_pass_ms"] = r.fill_pass_ms;
    p["fill_started"] = r.fill_started;
    p["passes"] = r.passes;
    p["jobs_started"] = r.started;
    p["jobs_finished"] = r.finished;
    p["preemptions"] = r.preempted;
    p["pending_min"] = r.pending_min;
    p["pending_max"] = r.pending_max;
    p["running_min"] = r.running_min;
    p["running_max"] = r.running_max;
    p["busy_fraction_min"] = r.busy_min;
    p["busy_fraction_mean"] = r.busy_mean;
    p["simulated_hours"] = r.simulated_hours;
    p["pass_us"] = ToJson(r.pass_micros);
    p["us_per_started_job"] = r.micros_per_started;
    p["p99_under_1ms"] = r.pass_micros.p99 < 1000;
    p["placement"] = nlohmann::json::array();
    for (const PlacementFigures& f : r.placement) {
      p["placement"].push_back({{"load", f.load},
                                {"busy_fraction", f.busy_fraction},
                                {"gpus", f.gpus},
                                {"found", f.found},
                                {"us", ToJson(f.micros)}});
    }
    p["invariants"] = r.invariants;
    p["wall_seconds"] = r.wall_seconds;
    j["policies"].push_back(std::move(p));
  }
  return j;
}

int Main(int argc, char** argv) {
  BenchOptions o;
  CLI::App app{
      "Times loom's scheduling decisions on a large, busy cluster: median and "
      "p99 per Schedule(now) pass with ~10,000 jobs pending."};
  app.add_option("--policy", o.policies,
                 "policies to run, comma-separated (default: all of fifo, "
                 "backfill, las, fair)")
      ->delimiter(',');
  app.add_option("--cluster", o.cluster, "cluster preset or spec file")
      ->capture_default_str();
  app.add_option("--pending", o.pending, "jobs kept pending")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup-steps", o.warmup_steps, "untimed steps first")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  app.add_option("--steps", o.steps, "timed passes per policy")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--placement-samples", o.placement_samples,
                 "FindPlacement calls per size and load")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the job stream")
      ->capture_default_str();
  app.add_option("--json", o.json_path, "also write the figures as JSON here");
  app.add_option("--shares", o.shares,
                 "fraction of the 1-GPU jobs that ask part of one GPU")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 1.0));
  std::string score = "best_fit";
  app.add_option("--slice-score", score, "best_fit or fgd")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (absl::StatusOr<SliceScore> s = ParseSliceScore(score); s.ok()) {
    o.slice_score = *s;
  } else {
    std::cerr << "sched_bench: --slice-score: " << s.status().message() << "\n";
    return 2;
  }

  if (o.policies.empty() ||
      (o.policies.size() == 1 && o.policies[0] == "all")) {
    o.policies = QueuePolicyNames();
  }
  for (const std::string& p : o.policies) {
    const std::vector<std::string> names = QueuePolicyNames();
    if (std::find(names.begin(), names.end(), p) == names.end()) {
      std::cerr << "sched_bench: unknown policy '" << p
                << "' (choose from fifo, backfill, las, fair)\n";
      return 2;
    }
  }
  absl::StatusOr<Cluster> cluster = LoadCluster(o.cluster);
  if (!cluster.ok()) {
    std::cerr << "sched_bench: " << cluster.status().ToString() << "\n";
    return 2;
  }

  const MachineInfo machine = ProbeMachine();
  PrintHeader(machine, *cluster, o);
  std::vector<PolicyResult> results;
  bool ok = true;
  for (const std::string& p : o.policies) {
    absl::StatusOr<PolicyResult> r = RunPolicy(*cluster, p, o);
    if (!r.ok()) {
      std::cerr << "sched_bench: policy " << p << ": " << r.status().ToString()
                << "\n";
      return 1;
    }
    fmt::print("{}: done in {:.1f} s wall ({:.1f} simulated hours measured)\n",
               p, r->wall_seconds, r->simulated_hours);
    std::fflush(stdout);
    if (r->invariants != "ok") {
      std::cerr << "sched_bench: policy " << p
                << ": cluster state invariants broken: " << r->invariants
                << "\n";
      ok = false;
    }
    results.push_back(std::move(*r));
  }
  fmt::print("\n");
  PrintPassTable(results);
  PrintPlacementTable(results);
  for (const PolicyResult& r : results) {
    fmt::print("{}: cluster state invariants {}\n", r.policy,
               r.invariants == "ok" ? "ok" : "BROKEN");
  }

  if (!o.json_path.empty()) {
    std::ofstream out(o.json_path);
    out << ToJson(machine, *cluster, o, results).dump(2) << "\n";
    if (!out) {
      std::cerr << "sched_bench: cannot write " << o.json_path << "\n";
      return 1;
    }
  }
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) { return loom::Main(argc, argv); }
