#include "loom/server/dataset_catalog.h"

#include <algorithm>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace loom {
namespace {

std::string Key(const std::string& name) {
  return std::string(kDatasetPrefix) + name;
}

std::string Record(const NamedDataset& d) {
  return nlohmann::json({{"name", d.name},
                         {"source", d.source},
                         {"description", d.description},
                         {"created_by", d.created_by},
                         {"created", absl::ToUnixSeconds(d.created)}})
      .dump();
}

absl::StatusOr<NamedDataset> ReadRecord(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return absl::DataLossError("not a JSON object");
  NamedDataset d;
  for (auto [key, dest] :
       {std::pair{"name", &d.name}, std::pair{"source", &d.source},
        std::pair{"description", &d.description},
        std::pair{"created_by", &d.created_by}}) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) *dest = it->get<std::string>();
  }
  if (auto it = j.find("created"); it != j.end() && it->is_number_integer()) {
    d.created = absl::FromUnixSeconds(it->get<int64_t>());
  }
  if (!CheckDatasetName(d.name).ok() || !CheckDatasetSource(d.source).ok()) {
    return absl::DataLossError("bad name or source");
  }
  return d;
}

int64_t Bytes(const nlohmann::json& item, const char* key) {
  auto it = item.find(key);
  if (it == item.end() || !it->is_number_integer()) return 0;
  return std::max<int64_t>(0, it->get<int64_t>());
}

double HitRatio(const DatasetUse& u) {
  const int64_t all = u.cached_bytes + u.peer_bytes + u.cold_bytes;
  return all == 0 ? 0 : static_cast<double>(u.cached_bytes) / all;
}

}  // namespace

absl::Status DatasetCatalog::Load(std::vector<std::string>* log) {
  absl::StatusOr<std::vector<KeyValue>> kvs = store_->List(kDatasetPrefix);
  if (!kvs.ok()) return kvs.status();
  named_.clear();
  for (const KeyValue& kv : *kvs) {
    absl::StatusOr<NamedDataset> d = ReadRecord(kv.value);
    if (!d.ok() || Key(d->name) != kv.key) {
      log->push_back(nlohmann::json({{"event", "dataset_unreadable"},
                                     {"key", kv.key},
                                     {"error", d.ok() ? "name is not its key"
                                                      : d.status().message()}})
                         .dump());
      continue;
    }
    named_[d->name] = *std::move(d);
  }
  return absl::OkStatus();
}

absl::StatusOr<NamedDataset> DatasetCatalog::Add(NamedDataset d) {
  if (absl::Status st = CheckDatasetName(d.name); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("name: ", st.message()));
  }
  if (absl::Status st = CheckDatasetSource(d.source); !st.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("source: ", st.message()));
  }
  if (d.description.size() > 1024) {
    return absl::InvalidArgumentError(
        "description: at most 1024 bytes are allowed");
  }
  if (auto it = named_.find(d.name); it != named_.end()) {
    return absl::AlreadyExistsError(
        absl::StrCat("dataset ", d.name, " exists (source ", it->second.source,
                     "); `loom dataset rm ", d.name, "` first"));
  }
  if (named_.size() >= kMaxNamedDatasets) {
    return absl::ResourceExhaustedError(
        absl::StrCat("the cluster has ", named_.size(),
                     " named datasets, the most it keeps"));
  }
  absl::StatusOr<int64_t> rev =
      store_->Commit({{Key(d.name), Condition::kMustNotExist}},
                     {Mutation::Put(Key(d.name), Record(d))});
  if (!rev.ok()) {
    if (absl::IsFailedPrecondition(rev.status())) {
      return absl::AlreadyExistsError(
          absl::StrCat("dataset ", d.name, " exists"));
    }
    return rev.status();
  }
  named_[d.name] = d;
  return d;
}

absl::Status DatasetCatalog::Remove(const std::string& name) {
  if (!named_.contains(name)) {
    return absl::NotFoundError(absl::StrCat("no dataset named '", name, "'"));
  }
  absl::StatusOr<int64_t> rev =
      store_->Commit({}, {Mutation::Delete(Key(name))});
  if (!rev.ok()) return rev.status();
  named_.erase(name);
  return absl::OkStatus();
}

const NamedDataset* DatasetCatalog::Find(const std::string& name) const {
  auto it = named_.find(name);
  return it == named_.end() ? nullptr : &it->second;
}

absl::Status DatasetCatalog::Resolve(std::vector<DatasetSpec>* data) const {
  for (size_t i = 0; i < data->size(); ++i) {
    DatasetSpec& d = (*data)[i];
    if (d.name.empty()) continue;
    const NamedDataset* named = Find(d.name);
    if (named == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("data[", i, "].dataset: no dataset named '", d.name,
                       "' (`loom dataset list` shows them)"));
    }
    if (!d.source.empty() && d.source != named->source) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data[", i, "]: dataset ", d.name, " is ", named->source,
          ", not the source given (", d.source, "); give one of them"));
    }
    d.source = named->source;
  }
  return absl::OkStatus();
}

DatasetUse* DatasetCatalog::UseOf(const std::string& name,
                                  const std::string& source) {
  const std::string& key = name.empty() ? source : name;
  auto it = uses_.find(key);
  if (it == uses_.end()) {
    if (uses_.size() >= kMaxCountedDatasets) return nullptr;
    it = uses_.emplace(key, DatasetUse()).first;
    it->second.source = source;
    it->second.named = !name.empty();
  }
  return &it->second;
}

void DatasetCatalog::NotePrefetchAsked(const std::string& node,
                                       const std::string& version,
                                       const std::string& name,
                                       const std::string& source) {
  auto key = std::pair{node, version};
  if (!prefetch_asks_.contains(key) &&
      prefetch_asks_.size() >= kMaxCountedDatasets) {
    prefetch_asks_.erase(
        std::min_element(prefetch_asks_.begin(), prefetch_asks_.end(),
                         [](const auto& a, const auto& b) {
                           return a.second.number < b.second.number;
                         }));
  }
  prefetch_asks_[std::move(key)] = {name, source, ++prefetch_asked_};
}

void DatasetCatalog::RecordPrefetch(const std::string& node,
                                    const nlohmann::json& item) {
  if (!item.is_object()) return;
  auto v = item.find("version");
  if (v == item.end() || !v->is_string()) return;
  auto ask = prefetch_asks_.find({node, v->get<std::string>()});
  if (ask == prefetch_asks_.end()) return;
  DatasetUse* u = UseOf(ask->second.name, ask->second.source);
  prefetch_asks_.erase(ask);
  if (u == nullptr) return;
  ++u->prefetches;
  u->prefetch_peer_bytes += Bytes(item, "peer_bytes");
  u->prefetch_cold_bytes += Bytes(item, "cold_bytes");
  u->prefetch_seconds += static_cast<double>(Bytes(item, "fill_ms")) / 1000;
  u->verified_files += Bytes(item, "verified_files");
}

void DatasetCatalog::RecordUse(const std::string& name,
                               const std::string& source,
                               const nlohmann::json& item, absl::Time now) {
  if (!item.is_object()) return;
  DatasetUse* use = UseOf(name, source);
  if (use == nullptr) return;
  DatasetUse& u = *use;
  const int64_t cached = Bytes(item, "cached_bytes");
  const int64_t peer = Bytes(item, "peer_bytes");
  const int64_t cold = Bytes(item, "cold_bytes");
  ++u.starts;
  u.cached_bytes += cached;
  u.peer_bytes += peer;
  u.cold_bytes += cold;
  if (peer + cold == 0) {
    ++u.hits;
  } else {
    ++u.fills;
    u.fill_seconds += static_cast<double>(Bytes(item, "fill_ms")) / 1000;
  }
  u.verified_files += Bytes(item, "verified_files");
  if (auto v = item.find("version");
      v != item.end() && v->is_string() &&
      IsDatasetVersion(v->get_ref<const std::string&>())) {
    u.version = v->get<std::string>();
  }
  u.source = source;
  u.named = !name.empty();
  u.last_used = now;
}

nlohmann::json DatasetCatalog::Json(
    const std::function<std::vector<std::string>(const std::string&)>& holders)
    const {
  nlohmann::json out = nlohmann::json::array();
  auto use_json = [&](const DatasetUse& u) {
    nlohmann::json j = {
        {"starts", u.starts},
        {"hits", u.hits},
        {"cached_bytes", u.cached_bytes},
        {"peer_bytes", u.peer_bytes},
        {"cold_bytes", u.cold_bytes},
        {"hit_ratio", HitRatio(u)},
        {"fills", u.fills},
        {"fill_seconds_mean", u.fills == 0 ? 0.0 : u.fill_seconds / u.fills},
        {"verified_files", u.verified_files},
        {"prefetches", u.prefetches},
        {"prefetch_seconds_mean",
         u.prefetches == 0 ? 0.0 : u.prefetch_seconds / u.prefetches},
        {"prefetch_peer_bytes", u.prefetch_peer_bytes},
        {"prefetch_cold_bytes", u.prefetch_cold_bytes}};
    if (!u.version.empty()) {
      j["version"] = u.version;
      j["nodes"] = holders(u.version);
    }
    if (u.last_used != absl::InfinitePast()) {
      j["last_used"] =
          absl::FormatTime(absl::RFC3339_sec, u.last_used, absl::UTCTimeZone());
    }
    return j;
  };
  for (const auto& [name, d] : named_) {
    nlohmann::json j = {
        {"name", name},
        {"source", d.source},
        {"description", d.description},
        {"created_by", d.created_by},
        {"created",
         absl::FormatTime(absl::RFC3339_sec, d.created, absl::UTCTimeZone())}};
    auto it = uses_.find(name);
    j["use"] = use_json(it == uses_.end() ? DatasetUse() : it->second);
    out.push_back(std::move(j));
  }
  // Sources used without a name, and names removed since.
  for (const auto& [key, u] : uses_) {
    if (named_.contains(key)) continue;
    nlohmann::json j = {{"name", u.named ? key : ""},
                        {"source", u.source},
                        {"use", use_json(u)}};
    if (u.named) j["removed"] = true;
    out.push_back(std::move(j));
  }
  return out;
}

void DatasetCatalog::WriteMetrics(MetricsWriter& w) const {
  w.Family("loom_datasets_named", "Named datasets of the cluster.",
           MetricType::kGauge);
  w.Sample("loom_datasets_named", {}, static_cast<double>(named_.size()));
  w.Family("loom_dataset_read_bytes_total",
           "Bytes of datasets that tasks' nodes found in their cache, copied "
           "from a peer node or from the cold store, per dataset (its name, "
           "or its source).",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    for (auto [from, bytes] :
         {std::pair{"cache", u.cached_bytes}, std::pair{"peer", u.peer_bytes},
          std::pair{"cold", u.cold_bytes}}) {
      w.Sample("loom_dataset_read_bytes_total",
               {{"dataset", key}, {"from", from}}, static_cast<double>(bytes));
    }
  }
  w.Family("loom_dataset_hit_ratio",
           "Of the bytes of a dataset tasks read, the share their nodes' "
           "caches had.",
           MetricType::kGauge);
  for (const auto& [key, u] : uses_) {
    w.Sample("loom_dataset_hit_ratio", {{"dataset", key}}, HitRatio(u));
  }
  w.Family("loom_dataset_task_starts_total",
           "Task starts that found a dataset whole in their node's cache "
           "(hit) or had to fill it.",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    w.Sample("loom_dataset_task_starts_total",
             {{"dataset", key}, {"result", "hit"}},
             static_cast<double>(u.hits));
    w.Sample("loom_dataset_task_starts_total",
             {{"dataset", key}, {"result", "fill"}},
             static_cast<double>(u.fills));
  }
  w.Family("loom_dataset_fill_seconds_total",
           "Seconds tasks' nodes spent filling a dataset into their cache "
           "(divide by the fill starts for the mean).",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    w.Sample("loom_dataset_fill_seconds_total", {{"dataset", key}},
             u.fill_seconds);
  }
  w.Family("loom_dataset_verified_files_total",
           "Files of a dataset whose checksum a node checked after copying.",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    w.Sample("loom_dataset_verified_files_total", {{"dataset", key}},
             static_cast<double>(u.verified_files));
  }
  w.Family("loom_dataset_prefetches_total",
           "Fills of a dataset that nodes made ahead of a task, as the "
           "server asked (prefetch).",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    w.Sample("loom_dataset_prefetches_total", {{"dataset", key}},
             static_cast<double>(u.prefetches));
  }
  w.Family("loom_dataset_prefetch_bytes_total",
           "Bytes of a dataset that prefetches copied from a peer node or "
           "from the cold store (not in loom_dataset_read_bytes_total).",
           MetricType::kCounter);
  for (const auto& [key, u] : uses_) {
    for (auto [from, bytes] : {std::pair{"peer", u.prefetch_peer_bytes},
                               std::pair{"cold", u.prefetch_cold_bytes}}) {
      w.Sample("loom_dataset_prefetch_bytes_total",
               {{"dataset", key}, {"from", from}}, static_cast<double>(bytes));
    }
  }
}

}  // namespace loom
