#pragma once

#include <string>
#include <vector>

#include "loom/sim/simulator.h"
#include "loom/sim/workload.h"
#include "nlohmann/json.hpp"

namespace loom {

// Everything one `loom sim` invocation reports.
struct SimReport {
  std::string cluster;
  int cluster_gpus = 0;
  int cluster_nodes = 0;
  std::string trace;
  std::string trace_format;
  int64_t trace_jobs = 0;     // jobs read from the trace
  int64_t trace_issues = 0;   // bad lines skipped
  int64_t trace_skipped = 0;  // lines skipped on purpose
  double arrival_scale = 1.0;
  OfferedLoad offered;
  // Show the GPU capacity rows (allocation and FGD fragmentation): the
  // workload has shares of GPUs, or several slice scores are compared.
  bool capacity_rows = false;
  bool no_departures = false;
  std::vector<SimResult> results;
  double wall_seconds = 0;
};

// The side-by-side table: one column per policy.
std::string FormatSimTable(const SimReport& report);

// The JSON document written by `--json` (see docs/simulator.md).
nlohmann::json SimReportJson(const SimReport& report);

}  // namespace loom
