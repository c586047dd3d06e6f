#pragma once

// The cluster's datasets (docs/datasets.md, "Named datasets", "Seeing
// it"): the named ones (`loom dataset add NAME SOURCE`), kept in the state
// store under "/datasets/<name>", which job specs name instead of a source
// (`data: [{dataset: NAME}]`; the submit sets the source); and what tasks'
// fills took per dataset (bytes from the node's cache, peers and the cold
// store, fill times), as agents report them, for `/metrics`, `GET
// /v1/datasets` and the dashboard. The counters live in memory (a
// restarted controller starts them again, as Prometheus counters do).
//
// Not thread-safe: the controller calls it under its lock.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/common/metrics_text.h"
#include "loom/core/dataset_spec.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

inline constexpr std::string_view kDatasetPrefix = "/datasets/";
// The most named datasets a cluster keeps.
inline constexpr size_t kMaxNamedDatasets = 10000;
// The most datasets whose use is counted (named or not); past it, sources
// seen for the first time are not counted.
inline constexpr size_t kMaxCountedDatasets = 4096;

struct NamedDataset {
  std::string name;
  std::string source;
  std::string description;
  std::string created_by;
  absl::Time created = absl::UnixEpoch();
};

// What tasks found and copied for one dataset since the controller
// started. A task start is a hit when its node had the version whole.
struct DatasetUse {
  int64_t starts = 0;
  int64_t hits = 0;
  int64_t cached_bytes = 0;
  int64_t peer_bytes = 0;
  int64_t cold_bytes = 0;
  int64_t fills = 0;        // starts that copied something
  double fill_seconds = 0;  // summed over `fills`
  int64_t verified_files = 0;
  // Fills nodes made ahead of a task, asked by the server (prefetches),
  // and what they copied: not task starts, so not in the hit rate.
  int64_t prefetches = 0;
  int64_t prefetch_peer_bytes = 0;
  int64_t prefetch_cold_bytes = 0;
  double prefetch_seconds = 0;
  std::string version;  // the last a task used
  std::string source;   // of that task's job
  bool named = false;   // counted under a name (the key)
  absl::Time last_used = absl::InfinitePast();
};

class DatasetCatalog {
 public:
  explicit DatasetCatalog(StateStore* store) : store_(store) {}

  // Reads the named datasets from the store; an unreadable record is
  // skipped and described in `*log` (one JSON line each).
  absl::Status Load(std::vector<std::string>* log);

  // Adds (persists) a named dataset: InvalidArgument for a bad name or
  // source (naming the field), AlreadyExists for a name taken,
  // ResourceExhausted past `kMaxNamedDatasets`, or the store's error
  // (nothing kept).
  absl::StatusOr<NamedDataset> Add(NamedDataset d);
  // NotFound for a name not known.
  absl::Status Remove(const std::string& name);
  const NamedDataset* Find(const std::string& name) const;

  // Sets the source of each named dataset of `data` from the catalog:
  // InvalidArgument "data[i].dataset: ..." for a name it does not know, or
  // a source given beside a name that is not that dataset's.
  absl::Status Resolve(std::vector<DatasetSpec>* data) const;

  // Counts one task's fill of a dataset of `source`, under `name` when the
  // job named it (else under the source): an item of a task's `data` report
  // ({version, cached_bytes, peer_bytes, cold_bytes, fill_ms,
  // verified_files}).
  void RecordUse(const std::string& name, const std::string& source,
                 const nlohmann::json& item, absl::Time now);

  // A prefetch the server asked of `node` (`POST /v1/datasets/prefetch`)
  // for a dataset of `source`, named `name` in the job (or not): the
  // node's report of it is counted under that name or source. At most
  // `kMaxCountedDatasets` asks are remembered (the oldest go).
  void NotePrefetchAsked(const std::string& node, const std::string& version,
                         const std::string& name, const std::string& source);
  // An item of `node`'s `prefetched` (heartbeats; {version, peer_bytes,
  // cold_bytes, fill_ms, verified_files}): counted once, and only for a
  // prefetch asked of that node; anything else is ignored.
  void RecordPrefetch(const std::string& node, const nlohmann::json& item);

  // `GET /v1/datasets`: the named datasets and every dataset used (one
  // named once and removed since: `"removed": true`), each with its use;
  // `holders` gives, for a version, the nodes whose caches hold it.
  nlohmann::json Json(
      const std::function<std::vector<std::string>(const std::string&)>&
          holders) const;

  // loom_dataset_read_bytes_total{dataset,from="cache|peer|cold"},
  // loom_dataset_task_starts_total{dataset,result="hit|fill"},
  // loom_dataset_fill_seconds_sum / _count, loom_dataset_hit_ratio,
  // loom_dataset_verified_files_total, loom_datasets_named,
  // loom_dataset_prefetches_total, loom_dataset_prefetch_bytes_total
  // {dataset,from="peer|cold"}.
  void WriteMetrics(MetricsWriter& w) const;

 private:
  struct PrefetchAsk {
    std::string name;
    std::string source;
    uint64_t number = 0;  // the order of the asks
  };
  // The use counted under `name`, else `source`; null past
  // `kMaxCountedDatasets`.
  DatasetUse* UseOf(const std::string& name, const std::string& source);

  StateStore* const store_;
  std::map<std::string, NamedDataset> named_;
  std::map<std::string, DatasetUse> uses_;
  // By (node, version).
  std::map<std::pair<std::string, std::string>, PrefetchAsk> prefetch_asks_;
  uint64_t prefetch_asked_ = 0;
};

}  // namespace loom
