#pragma once

// A node's dataset cache (docs/datasets.md, "The cache"): complete,
// verified copies of dataset versions under `<root>/<version>/`, filled by a
// `DatasetFiller` (rclone from the cold store, or a peer node's cache),
// kept within a byte budget by deleting the least recently used versions no
// task holds.
//
// Layout of one version:
//   <root>/<version>/data/...        the files, as the source has them
//   <root>/<version>/manifest.json   [{"path", "size", "hash"}], from the
//                                    listing the fill was checked against
//   <root>/<version>/complete        written (atomically) after the check;
//                                    its mtime is the version's last use
// A version without `complete` is a fill in progress or an interrupted one:
// the next fill goes on from what is there.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/common/user_account.h"
#include "loom/core/dataset_spec.h"

namespace loom {

// One dataset of a launch: what to make present.
struct DatasetWant {
  std::string source;   // REMOTE:PATH or an absolute path
  std::string mount;    // where the task sees it (absolute)
  std::string version;  // the server's `DatasetVersion` of the source
  int64_t files = 0;    // what the server's listing found
  int64_t bytes = 0;
  // Agents of the job's other nodes ("host:port") and the token each
  // accepts for this version.
  struct Peer {
    std::string node;
    std::string address;
    std::string token;
  };
  std::vector<Peer> peers;
  // False: `peers[0]` fills this version from the cold store; wait for it
  // and copy from it (the cold store only if it fails or does not answer).
  bool fill_from_store = true;
  // This node's name: the peers it copies from count their clients by it.
  std::string node;
  // The task that will read it (its id), or empty: the cache records the
  // hold on disk (`<root>/<version>/holders/<task>`) so that an agent that
  // restarts holds it again for the task (`Readopt`).
  std::string holder;
  // Set for a local source on an agent that runs tasks as their users: the
  // job's user, whose rights list and copy it (dataset_local_read.h).
  std::optional<UserAccount> reader;
};

// True for a source that is a local (or NFS) path rather than a remote.
inline bool IsLocalDatasetSource(const std::string& source) {
  return !source.empty() && source[0] == '/';
}

// Where the bytes of one `DatasetFiller::Copy` came from.
struct DatasetCopyBytes {
  int64_t peer = 0;
  int64_t cold = 0;
};

// What making one version present took (`DatasetCache::Ensure`): the
// node's side of a dataset's hit rate and fill time (docs/datasets.md,
// "Seeing it").
struct DatasetFillStats {
  int64_t cached_bytes = 0;    // found in the cache, verified by size
  int64_t peer_bytes = 0;      // copied from a peer node's cache
  int64_t cold_bytes = 0;      // copied from the cold store
  int64_t verified_files = 0;  // files whose checksum was checked
  absl::Duration fill_time;    // zero when nothing was copied
  std::string peer;            // the peer copied from, if any
  // Versions deleted after the fill to keep the cache within its budget.
  std::vector<std::string> evicted;
};

// Where the files of a fill come from. Implementations are thread-safe.
class DatasetFiller {
 public:
  virtual ~DatasetFiller() = default;
  // The files of `want.version` at a peer that has it complete, with the
  // peer's index; NotFound when no peer has it (or none answers). Without
  // `want.fill_from_store`, waits for `peers[0]` to have it.
  virtual absl::StatusOr<std::vector<DatasetEntry>> PeerManifest(
      const DatasetWant& want, int* peer) = 0;
  // The cold store's listing of `want.source`.
  virtual absl::StatusOr<std::vector<DatasetEntry>> ListSource(
      const DatasetWant& want) = 0;
  // Copies the files `entries` into `dir` (relative paths kept), from peer
  // `peer`, or from the cold store when `peer` < 0. Files already in `dir`
  // with the right size may be skipped. `progress` is called with the
  // bytes copied so far (from any thread); `*from` is added what came from
  // where.
  virtual absl::Status Copy(const DatasetWant& want, int peer,
                            const std::vector<DatasetEntry>& entries,
                            const std::string& dir,
                            const std::function<void(int64_t)>& progress,
                            DatasetCopyBytes* from) = 0;
  // The checksums of type `type` (as a listing names it: "md5", "sha1") of
  // `paths` under `dir`, lower-case hex, by path; a file missing is left
  // out.
  virtual absl::StatusOr<std::map<std::string, std::string>> Hash(
      const std::string& type, const std::string& dir,
      const std::vector<std::string>& paths) = 0;
};

struct DatasetCacheOptions {
  std::string root;  // `<data_dir>/datasets`
  int64_t budget_bytes = int64_t{100} << 30;
  // Peer nodes that may copy one version from this node at once; the
  // others are told to wait (`AdmitPeer`) and copy from a node that
  // finished meanwhile, so a leaf's nodes fill as a tree, not all from one.
  int max_peer_clients = 2;
  // A peer holds its place this long after its last request.
  absl::Duration peer_lease = absl::Seconds(2);
};

// A version held for a task: not evicted while a holder lives.
class DatasetHold {
 public:
  virtual ~DatasetHold() = default;
  virtual const std::string& dir() const = 0;  // `<root>/<version>/data`
};

// Thread-safe. Fills of one version are serialised; fills of different
// versions run at once.
class DatasetCache {
 public:
  DatasetCache(DatasetCacheOptions options, DatasetFiller* filler);

  // Makes `want.version` present and verified, and holds it: a complete
  // version whose files still have their sizes is used as it is (its use
  // time refreshed); a file found with another size (truncated) is fetched
  // again; otherwise the version is filled from a peer that has it, else
  // from the cold store, checked against the listing it came with (every
  // file's size, and the checksum of each file copied whose listing gives
  // one; the count and bytes the server listed; for the cold store, that
  // the listing still gives `want.version`), marked complete, and the cache
  // brought back within its budget. A file copied from a peer whose
  // checksum is wrong is fetched again from the cold store, once.
  // `progress(done, total)` while files are copied; `*stats` (may be null)
  // says where the bytes came from. Errors: Unavailable (the store or peers
  // failed), DataLoss (the copy does not match its listing),
  // FailedPrecondition (the source changed: another version now).
  absl::StatusOr<std::shared_ptr<DatasetHold>> Ensure(
      const DatasetWant& want,
      const std::function<void(int64_t, int64_t)>& progress,
      DatasetFillStats* stats = nullptr);

  // After an agent restart: holds again, for each task of `live` (task ids),
  // the versions whose holders record it, and deletes the records of tasks
  // not in `live`. Returns the holds by task id.
  std::map<std::string, std::vector<std::shared_ptr<DatasetHold>>> Readopt(
      const std::set<std::string>& live);

  // Whether peer node `client` may copy `version` from here now: true if
  // it already is, or fewer than `max_peer_clients` others are (their
  // leases not expired); it then holds a place until `peer_lease` after
  // its last `AdmitPeer` or `TouchPeer`. An empty `client` (an older
  // agent) is always let in.
  bool AdmitPeer(const std::string& version, const std::string& client,
                 absl::Time now);
  // A request of an admitted peer (a file): renews its place.
  void TouchPeer(const std::string& version, const std::string& client,
                 absl::Time now);

  // The files of a complete version (for peers); NotFound otherwise.
  absl::StatusOr<std::vector<DatasetEntry>> Manifest(
      const std::string& version) const;
  // The path of file `path` of complete version `version`; NotFound for a
  // version not complete, InvalidArgument for a path that is not one of
  // its files.
  absl::StatusOr<std::string> FilePath(const std::string& version,
                                       const std::string& path) const;

  // Deletes least recently used complete versions no one holds (and
  // leftovers of interrupted fills no one is filling) until the cache is
  // within its budget. Returns the versions deleted.
  std::vector<std::string> Evict();

  // Bytes of the complete versions.
  int64_t Bytes() const;

  // The complete versions (those with their `complete` marker), sorted, at
  // most `max`: what the node's heartbeats report (docs/datasets.md,
  // "Locality and prefetch").
  std::vector<std::string> CompleteVersions(size_t max = 256) const;

 private:
  class Hold;
  std::string VersionDir(const std::string& version) const;
  absl::Status Fill(const DatasetWant& want,
                    const std::function<void(int64_t, int64_t)>& progress,
                    DatasetFillStats* stats);
  // Checks the checksums of `copied` (those with one) in `data`; returns
  // those that do not match (their files removed).
  absl::StatusOr<std::vector<DatasetEntry>> Verify(
      const std::vector<DatasetEntry>& copied, const std::string& data,
      int64_t* verified);
  void Release(const std::string& version);

  const DatasetCacheOptions options_;
  DatasetFiller* const filler_;
  mutable absl::Mutex mu_;
  std::map<std::string, int> holds_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<absl::Mutex>> filling_
      ABSL_GUARDED_BY(mu_);
  // Per version, the peers copying it from here and when each asked last.
  std::map<std::string, std::map<std::string, absl::Time>> peer_clients_
      ABSL_GUARDED_BY(mu_);
};

// Reads and writes a manifest ([{"path", "size", "hash"}]).
absl::StatusOr<std::vector<DatasetEntry>> ParseDatasetManifest(
    const std::string& text);
std::string DatasetManifestJson(const std::vector<DatasetEntry>& entries);

// True for a relative path without "", "." or ".." components, NUL or a
// leading '/': one a manifest may name.
bool SafeDatasetPath(const std::string& path);

}  // namespace loom
