#pragma once

// Reading a cluster's node list as a trace publishes it: the Alibaba openb
// `openb_node_list_gpu_node.csv` (docs/trace-formats.md "Alibaba openb node
// list"). `loom sim --cluster FILE.csv` builds its simulated cluster from
// one (loom/sim/openb_cluster.h).
//
// Pure function of its input bytes; safe to call from several threads.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom {

// One node of the list.
struct NodeListEntry {
  std::string name;        // `sn`
  int64_t cpu_milli = 0;   // CPU cores x 1000
  int64_t memory_mib = 0;  // host memory
  int gpus = 0;            // 1 to 16
  std::string model;       // GPU model, lower case (`v100m16`)
  int line = 0;            // 1-based line in the file
};

// Whether `header_line` (the first line of a file) is a node list's header:
// it has the columns `sn` and `gpu` and `model`, in any case and order.
bool IsNodeListHeader(std::string_view header_line);

// Parses a node list. Header: `sn,cpu_milli,memory_mib,gpu,model` (any order,
// any case, extra columns ignored). Unlike a trace, a cluster must be read
// whole: the first bad line (a wrong field count, a number that does not
// parse or is negative, a GPU count outside 1..16, an empty or odd model
// name, a repeated `sn`) is an `InvalidArgument` error
// `<source>: line N: <column>: <reason>`; so is an empty list or a header
// that lacks a column.
absl::StatusOr<std::vector<NodeListEntry>> ParseNodeList(
    std::string_view text, std::string_view source);

// Reads the node list in the file at `path` (`NotFound` when it cannot be
// opened).
absl::StatusOr<std::vector<NodeListEntry>> ReadNodeListFile(
    const std::string& path);

}  // namespace loom
