#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"

namespace loom {

// Flags of `loom sim`; see docs/simulator.md.
struct SimFlags {
  std::string cluster = "small";
  std::string trace;
  std::string format = "auto";
  std::string policies = "fair";
  std::string slice_scores = "best_fit";
  bool no_departures = false;
  double arrival_scale = 1.0;
  int64_t limit = 0;
  uint64_t seed = 1;
  std::string time_limits = "none";
  double fail_mtbf_s = 0;
  double checkpoint_interval_s = 0;
  // -1: the default (3600 s and 30 s, or the failure model's).
  double repair_s = -1;
  double restart_cost_s = -1;
  double mig_repartition_s = 15;
  std::string failure_model = "none";
  std::vector<std::string> gangs;  // NODES:HOURS[:SPARES] each
  int restart_max = -1;            // -1: no limit
  double restart_backoff_s = 0;
  int requeue_max = -1;
  double starvation_age_s = 3600;
  std::string las_thresholds = "1,10";
  double half_life_s = 7 * 86400;
  // Datasets (docs/simulator.md "Datasets"); 0 datasets: no data model.
  int datasets = 0;
  std::string dataset_sizes = "1Gi:256Gi";
  double dataset_zipf = 1.0;
  std::string node_cache = "0";       // comma-separated sizes; 0: unlimited
  std::string cold_store_bw = "10G";  // bytes per second, cluster-wide
  std::string node_link_bw = "50G";   // bytes per second (400 Gb/s)
  std::string data_modes = "both";    // both, locality, prefetch, none
  std::string json;
  std::string plot;
  bool strict = false;
  bool quiet = false;
  int threads = 0;
};

// Registers `sim` on `app`; `flags` must outlive the parse.
CLI::App* AddSimCommand(CLI::App& app, SimFlags* flags);

// Runs `loom sim`. Returns the process exit code: 0 on success, 2 for bad
// input (flags, cluster spec, trace under --strict), 1 when writing an output
// file fails.
int RunSim(const SimFlags& flags);

}  // namespace loom
