#pragma once

// The health monitor (docs/fault-tolerance.md, "Health"): a thread that
// checks the host every round (the data disk, the operator's command, the
// GPUs NVML sees, hardware Xid errors) and keeps the problems it found. The
// session sends them, and each node's injected GPU faults, with every
// heartbeat; the server drains a node that has any.

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/gpu_probe.h"
#include "nlohmann/json.hpp"

namespace loom {

struct HealthMonitorOptions {
  // Each round checks this directory's disk.
  std::string data_dir;
  int64_t min_free_disk_bytes = int64_t{256} << 20;
  // Run with `/bin/sh -c` each round; "" : none.
  std::string command;
  absl::Duration command_timeout = absl::Seconds(30);
  absl::Duration interval = absl::Seconds(10);
  // Real GPUs (null when emulated): the probe must find `expected_gpus`;
  // the watcher's hardware Xids are problems. Not owned.
  GpuProbe* probe = nullptr;
  int expected_gpus = 0;
  const NvmlXidWatcher* xid_watcher = nullptr;
  // Called (on the monitor's thread) when the problems changed.
  std::function<void()> on_change;
  // Called (on the monitor's thread) at the start of every round, for the
  // node's own upkeep (MIG modes that wait: `SettleMigModes`); with a zero
  // `interval` (no checks), every 10 s.
  std::function<void()> each_round;
};

// Thread-safe.
class HealthMonitor {
 public:
  HealthMonitor(HealthMonitorOptions options, const AgentLog& log)
      : options_(std::move(options)), log_(log) {}
  ~HealthMonitor() { Stop(); }

  // Starts the rounds on a thread of their own (none for a zero interval
  // without `each_round`).
  void Start();
  // Ends the rounds; idempotent.
  void Stop();

  // One round: the host's problems now.
  std::vector<std::string> CheckHost() const;

  // {ok, problems}: the host's problems (last round) and `node`'s failed
  // GPUs (injected faults).
  nlohmann::json HealthJson(const AgentNode& node) const;

 private:
  void Loop();

  const HealthMonitorOptions options_;
  const AgentLog& log_;
  absl::Notification stop_;
  std::thread thread_;
  mutable absl::Mutex mu_;
  std::vector<std::string> host_problems_ ABSL_GUARDED_BY(mu_);
};

}  // namespace loom
