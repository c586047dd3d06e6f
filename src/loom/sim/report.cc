#include "loom/sim/report.h"

#include <algorithm>
#include <set>

#include "fmt/format.h"
#include "loom/common/units.h"

namespace loom {
namespace {

std::string Dur(double s) { return FormatDurationShort(absl::Seconds(s)); }

std::string Count(int64_t n) {
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) {
    s.insert(static_cast<size_t>(i), ",");
  }
  return s;
}

}  // namespace

std::string FormatSimTable(const SimReport& r) {
  std::string out;
  out += fmt::format(
      "cluster {} ({} nodes, {} GPUs); trace {} ({}: {} jobs, {} bad lines, "
      "{} skipped)\n",
      r.cluster, Count(r.cluster_nodes), Count(r.cluster_gpus), r.trace,
      r.trace_format, Count(r.trace_jobs), Count(r.trace_issues),
      Count(r.trace_skipped));
  out += fmt::format(
      "arrival scale {}: arrival window {}, offered load {:.2f} (mean demand "
      "{:.0f} GPUs), peak {:.2f} ({:.0f} GPUs)\n\n",
      r.arrival_scale, Dur(r.offered.window_end_s - r.offered.window_start_s),
      r.offered.mean_load, r.offered.mean_demand_gpus, r.offered.peak_load,
      r.offered.peak_demand_gpus);

  std::vector<std::pair<std::string, std::vector<std::string>>> rows;
  auto row = [&](const std::string& name, auto fn) {
    std::vector<std::string> cells;
    for (const SimResult& s : r.results) cells.push_back(fn(s));
    rows.emplace_back(name, std::move(cells));
  };
  row("jobs finished", [](const SimResult& s) { return Count(s.finished); });
  row("jobs infeasible",
      [](const SimResult& s) { return Count(s.infeasible); });
  row("jobs unfinished",
      [](const SimResult& s) { return Count(s.unfinished); });
  if (std::any_of(r.results.begin(), r.results.end(),
                  [](const SimResult& s) { return s.failed > 0; })) {
    row("jobs failed (out of retries)",
        [](const SimResult& s) { return Count(s.failed); });
  }
  row("makespan", [](const SimResult& s) { return Dur(s.makespan_s); });
  row("JCT mean", [](const SimResult& s) { return Dur(s.jct_mean_s); });
  row("JCT median", [](const SimResult& s) { return Dur(s.jct_p50_s); });
  row("JCT p95", [](const SimResult& s) { return Dur(s.jct_p95_s); });
  row("JCT p99", [](const SimResult& s) { return Dur(s.jct_p99_s); });
  row("queueing delay mean",
      [](const SimResult& s) { return Dur(s.wait_mean_s); });
  row("bounded slowdown mean", [](const SimResult& s) {
    return fmt::format("{:.2f}", s.slowdown_mean);
  });
  row("GPU utilisation (arrivals)", [](const SimResult& s) {
    return fmt::format("{:.1f}%", 100 * s.gpu_utilization);
  });
  row("fragmentation mean", [](const SimResult& s) {
    return fmt::format("{:.1f}% ({:.0f} GPUs)", 100 * s.fragmentation_mean,
                       s.fragmentation_mean_gpus);
  });
  if (r.capacity_rows) {
    row("GPU allocation mean (arrivals)", [](const SimResult& s) {
      return fmt::format("{:.1f}%", 100 * s.gpu_allocation_mean);
    });
    row("GPU allocation at arrivals' end", [&](const SimResult& s) {
      return fmt::format("{:.1f}% ({:.0f} GPUs unallocated)",
                         100 * s.gpu_allocation_end,
                         r.cluster_gpus * (1 - s.gpu_allocation_end));
    });
    row("FGD fragmentation mean (arrivals)", [&](const SimResult& s) {
      return fmt::format(
          "{:.1f}% ({:.0f} GPUs)",
          100 * s.frag_fgd_mean_gpus / std::max(1, r.cluster_gpus),
          s.frag_fgd_mean_gpus);
    });
    row("FGD fragmentation at arrivals' end", [&](const SimResult& s) {
      return fmt::format(
          "{:.1f}% ({:.0f} GPUs)",
          100 * s.frag_fgd_end_gpus / std::max(1, r.cluster_gpus),
          s.frag_fgd_end_gpus);
    });
    row("arrived workload", [](const SimResult& s) {
      return fmt::format("{:.1f}% of the GPUs", 100 * s.arrived_demand);
    });
    if (r.no_departures) {
      row("jobs dropped (no room on arrival)",
          [](const SimResult& s) { return Count(s.dropped); });
    }
  }
  row("preemptions", [](const SimResult& s) { return Count(s.preemptions); });
  if (std::any_of(r.results.begin(), r.results.end(),
                  [](const SimResult& s) { return s.spare_reclaims > 0; })) {
    row("  of them spares reclaimed",
        [](const SimResult& s) { return Count(s.spare_reclaims); });
  }
  row("node failures",
      [](const SimResult& s) { return Count(s.node_failures); });
  row("GPU-hours lost", [](const SimResult& s) {
    return fmt::format("{:.1f}", s.gpu_hours_lost);
  });
  row("goodput", [](const SimResult& s) {
    return fmt::format("{:.1f}%", 100 * s.goodput);
  });
  // Datasets (docs/simulator.md "Datasets").
  if (std::any_of(r.results.begin(), r.results.end(),
                  [](const SimResult& s) { return s.data.enabled; })) {
    row("data: cache hit rate (bytes)", [](const SimResult& s) {
      return fmt::format("{:.1f}%", 100 * s.data.hit_rate_bytes());
    });
    row("data: not from the cold store", [](const SimResult& s) {
      return fmt::format("{:.1f}%", 100 * s.data.layer_hit_rate());
    });
    row("data: cache hit rate (jobs)", [](const SimResult& s) {
      return fmt::format("{:.1f}%", 100 * s.data.hit_rate_jobs());
    });
    row("data: start delay mean", [](const SimResult& s) {
      return fmt::format("{:.1f}s", s.data.delay_mean_s);
    });
    row("data: start delay p95", [](const SimResult& s) {
      return fmt::format("{:.1f}s", s.data.delay_p95_s);
    });
    row("data: cold-store bytes", [](const SimResult& s) {
      return fmt::format("{:.1f} TB", s.data.cold_bytes / 1e12);
    });
    row("data: prefetched bytes", [](const SimResult& s) {
      return fmt::format("{:.1f} TB", s.data.prefetch_bytes / 1e12);
    });
    row("data: evictions",
        [](const SimResult& s) { return Count(s.data.evictions); });
  }
  // The --gang jobs, each on its own lines (every policy has the same).
  const size_t gangs = r.results.empty() ? 0 : r.results[0].gangs.size();
  for (size_t g = 0; g < gangs; ++g) {
    const GangResult& first = r.results[0].gangs[g];
    const std::string name =
        fmt::format("{} ({} spares)", first.name, first.spares);
    auto gang = [&](const SimResult& s) -> const GangResult* {
      return g < s.gangs.size() ? &s.gangs[g] : nullptr;
    };
    row(name + ": goodput", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? fmt::format("{:.1f}%", 100 * x->goodput) : std::string("-");
    });
    row("  effective training time", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? fmt::format("{:.1f}%", 100 * x->effective) : std::string("-");
    });
    row("  redone / restoring / waiting", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? fmt::format("{:.1f}/{:.1f}/{:.1f}%", 100 * x->redone,
                             100 * x->restoring, 100 * x->waiting)
               : std::string("-");
    });
    row("  interruptions (on spares)", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? fmt::format("{} ({})", x->interruptions,
                             x->recovered_on_spares)
               : std::string("-");
    });
    row("  restart wait mean / max", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? Dur(x->restart_wait_mean_s) + " / " +
                     Dur(x->restart_wait_max_s)
               : std::string("-");
    });
    row("  JCT", [&](const SimResult& s) {
      const GangResult* x = gang(s);
      return x ? Dur(x->jct_s) + (x->finished ? "" : " (unfinished)")
               : std::string("-");
    });
  }
  row("scheduling passes", [](const SimResult& s) { return Count(s.passes); });
  row("wall time", [](const SimResult& s) {
    return fmt::format("{:.2f}s", s.wall_seconds);
  });
  // GPU-hours per project: the largest projects, by the first policy.
  std::set<std::string> projects;
  for (const SimResult& s : r.results) {
    for (const auto& [p, h] : s.gpu_hours_by_project) projects.insert(p);
  }
  for (const std::string& p : projects) {
    row("GPU-hours " + p, [&](const SimResult& s) {
      auto it = s.gpu_hours_by_project.find(p);
      return fmt::format("{:.0f}",
                         it == s.gpu_hours_by_project.end() ? 0.0 : it->second);
    });
  }

  size_t name_w = 6;
  for (const auto& [name, cells] : rows) name_w = std::max(name_w, name.size());
  std::vector<size_t> col_w;
  for (const SimResult& s : r.results)
    col_w.push_back(std::max<size_t>(8, s.policy.size()));
  for (const auto& [name, cells] : rows) {
    for (size_t i = 0; i < cells.size(); ++i) {
      col_w[i] = std::max(col_w[i], cells[i].size());
    }
  }
  out += fmt::format("{:<{}}", "policy", name_w);
  for (size_t i = 0; i < r.results.size(); ++i) {
    out += fmt::format("  {:>{}}", r.results[i].policy, col_w[i]);
  }
  out += "\n";
  for (const auto& [name, cells] : rows) {
    out += fmt::format("{:<{}}", name, name_w);
    for (size_t i = 0; i < cells.size(); ++i) {
      out += fmt::format("  {:>{}}", cells[i], col_w[i]);
    }
    out += "\n";
  }
  for (const SimResult& s : r.results) {
    for (const std::string& e : s.infeasible_examples) {
      out += fmt::format("infeasible ({}): {}\n", s.policy, e);
    }
    break;  // the same jobs are infeasible under every policy
  }
  out += fmt::format("\nwall time {:.2f}s\n", r.wall_seconds);
  return out;
}

nlohmann::json SimReportJson(const SimReport& r) {
  nlohmann::json j;
  j["cluster"] = {{"name", r.cluster},
                  {"nodes", r.cluster_nodes},
                  {"gpus", r.cluster_gpus}};
  j["trace"] = {{"path", r.trace},
                {"format", r.trace_format},
                {"jobs", r.trace_jobs},
                {"bad_lines", r.trace_issues},
                {"skipped", r.trace_skipped}};
  j["arrival_scale"] = r.arrival_scale;
  j["no_departures"] = r.no_departures;
  j["offered_load"] = r.offered.mean_load;
  j["peak_load"] = r.offered.peak_load;
  j["offered_demand_gpus_mean"] = r.offered.mean_demand_gpus;
  j["offered_demand_gpus_peak"] = r.offered.peak_demand_gpus;
  j["arrival_window_s"] = r.offered.window_end_s - r.offered.window_start_s;
  j["wall_seconds"] = r.wall_seconds;
  nlohmann::json policies = nlohmann::json::array();
  for (const SimResult& s : r.results) {
    nlohmann::json p;
    p["name"] = s.policy;
    p["slice_score"] = s.slice_score;
    p["jobs_finished"] = s.finished;
    p["jobs_infeasible"] = s.infeasible;
    p["jobs_unfinished"] = s.unfinished;
    p["jobs_failed"] = s.failed;
    p["makespan_s"] = s.makespan_s;
    p["jct_mean_s"] = s.jct_mean_s;
    p["jct_p50_s"] = s.jct_p50_s;
    p["jct_p95_s"] = s.jct_p95_s;
    p["jct_p99_s"] = s.jct_p99_s;
    p["wait_mean_s"] = s.wait_mean_s;
    p["slowdown_mean"] = s.slowdown_mean;
    p["gpu_utilization"] = s.gpu_utilization;
    p["fragmentation_mean"] = s.fragmentation_mean;
    p["fragmentation_mean_gpus"] = s.fragmentation_mean_gpus;
    p["gpu_allocation_mean"] = s.gpu_allocation_mean;
    p["gpu_allocation_end"] = s.gpu_allocation_end;
    p["unallocated_gpus_end"] = r.cluster_gpus * (1 - s.gpu_allocation_end);
    p["fgd_fragmentation_mean_gpus"] = s.frag_fgd_mean_gpus;
    p["fgd_fragmentation_end_gpus"] = s.frag_fgd_end_gpus;
    p["arrived_workload"] = s.arrived_demand;
    p["jobs_dropped"] = s.dropped;
    p["gpu_hours_allocated"] = s.gpu_hours_allocated;
    p["gpu_hours_lost"] = s.gpu_hours_lost;
    p["goodput"] = s.goodput;
    p["preemptions"] = s.preemptions;
    p["node_failures"] = s.node_failures;
    p["restarts"] = s.restarts;
    p["mig_repartitions"] = s.mig_repartitions;
    p["spare_reclaims"] = s.spare_reclaims;
    if (s.data.enabled) {
      p["data"] = {{"starts", s.data.starts},
                   {"hit_starts", s.data.hit_starts},
                   {"hit_rate_bytes", s.data.hit_rate_bytes()},
                   {"hit_rate_jobs", s.data.hit_rate_jobs()},
                   {"cache_layer_hit_rate", s.data.layer_hit_rate()},
                   {"bytes", s.data.bytes},
                   {"hit_bytes", s.data.hit_bytes},
                   {"cold_store_bytes", s.data.cold_bytes},
                   {"prefetch_bytes", s.data.prefetch_bytes},
                   {"prefetches", s.data.prefetches},
                   {"evictions", s.data.evictions},
                   {"start_delay_mean_s", s.data.delay_mean_s},
                   {"start_delay_p95_s", s.data.delay_p95_s}};
    }
    nlohmann::json gangs = nlohmann::json::array();
    for (const GangResult& g : s.gangs) {
      gangs.push_back({{"name", g.name},
                       {"nodes", g.nodes},
                       {"spares", g.spares},
                       {"finished", g.finished},
                       {"jct_s", g.jct_s},
                       {"gpu_hours_allocated", g.gpu_hours_allocated},
                       {"gpu_hours_useful", g.gpu_hours_useful},
                       {"goodput", g.goodput},
                       {"effective_training_time", g.effective},
                       {"redone", g.redone},
                       {"restoring", g.restoring},
                       {"waiting", g.waiting},
                       {"interruptions", g.interruptions},
                       {"recovered_on_spares", g.recovered_on_spares},
                       {"restart_wait_mean_s", g.restart_wait_mean_s},
                       {"restart_wait_max_s", g.restart_wait_max_s}});
    }
    p["gangs"] = std::move(gangs);
    p["passes"] = s.passes;
    p["wall_seconds"] = s.wall_seconds;
    p["gpu_hours_by_project"] = s.gpu_hours_by_project;
    p["infeasible_examples"] = s.infeasible_examples;
    policies.push_back(std::move(p));
  }
  j["policies"] = std::move(policies);
  return j;
}

}  // namespace loom
