#pragma once

// Where a node's dataset cache gets its files (docs/datasets.md, "The
// cache", "Peers"): `RcloneDatasetFiller` lists and copies from the cold
// store with rclone (`lsjson -R`, then `copy --transfers N` of the missing
// files) and copies from a peer's cache over the peer's agent API
// (`GET /v1/datasets/<version>/manifest` and `/files/<path>`, with the token
// the server gave for that peer), a few files at once.

#include <map>
#include <string>
#include <vector>

#include "loom/agent/dataset_cache.h"
#include "loom/common/rclone.h"

namespace loom {

struct RcloneDatasetFillerOptions {
  std::string rclone = "rclone";
  std::string config;  // --config FILE; empty: rclone's default
  int transfers = 8;   // rclone's --transfers, and files fetched at once
                       // from a peer
  absl::Duration list_timeout = absl::Minutes(2);
  absl::Duration copy_timeout = absl::Hours(12);
  // How long a node waits for the peer that fills a version from the cold
  // store (`DatasetWant::fill_from_store` false), and how often it asks.
  absl::Duration peer_wait = absl::Hours(1);
  absl::Duration peer_poll = absl::Milliseconds(500);
};

class RcloneDatasetFiller : public DatasetFiller {
 public:
  explicit RcloneDatasetFiller(RcloneDatasetFillerOptions options)
      : options_(std::move(options)) {}
  absl::StatusOr<std::vector<DatasetEntry>> PeerManifest(
      const DatasetWant& want, int* peer) override;
  absl::StatusOr<std::vector<DatasetEntry>> ListSource(
      const DatasetWant& want) override;
  absl::Status Copy(const DatasetWant& want, int peer,
                    const std::vector<DatasetEntry>& entries,
                    const std::string& dir,
                    const std::function<void(int64_t)>& progress,
                    DatasetCopyBytes* from) override;
  // `rclone hashsum TYPE` over the files.
  absl::StatusOr<std::map<std::string, std::string>> Hash(
      const std::string& type, const std::string& dir,
      const std::vector<std::string>& paths) override;

 private:
  absl::Status CopyFromStore(const DatasetWant& want,
                             const std::vector<DatasetEntry>& entries,
                             const std::string& dir,
                             const std::function<void(int64_t)>& progress);
  absl::Status CopyFromPeer(const DatasetWant::Peer& peer,
                            const std::string& version, const std::string& self,
                            const std::vector<DatasetEntry>& entries,
                            const std::string& dir,
                            const std::function<void(int64_t)>& progress);
  RcloneOptions Rclone() const { return {options_.rclone, options_.config}; }

  const RcloneDatasetFillerOptions options_;
};

// `path` with every byte but [A-Za-z0-9-._~/] percent-encoded.
std::string EncodeDatasetPath(const std::string& path);

}  // namespace loom
