#pragma once

// Dataset fills the server asks for ahead of a task (docs/datasets.md,
// "Prefetch"): when backfill reserves nodes for a gang, the server sends
// each reserved node that lacks the gang's dataset versions
// `POST /v1/datasets/prefetch`, and the node fills them into its cache
// (`DatasetCache::Ensure`, as a launch's data step does) on a thread of its
// own, one fill per version, at most `kMaxPrefetchFills` at once. A fill
// holds its version only while it runs: once complete, the version is kept
// or evicted like any other, and the node's next heartbeat lists it, with
// what the fill copied (`prefetched`) for the server's per-dataset counts.

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/agent_log.h"
#include "loom/agent/dataset_cache.h"
#include "nlohmann/json.hpp"

namespace loom {

// The most prefetch fills a node runs at once; more are refused ("busy").
inline constexpr size_t kMaxPrefetchFills = 4;
// The most reports of ended fills kept for the server (the oldest go).
inline constexpr size_t kMaxPrefetchReports = 64;

// Thread-safe.
class DatasetPrefetches {
 public:
  DatasetPrefetches(DatasetCache* cache, std::string node, const AgentLog& log)
      : cache_(cache), node_(std::move(node)), log_(log) {}
  ~DatasetPrefetches();
  DatasetPrefetches(const DatasetPrefetches&) = delete;
  DatasetPrefetches& operator=(const DatasetPrefetches&) = delete;

  // Starts filling `want.version` unless it is complete ("present") or
  // being filled by a prefetch ("filling"); "started" when it starts now,
  // "busy" when `kMaxPrefetchFills` run already; "local" for a local source
  // on an agent running as root (read with the job's user's rights at the
  // launch, which a prefetch does not know).
  std::string Start(const DatasetWant& want);

  // Waits for the fills in progress (their rclone and peer timeouts bound
  // them).
  void Shutdown();

  // What the fills that completed copied, oldest first, until the server
  // has them (`Acknowledge`): for the heartbeats' `prefetched`, each
  // `{source, version, peer_bytes, cold_bytes, fill_ms, verified_files}`.
  // A fill that copied nothing (the version was there) is not reported.
  // `*through`: the number of the last one, to acknowledge.
  nlohmann::json Reports(uint64_t* through);
  // The server has the reports up to number `through`: they go.
  void Acknowledge(uint64_t through);

 private:
  struct Fill {
    std::thread thread;
    bool running = true;
  };
  // Threads of fills that ended, to join outside the lock.
  std::vector<std::thread> TakeEnded() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  DatasetCache* const cache_;
  const std::string node_;
  const AgentLog& log_;
  absl::Mutex mu_;
  std::map<std::string, Fill> fills_ ABSL_GUARDED_BY(mu_);  // by version
  // Reports not acknowledged yet, with their numbers (from 1).
  std::deque<std::pair<uint64_t, nlohmann::json>> reports_ ABSL_GUARDED_BY(mu_);
  uint64_t last_report_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace loom
