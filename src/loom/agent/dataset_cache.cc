#include "loom/agent/dataset_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "loom/common/atomic_file.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace fs = std::filesystem;

namespace {

std::string ReadWhole(const std::string& path, bool* ok) {
  std::ifstream in(path, std::ios::binary);
  *ok = static_cast<bool>(in);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The files of `entries` whose size in `dir` is not theirs.
std::vector<DatasetEntry> Mismatched(const std::vector<DatasetEntry>& entries,
                                     const std::string& dir) {
  std::vector<DatasetEntry> out;
  for (const DatasetEntry& e : entries) {
    std::error_code ec;
    const auto size = fs::file_size(fs::path(dir) / e.path, ec);
    if (ec || static_cast<int64_t>(size) != e.size) out.push_back(e);
  }
  return out;
}

int64_t TotalBytes(const std::vector<DatasetEntry>& entries) {
  int64_t n = 0;
  for (const DatasetEntry& e : entries) n += e.size;
  return n;
}

int64_t DirBytes(const std::string& dir) {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code e2;
    if (it->is_regular_file(e2)) n += static_cast<int64_t>(it->file_size(e2));
  }
  return n;
}

}  // namespace

bool SafeDatasetPath(const std::string& path) {
  if (path.empty() || path[0] == '/' || path.find('\0') != std::string::npos) {
    return false;
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") return false;
  }
  return true;
}

absl::StatusOr<std::vector<DatasetEntry>> ParseDatasetManifest(
    const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_array()) {
    return absl::DataLossError("manifest is not a JSON array");
  }
  std::vector<DatasetEntry> out;
  for (const nlohmann::json& e : j) {
    if (!e.is_object() || !e.contains("path") || !e["path"].is_string() ||
        !e.contains("size") || !e["size"].is_number_integer()) {
      return absl::DataLossError("manifest entry without path or size");
    }
    DatasetEntry d;
    d.path = e["path"].get<std::string>();
    d.size = e["size"].get<int64_t>();
    if (!SafeDatasetPath(d.path) || d.size < 0) {
      return absl::DataLossError(
          absl::StrCat("manifest names a bad file '", d.path, "'"));
    }
    if (auto h = e.find("hash"); h != e.end() && h->is_string()) {
      d.hash = h->get<std::string>();
    }
    if (auto m = e.find("modtime"); m != e.end() && m->is_string()) {
      d.modtime = m->get<std::string>();
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::string DatasetManifestJson(const std::vector<DatasetEntry>& entries) {
  nlohmann::json j = nlohmann::json::array();
  for (const DatasetEntry& e : entries) {
    j.push_back({{"path", e.path},
                 {"size", e.size},
                 {"hash", e.hash},
                 {"modtime", e.modtime}});
  }
  return j.dump();
}

class DatasetCache::Hold : public DatasetHold {
 public:
  Hold(DatasetCache* cache, std::string version, std::string dir)
      : cache_(cache), version_(std::move(version)), dir_(std::move(dir)) {}
  ~Hold() override {
    if (!marker_.empty()) {
      std::error_code ec;
      fs::remove(marker_, ec);
    }
    cache_->Release(version_);
  }
  const std::string& dir() const override { return dir_; }
  // Records the hold on disk for `holder` (a task id), removed with it.
  void Mark(const std::string& vdir, const std::string& holder) {
    if (!SafeHolderName(holder)) return;
    std::error_code ec;
    fs::create_directories(vdir + "/holders", ec);
    marker_ = vdir + "/holders/" + holder;
    std::ofstream touch(marker_);
  }
  void Adopt(std::string marker) { marker_ = std::move(marker); }

  static bool SafeHolderName(const std::string& name) {
    return !name.empty() && name.size() <= 128 && name != "." && name != ".." &&
           std::all_of(name.begin(), name.end(), [](char c) {
             return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
                    c == '.' || c == '_' || c == '-';
           });
  }

 private:
  DatasetCache* const cache_;
  const std::string version_;
  const std::string dir_;
  std::string marker_;
};

std::map<std::string, std::vector<std::shared_ptr<DatasetHold>>>
DatasetCache::Readopt(const std::set<std::string>& live) {
  std::map<std::string, std::vector<std::shared_ptr<DatasetHold>>> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.root, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string version = it->path().filename().string();
    if (!IsDatasetVersion(version)) continue;
    std::error_code e2;
    for (auto h = fs::directory_iterator(it->path() / "holders", e2);
         !e2 && h != fs::directory_iterator(); h.increment(e2)) {
      const std::string task = h->path().filename().string();
      if (!live.contains(task)) {
        std::error_code e3;
        fs::remove(h->path(), e3);
        continue;
      }
      {
        absl::MutexLock lock(&mu_);
        ++holds_[version];
      }
      auto hold =
          std::make_shared<Hold>(this, version, VersionDir(version) + "/data");
      hold->Adopt(h->path().string());
      out[task].push_back(std::move(hold));
    }
  }
  return out;
}

DatasetCache::DatasetCache(DatasetCacheOptions options, DatasetFiller* filler)
    : options_(std::move(options)), filler_(filler) {}

std::string DatasetCache::VersionDir(const std::string& version) const {
  return absl::StrCat(options_.root, "/", version);
}

void DatasetCache::Release(const std::string& version) {
  absl::MutexLock lock(&mu_);
  if (--holds_[version] <= 0) holds_.erase(version);
}

absl::StatusOr<std::shared_ptr<DatasetHold>> DatasetCache::Ensure(
    const DatasetWant& want,
    const std::function<void(int64_t, int64_t)>& progress,
    DatasetFillStats* stats) {
  DatasetFillStats ignored;
  if (stats == nullptr) stats = &ignored;
  *stats = DatasetFillStats();
  if (!IsDatasetVersion(want.version)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", want.version, "' is not a dataset version"));
  }
  std::shared_ptr<absl::Mutex> fill_mu;
  {
    absl::MutexLock lock(&mu_);
    std::shared_ptr<absl::Mutex>& m = filling_[want.version];
    if (m == nullptr) m = std::make_shared<absl::Mutex>();
    fill_mu = m;
    ++holds_[want.version];  // held from now: not evicted under us
  }
  auto hold = std::make_shared<Hold>(this, want.version,
                                     VersionDir(want.version) + "/data");
  absl::MutexLock fill_lock(fill_mu.get());
  const std::string vdir = VersionDir(want.version);
  std::error_code ec;
  if (fs::exists(vdir + "/complete", ec)) {
    absl::StatusOr<std::vector<DatasetEntry>> manifest = Manifest(want.version);
    if (manifest.ok()) {
      std::vector<DatasetEntry> bad = Mismatched(*manifest, vdir + "/data");
      if (bad.empty()) {
        fs::last_write_time(vdir + "/complete",
                            fs::file_time_type::clock::now(), ec);
        stats->cached_bytes = TotalBytes(*manifest);
        hold->Mark(vdir, want.holder);
        return hold;
      }
    }
    // A file changed size (truncated) or the manifest is unreadable: not
    // complete any more; the fill below fetches what is wrong.
    fs::remove(vdir + "/complete", ec);
  }
  const absl::Time start = absl::Now();
  absl::Status st = Fill(want, progress, stats);
  stats->fill_time = absl::Now() - start;
  if (!st.ok()) return st;
  hold->Mark(vdir, want.holder);
  stats->evicted = Evict();
  return hold;
}

absl::StatusOr<std::vector<DatasetEntry>> DatasetCache::Verify(
    const std::vector<DatasetEntry>& copied, const std::string& data,
    int64_t* verified) {
  // By type: one `Hash` call each ("md5:..." -> "md5").
  std::map<std::string, std::vector<const DatasetEntry*>> by_type;
  for (const DatasetEntry& e : copied) {
    const size_t colon = e.hash.find(':');
    if (colon == std::string::npos || colon == 0) continue;
    by_type[e.hash.substr(0, colon)].push_back(&e);
  }
  std::vector<DatasetEntry> bad;
  for (const auto& [type, entries] : by_type) {
    std::vector<std::string> paths;
    for (const DatasetEntry* e : entries) paths.push_back(e->path);
    absl::StatusOr<std::map<std::string, std::string>> got =
        filler_->Hash(type, data, paths);
    if (!got.ok()) {
      return absl::Status(got.status().code(),
                          absl::StrCat("checksums (", type, ") of the copy: ",
                                       got.status().message()));
    }
    for (const DatasetEntry* e : entries) {
      auto it = got->find(e->path);
      if (it != got->end() && it->second == e->hash.substr(type.size() + 1)) {
        ++*verified;
        continue;
      }
      std::error_code ec;
      fs::remove(fs::path(data) / e->path, ec);
      bad.push_back(*e);
    }
  }
  return bad;
}

absl::Status DatasetCache::Fill(
    const DatasetWant& want,
    const std::function<void(int64_t, int64_t)>& progress,
    DatasetFillStats* stats) {
  const std::string vdir = VersionDir(want.version);
  const std::string data = vdir + "/data";
  std::error_code ec;
  fs::create_directories(data, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot make ", data, ": ", ec.message()));
  }
  int peer = -1;
  absl::StatusOr<std::vector<DatasetEntry>> listing =
      filler_->PeerManifest(want, &peer);
  // A peer's manifest is the listing its copy was checked against: it must
  // give the same version (else the cold store).
  if (listing.ok() && DatasetVersion(want.source, *listing) != want.version) {
    listing = absl::NotFoundError("the peer's copy is another version");
  }
  if (!listing.ok()) {
    peer = -1;
    listing = filler_->ListSource(want);
    if (!listing.ok()) return listing.status();
    const std::string now = DatasetVersion(want.source, *listing);
    if (now != want.version) {
      return absl::FailedPreconditionError(absl::StrCat(
          "dataset ", want.source, " changed since the job was queued (now ",
          now, ", the job's ", want.version, ")"));
    }
  }
  for (const DatasetEntry& e : *listing) {
    if (!SafeDatasetPath(e.path)) {
      return absl::DataLossError(absl::StrCat(
          "dataset ", want.source, ": bad file name '", e.path, "'"));
    }
  }
  const int64_t total = TotalBytes(*listing);
  if (static_cast<int64_t>(listing->size()) != want.files ||
      total != want.bytes) {
    return absl::DataLossError(absl::StrCat(
        "dataset ", want.source, " version ", want.version, ": ",
        peer >= 0 ? "the peer's copy" : "the listing", " has ", listing->size(),
        " files of ", total, " bytes, the server listed ", want.files, " of ",
        want.bytes));
  }
  std::vector<DatasetEntry> missing = Mismatched(*listing, data);
  // Files of the wrong size go first, so that a copy that skips files by
  // size and time fetches them again.
  for (const DatasetEntry& e : missing) fs::remove(fs::path(data) / e.path, ec);
  const int64_t have = total - TotalBytes(missing);
  stats->cached_bytes = have;
  if (peer >= 0) stats->peer = want.peers[peer].node;
  // At most two rounds: the copy, then the files whose checksum was wrong,
  // from the cold store.
  for (int round = 0; round < 2 && !missing.empty(); ++round) {
    const int64_t before = total - TotalBytes(missing);
    DatasetCopyBytes from;
    absl::Status st = filler_->Copy(
        want, round == 0 ? peer : -1, missing, data,
        [&](int64_t done) { progress(before + done, total); }, &from);
    stats->peer_bytes += from.peer;
    stats->cold_bytes += from.cold;
    if (!st.ok()) return st;
    std::vector<DatasetEntry> short_files = Mismatched(missing, data);
    if (!short_files.empty()) {
      return absl::DataLossError(absl::StrCat(
          "dataset ", want.source, " version ", want.version, ": ",
          short_files.size(),
          " files do not have their listed size after the fill (first: ",
          short_files[0].path, ")"));
    }
    absl::StatusOr<std::vector<DatasetEntry>> wrong =
        Verify(missing, data, &stats->verified_files);
    if (!wrong.ok()) return wrong.status();
    missing = *std::move(wrong);
    if (!missing.empty() && (round == 1 || peer < 0)) {
      return absl::DataLossError(absl::StrCat(
          "dataset ", want.source, " version ", want.version, ": ",
          missing.size(), " files do not have their listed checksum after ",
          "the fill (first: ", missing[0].path, ", ", missing[0].hash, ")"));
    }
  }
  progress(total, total);
  if (absl::Status st = WriteFileAtomically(vdir + "/manifest.json",
                                            DatasetManifestJson(*listing));
      !st.ok()) {
    return st;
  }
  return WriteFileAtomically(vdir + "/complete", want.version);
}

bool DatasetCache::AdmitPeer(const std::string& version,
                             const std::string& client, absl::Time now) {
  if (client.empty()) return true;
  absl::MutexLock lock(&mu_);
  std::map<std::string, absl::Time>& clients = peer_clients_[version];
  for (auto it = clients.begin(); it != clients.end();) {
    it = now - it->second > options_.peer_lease ? clients.erase(it)
                                                : std::next(it);
  }
  if (!clients.contains(client) &&
      static_cast<int>(clients.size()) >= options_.max_peer_clients) {
    return false;
  }
  clients[client] = now;
  return true;
}

void DatasetCache::TouchPeer(const std::string& version,
                             const std::string& client, absl::Time now) {
  if (client.empty()) return;
  absl::MutexLock lock(&mu_);
  auto it = peer_clients_.find(version);
  if (it != peer_clients_.end()) {
    auto c = it->second.find(client);
    if (c != it->second.end()) c->second = now;
  }
}

absl::StatusOr<std::vector<DatasetEntry>> DatasetCache::Manifest(
    const std::string& version) const {
  if (!IsDatasetVersion(version)) {
    return absl::NotFoundError("no such version");
  }
  const std::string vdir = VersionDir(version);
  std::error_code ec;
  if (!fs::exists(vdir + "/complete", ec)) {
    return absl::NotFoundError(
        absl::StrCat("version ", version, " is not complete here"));
  }
  bool ok = false;
  const std::string text = ReadWhole(vdir + "/manifest.json", &ok);
  if (!ok) return absl::NotFoundError("no manifest");
  return ParseDatasetManifest(text);
}

absl::StatusOr<std::string> DatasetCache::FilePath(
    const std::string& version, const std::string& path) const {
  absl::StatusOr<std::vector<DatasetEntry>> m = Manifest(version);
  if (!m.ok()) return m.status();
  if (!SafeDatasetPath(path) ||
      std::none_of(m->begin(), m->end(),
                   [&](const DatasetEntry& e) { return e.path == path; })) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a file of version ", version));
  }
  return absl::StrCat(VersionDir(version), "/data/", path);
}

int64_t DatasetCache::Bytes() const {
  int64_t n = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.root, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    n += DirBytes((it->path() / "data").string());
  }
  return n;
}

std::vector<std::string> DatasetCache::CompleteVersions(size_t max) const {
  std::vector<std::string> out;
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.root, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    std::error_code e2;
    if (IsDatasetVersion(name) && fs::exists(it->path() / "complete", e2)) {
      out.push_back(name);
    }
  }
  std::sort(out.begin(), out.end());
  if (out.size() > max) out.resize(max);
  return out;
}

std::vector<std::string> DatasetCache::Evict() {
  struct Version {
    std::string name;
    fs::file_time_type used;
    int64_t bytes;
  };
  std::vector<Version> all;
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::directory_iterator(options_.root, ec);
       !ec && it != fs::directory_iterator(); it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!IsDatasetVersion(name)) continue;
    std::error_code e2;
    fs::file_time_type used = fs::last_write_time(it->path() / "complete", e2);
    if (e2) used = fs::file_time_type::min();  // unfinished: first to go
    const int64_t bytes = DirBytes((it->path() / "data").string());
    total += bytes;
    all.push_back({name, used, bytes});
  }
  std::sort(all.begin(), all.end(),
            [](const Version& a, const Version& b) { return a.used < b.used; });
  std::vector<std::string> gone;
  absl::MutexLock lock(&mu_);
  for (const Version& v : all) {
    if (total <= options_.budget_bytes) break;
    if (holds_.contains(v.name)) continue;  // in use, or being filled
    fs::remove_all(VersionDir(v.name), ec);
    filling_.erase(v.name);
    peer_clients_.erase(v.name);
    total -= v.bytes;
    gone.push_back(v.name);
  }
  return gone;
}

}  // namespace loom
