#pragma once

// Test-only: a `DatasetFiller` over a cold store of files in memory, for
// the tests of the dataset cache and its prefetch (not part of loom_agent).

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "loom/agent/dataset_cache.h"
#include "loom/common/digest.h"
#include "loom/core/dataset_spec.h"

namespace loom {
namespace agent_testing {

// A cold store of files in memory; peers that have what `peer_has` says.
class FakeFiller : public DatasetFiller {
 public:
  std::map<std::string, std::string> files;  // path -> content
  bool store_down = false;
  bool peer_has = false;
  int cold_copies = 0;  // files copied from the cold store
  int peer_copies = 0;
  bool truncate_on_copy = false;
  // Listings give each file's checksum ("sha256:..."), which `Hash`
  // computes from the copy.
  bool with_hashes = false;
  // A peer's copy has its first byte changed (same size).
  bool corrupt_peer_copy = false;
  int hash_calls = 0;

  std::vector<DatasetEntry> Listing() const {
    std::vector<DatasetEntry> out;
    for (const auto& [p, c] : files) {
      out.push_back({p, static_cast<int64_t>(c.size()),
                     with_hashes ? "sha256:" + Sha256Hex(c) : "", "t"});
    }
    return out;
  }
  absl::StatusOr<std::map<std::string, std::string>> Hash(
      const std::string& type, const std::string& dir,
      const std::vector<std::string>& paths) override {
    ++hash_calls;
    if (type != "sha256") return absl::InvalidArgumentError("unknown type");
    std::map<std::string, std::string> out;
    for (const std::string& p : paths) {
      std::ifstream in(std::filesystem::path(dir) / p, std::ios::binary);
      if (!in) continue;
      std::string content((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
      out[p] = Sha256Hex(content);
    }
    return out;
  }
  absl::StatusOr<std::vector<DatasetEntry>> PeerManifest(
      const DatasetWant& want, int* peer) override {
    if (!peer_has || want.peers.empty()) return absl::NotFoundError("none");
    *peer = 0;
    return Listing();
  }
  absl::StatusOr<std::vector<DatasetEntry>> ListSource(
      const DatasetWant&) override {
    if (store_down) return absl::UnavailableError("connection refused");
    return Listing();
  }
  absl::Status Copy(const DatasetWant&, int peer,
                    const std::vector<DatasetEntry>& entries,
                    const std::string& dir,
                    const std::function<void(int64_t)>& progress,
                    DatasetCopyBytes* from) override {
    int64_t done = 0;
    for (const DatasetEntry& e : entries) {
      const std::filesystem::path p = std::filesystem::path(dir) / e.path;
      std::filesystem::create_directories(p.parent_path());
      std::string content =
          truncate_on_copy ? files[e.path].substr(1) : files[e.path];
      if (peer >= 0 && corrupt_peer_copy && !content.empty()) content[0] ^= 1;
      std::ofstream(p, std::ios::binary) << content;
      (peer >= 0 ? peer_copies : cold_copies)++;
      (peer >= 0 ? from->peer : from->cold) += e.size;
      done += e.size;
      progress(done);
    }
    return absl::OkStatus();
  }
};

}  // namespace agent_testing
}  // namespace loom
