#pragma once

// Fault injection (`POST /v1/faults`, docs/fault-tolerance.md): the faults a
// test or an operator can give the agent on purpose, so that the paths that
// handle them are tested rather than hoped for: heartbeats dropped (a node
// cut off), an emulated GPU failed or healed, a slow agent API, the agent
// killed as if it crashed.

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/node_table.h"
#include "nlohmann/json.hpp"

namespace loom {

// Thread-safe.
class FaultInjector {
 public:
  // `emulated`: GPUs are emulated (only those can fail). `report_soon` is
  // called for a node whose health changed.
  FaultInjector(const NodeTable& nodes, bool emulated,
                std::function<void(AgentNode&)> report_soon,
                const AgentLog& log)
      : nodes_(nodes),
        emulated_(emulated),
        report_soon_(std::move(report_soon)),
        log_(log) {}

  // Applies the faults of `body` ({node?, drop_heartbeats?, fail_gpu?,
  // heal_gpu?, hold_gpu?, reset_gpu?, delay_ms?, exit?, clear?}) to the node
  // named by `node` (the query) or the body, or to every node. The body is
  // checked in full before anything changes: `InvalidArgument` (with `*field`)
  // for an unknown fault or a bad value, `FailedPrecondition` for failing a
  // real GPU, `NotFound` for a node not served. Returns how many nodes it
  // touched.
  absl::StatusOr<size_t> Apply(const nlohmann::json& body,
                               const std::string& node, std::string* field);

  // The injected delay of every agent API answer but the fault route's.
  int64_t api_delay_ms() const { return api_delay_ms_.load(); }

 private:
  const NodeTable& nodes_;
  const bool emulated_;
  const std::function<void(AgentNode&)> report_soon_;
  const AgentLog& log_;
  std::atomic<int64_t> api_delay_ms_{0};
};

}  // namespace loom
