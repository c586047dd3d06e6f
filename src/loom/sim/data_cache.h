#pragma once

// Datasets in a replay (docs/simulator.md "Datasets"): a synthetic
// assignment of datasets to jobs, and a model of the node caches in front
// of the cold store.

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "loom/core/cluster.h"

namespace loom {

struct SimJob;

struct DataOptions {
  // D datasets (0: no data model); a job reads one, dataset k (from 0) with
  // probability proportional to 1 / (k + 1)^zipf_s.
  int datasets = 0;
  double zipf_s = 1.0;
  // Sizes, log-uniform in [size_min, size_max] bytes, independent of the
  // popularity.
  int64_t size_min = int64_t{1} << 30;
  int64_t size_max = int64_t{256} << 30;
  // Per node cache budget in bytes (0: unlimited): least recently used
  // complete versions that no running job reads are evicted to make room.
  int64_t node_cache_bytes = 0;
  // Bandwidths in bytes per second: the cold store's aggregate egress
  // (cluster-wide, shared by concurrent fetches in arrival order), and each
  // node's link (a fetch or peer copy runs at most at this rate).
  double cold_store_bps = 10e9;
  double node_link_bps = 50e9;  // 400 Gb/s
  // The scheduler's data locality (`SchedulerOptions::data_locality`) and
  // prefetch for reserved gangs (`PassResult::prefetch`).
  bool locality = true;
  bool prefetch = true;
  // Filled by `AssignDatasets`: each dataset's size in bytes.
  std::vector<int64_t> sizes;
};

// Parses "MIN:MAX" with units ("10G:1T", bytes by default; G and T are
// powers of 1024); InvalidArgument when MIN > MAX or either is not positive.
absl::StatusOr<std::pair<int64_t, int64_t>> ParseSizeRange(
    const std::string& text);

// Gives every job of `jobs` one dataset (`SimJob::dataset`, and
// `request.datasets` = {"dK@1"}) and fills `options->sizes`. Deterministic
// for a seed.
void AssignDatasets(uint64_t seed, DataOptions* options,
                    std::vector<SimJob>* jobs);

// The name of dataset `k` in requests and `Scheduler::SetNodeDatasets`.
std::string DatasetName(int k);

// What the data model measured in one run.
struct DataStats {
  bool enabled = false;
  int64_t starts = 0;         // job starts that read a dataset
  int64_t hit_starts = 0;     // ... whose data was complete on every node
  double bytes = 0;           // bytes the starts needed (per node)
  double hit_bytes = 0;       // ... found complete in the node's cache
  double cold_bytes = 0;      // fetched from the cold store
  double prefetch_bytes = 0;  // filled by prefetch (cold or peer)
  int64_t prefetches = 0;     // (node, dataset) prefetch fills begun
  int64_t evictions = 0;
  double delay_mean_s = 0;  // start delay due to data, per start
  double delay_p95_s = 0;
  double hit_rate_bytes() const { return bytes > 0 ? hit_bytes / bytes : 1; }
  // The cache layer's hit rate: the share of the bytes needed that did
  // not come from the cold store (the node's own cache or a peer's).
  double layer_hit_rate() const {
    return bytes > 0 ? std::max(0.0, 1 - cold_bytes / bytes) : 1;
  }
  double hit_rate_jobs() const {
    return starts > 0 ? static_cast<double>(hit_starts) / starts : 1;
  }
};

// The node caches: which dataset each node holds, fills with one cold
// fetch per leaf switch (the first node of a leaf fetches, the others copy
// from a node of their leaf that holds it, doubling the holders each
// round), and LRU eviction within the budget. Times are simulated seconds.
class DataCache {
 public:
  DataCache(const Cluster& cluster, const DataOptions& options);

  // A run of job `job` starts at `t` on `nodes`, reading `dataset`: returns
  // the time its data is complete on all of them (>= t) and counts the
  // start in the stats. The entries are in use until `Release(job)`.
  double Acquire(int64_t job, int dataset, const std::vector<int>& nodes,
                 double t);
  // The job's run ended: its entries may be evicted again.
  void Release(int64_t job);
  // Starts filling `dataset` on those of `nodes` that lack it, at `t`.
  void Prefetch(int dataset, const std::vector<int>& nodes, double t);

  // Nodes whose set of held datasets changed since the last call (fills
  // begun count as held), and a node's set, by `DatasetName`.
  std::vector<int> TakeChanged();
  std::vector<std::string> Held(int node) const;

  // The stats, with the delay figures computed.
  DataStats Stats() const;

 private:
  struct Entry {
    int dataset;
    double ready;      // complete from this time on
    double last_used;  // for LRU
    int in_use;        // running jobs reading it
  };
  Entry* Find(int node, int dataset);
  // Fills `dataset` on `nodes` (none holds it) from `t`; returns when the
  // last is done. Nodes without room read it uncached (no entry).
  double Fill(int dataset, const std::vector<int>& nodes, double t,
              bool prefetch);
  // Makes room for `bytes` on `node` at `t`; false when the entries in use
  // or still filling leave too little.
  bool MakeRoom(int node, int64_t bytes, double t);
  void Insert(int node, int dataset, double ready, double t);
  void MarkChanged(int node);

  const Cluster& cluster_;
  const DataOptions& options_;
  std::vector<std::vector<Entry>> nodes_;
  std::vector<int64_t> used_;  // bytes held per node
  std::vector<bool> changed_;
  std::vector<int> changed_list_;
  double store_free_ = 0;  // the cold store is busy until then
  // Per running job: its dataset and nodes.
  absl::flat_hash_map<int64_t, std::pair<int, std::vector<int>>> running_;
  DataStats stats_;
  std::vector<double> delays_;
};

}  // namespace loom
