#include "loom/sim/data_cache.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/common/units.h"
#include "loom/sim/workload.h"

namespace loom {

absl::StatusOr<std::pair<int64_t, int64_t>> ParseSizeRange(
    const std::string& text) {
  std::vector<std::string> parts = absl::StrSplit(text, ':');
  if (parts.size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not MIN:MAX (say 10Gi:1Ti)"));
  }
  absl::StatusOr<int64_t> lo = ParseBytes(parts[0]);
  absl::StatusOr<int64_t> hi = ParseBytes(parts[1]);
  if (!lo.ok()) return lo.status();
  if (!hi.ok()) return hi.status();
  if (*lo <= 0 || *hi < *lo) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", text, "': sizes must be positive and MIN at most MAX"));
  }
  return std::make_pair(*lo, *hi);
}

std::string DatasetName(int k) { return absl::StrCat("d", k, "@1"); }

void AssignDatasets(uint64_t seed, DataOptions* options,
                    std::vector<SimJob>* jobs) {
  const int d = options->datasets;
  options->sizes.clear();
  if (d <= 0) return;
  std::mt19937_64 rng(seed ^ 0x6461746173657473ULL);  // "datasets"
  const double lo = std::log(static_cast<double>(options->size_min));
  const double hi = std::log(static_cast<double>(options->size_max));
  std::uniform_real_distribution<double> u(lo, hi);
  for (int k = 0; k < d; ++k) {
    options->sizes.push_back(static_cast<int64_t>(std::exp(u(rng))));
  }
  std::vector<double> weights(d);
  for (int k = 0; k < d; ++k) {
    weights[k] = 1.0 / std::pow(k + 1.0, options->zipf_s);
  }
  std::discrete_distribution<int> pick(weights.begin(), weights.end());
  for (SimJob& job : *jobs) {
    job.dataset = pick(rng);
    job.request.datasets = {DatasetName(job.dataset)};
  }
}

DataCache::DataCache(const Cluster& cluster, const DataOptions& options)
    : cluster_(cluster),
      options_(options),
      nodes_(cluster.nodes.size()),
      used_(cluster.nodes.size(), 0),
      changed_(cluster.nodes.size(), false) {
  stats_.enabled = true;
}

DataCache::Entry* DataCache::Find(int node, int dataset) {
  for (Entry& e : nodes_[node]) {
    if (e.dataset == dataset) return &e;
  }
  return nullptr;
}

void DataCache::MarkChanged(int node) {
  if (!changed_[node]) {
    changed_[node] = true;
    changed_list_.push_back(node);
  }
}

bool DataCache::MakeRoom(int node, int64_t bytes, double t) {
  const int64_t budget = options_.node_cache_bytes;
  if (budget <= 0) return true;
  if (bytes > budget) return false;
  std::vector<Entry>& entries = nodes_[node];
  while (used_[node] + bytes > budget) {
    // The least recently used entry that is complete and unused.
    size_t victim = entries.size();
    for (size_t i = 0; i < entries.size(); ++i) {
      const Entry& e = entries[i];
      if (e.in_use > 0 || e.ready > t) continue;
      if (victim == entries.size() || e.last_used < entries[victim].last_used) {
        victim = i;
      }
    }
    if (victim == entries.size()) return false;
    used_[node] -= options_.sizes[entries[victim].dataset];
    entries.erase(entries.begin() + static_cast<std::ptrdiff_t>(victim));
    stats_.evictions += 1;
    MarkChanged(node);
  }
  return true;
}

void DataCache::Insert(int node, int dataset, double ready, double t) {
  if (!MakeRoom(node, options_.sizes[dataset], t)) return;
  nodes_[node].push_back({dataset, ready, t, 0});
  used_[node] += options_.sizes[dataset];
  MarkChanged(node);
}

double DataCache::Fill(int dataset, const std::vector<int>& nodes, double t,
                       bool prefetch) {
  const double size = static_cast<double>(options_.sizes[dataset]);
  const double link = options_.node_link_bps;
  const double copy_s = size / link;
  const Topology& topo = cluster_.topology;
  // The nodes to fill, by leaf switch.
  std::map<int, std::vector<int>> by_leaf;
  for (int node : nodes) by_leaf[topo.leaf_of(node)].push_back(node);
  double done = t;
  for (auto& [leaf, group] : by_leaf) {
    // A node of this leaf that holds (or is filling) the dataset is the
    // source; else the group's first node fetches from the cold store.
    double source_ready = -1;
    for (int peer : topo.sw(leaf).nodes) {
      if (const Entry* e = Find(peer, dataset); e != nullptr) {
        if (source_ready < 0 || e->ready < source_ready) {
          source_ready = e->ready;
        }
      }
    }
    size_t first_copy = 0;
    if (source_ready < 0) {
      const double start = std::max(t, store_free_);
      store_free_ = start + size / options_.cold_store_bps;
      source_ready = start + size / std::min(options_.cold_store_bps, link);
      stats_.cold_bytes += size;
      Insert(group[0], dataset, source_ready, t);
      done = std::max(done, source_ready);
      first_copy = 1;
    }
    source_ready = std::max(source_ready, t);
    // Peer copies: every holder serves one more node per round, so the
    // holders double each round.
    for (size_t k = first_copy; k < group.size(); ++k) {
      const int copies = static_cast<int>(k - first_copy) + 1;
      const int rounds = std::bit_width(static_cast<unsigned>(copies));
      const double ready = source_ready + rounds * copy_s;
      Insert(group[k], dataset, ready, t);
      done = std::max(done, ready);
    }
    if (prefetch) stats_.prefetch_bytes += size * group.size();
  }
  return done;
}

double DataCache::Acquire(int64_t job, int dataset,
                          const std::vector<int>& nodes, double t) {
  const double size = static_cast<double>(options_.sizes[dataset]);
  double ready = t;
  bool hit = true;
  std::vector<int> missing;
  for (int node : nodes) {
    stats_.bytes += size;
    if (Entry* e = Find(node, dataset); e != nullptr) {
      if (e->ready <= t) {
        stats_.hit_bytes += size;
      } else {
        hit = false;  // still filling (a prefetch, or another job's fill)
        ready = std::max(ready, e->ready);
      }
      e->last_used = t;
    } else {
      hit = false;
      missing.push_back(node);
    }
  }
  if (!missing.empty()) {
    ready = std::max(ready, Fill(dataset, missing, t, /*prefetch=*/false));
  }
  for (int node : nodes) {
    if (Entry* e = Find(node, dataset); e != nullptr) e->in_use += 1;
  }
  running_[job] = {dataset, nodes};
  stats_.starts += 1;
  stats_.hit_starts += hit ? 1 : 0;
  delays_.push_back(ready - t);
  return ready;
}

void DataCache::Release(int64_t job) {
  auto it = running_.find(job);
  if (it == running_.end()) return;
  const auto& [dataset, nodes] = it->second;
  for (int node : nodes) {
    if (Entry* e = Find(node, dataset); e != nullptr && e->in_use > 0) {
      e->in_use -= 1;
    }
  }
  running_.erase(it);
}

void DataCache::Prefetch(int dataset, const std::vector<int>& nodes, double t) {
  std::vector<int> missing;
  for (int node : nodes) {
    if (Find(node, dataset) == nullptr) missing.push_back(node);
  }
  if (missing.empty()) return;
  stats_.prefetches += static_cast<int64_t>(missing.size());
  Fill(dataset, missing, t, /*prefetch=*/true);
}

std::vector<int> DataCache::TakeChanged() {
  for (int node : changed_list_) changed_[node] = false;
  return std::exchange(changed_list_, {});
}

std::vector<std::string> DataCache::Held(int node) const {
  std::vector<std::string> held;
  held.reserve(nodes_[node].size());
  for (const Entry& e : nodes_[node]) held.push_back(DatasetName(e.dataset));
  return held;
}

DataStats DataCache::Stats() const {
  DataStats s = stats_;
  if (!delays_.empty()) {
    std::vector<double> sorted = delays_;
    std::sort(sorted.begin(), sorted.end());
    double sum = 0;
    for (double d : sorted) sum += d;
    s.delay_mean_s = sum / static_cast<double>(sorted.size());
    const double pos = 0.95 * static_cast<double>(sorted.size() - 1);
    const size_t lo = static_cast<size_t>(std::floor(pos));
    const size_t hi = std::min(sorted.size() - 1, lo + 1);
    s.delay_p95_s = sorted[lo] +
                    (sorted[hi] - sorted[lo]) * (pos - static_cast<double>(lo));
  }
  return s;
}

}  // namespace loom
