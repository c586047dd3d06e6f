#pragma once

// A node's store of container images (docs/images.md): content-addressed
// under one directory,
//   blobs/sha256/<hex>            a layer, fetched once, kept until evicted
//   images/<hex>/rootfs           an image's root filesystem, read-only
//   images/<hex>/config.json      its OCI image config (env, entrypoint, ...)
//   images/<hex>/image.json       written last: an image without it is not
//   tmp/                          pulls and unpacks in progress; evictions
// where an image's <hex> is the digest its reference pins (a manifest's, or
// an index's for a multi-platform image). An image is unpacked in tmp/ and
// renamed into images/, so a half-unpacked image never looks complete; a
// store opened again keeps what was complete and drops the rest.
//
// The store's directory, blobs/, images/ and tmp/ are the process's alone
// (0700; `Open` sets an existing store's so and refuses one that another
// user owns), and every file of a root filesystem is the process's (root's
// on a node) whatever uid the layer's tar gave it: no local user can read
// the store's blobs or change a file that an image shares with other
// users' containers. Containers still read their image: its root
// filesystem reaches them as an overlay that root mounts, and nothing in
// them walks the store's directories.
//
// Concurrent Ensure calls for one image wait for one pull, and concurrent
// pulls that share a layer fetch it once. Images in use (Ensure/Acquire not
// yet Released) are never evicted; past the byte budget the least recently
// used unused images and blobs go, oldest first. The budget is soft: when
// everything left is in use the store stays over it.
//
// Thread-safe.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "loom/image/image_ref.h"
#include "loom/image/image_source.h"

namespace loom::image {

struct ImageStoreOptions {
  std::string root;          // the store's directory; made if missing
  int64_t budget_bytes = 0;  // blobs plus root filesystems; 0: no limit
  std::function<absl::Time()> now = [] { return absl::Now(); };
};

// How a pull stands, for `loom show` ("pulling image: 1.2 of 3.4 GB").
struct PullProgress {
  enum class Phase { kManifest, kLayers, kUnpacking, kDone };
  Phase phase = Phase::kManifest;
  int64_t bytes_done = 0;   // layer bytes present (fetched or already held)
  int64_t bytes_total = 0;  // all layers' bytes, once the manifest is in
};
using PullProgressFn = std::function<void(const PullProgress&)>;

// An image held for a user: Release(digest) once done with it.
struct ImageHandle {
  std::string digest;           // the reference's digest; the store's key
  std::string rootfs;           // absolute path, read-only
  std::string config;           // the OCI image config's path (JSON)
  std::string manifest_digest;  // the platform manifest's
};

struct ImageInfo {
  std::string digest;
  std::string manifest_digest;
  std::vector<std::string> refs;    // the references it was asked for by
  std::vector<std::string> layers;  // blob digests, bottom first
  int64_t bytes = 0;                // the root filesystem on disk
  absl::Time last_used;
  int users = 0;
};

class ImageStore {
 public:
  // Opens (or makes) the store at options.root: keeps the complete images
  // and verified blobs there, clears tmp/, and drops images unpacked by an
  // older loom (their owners came from the tar; their blobs stay, so the
  // next use unpacks them again). FailedPrecondition when options.root or
  // one of its directories is a symbolic link, not a directory, or another
  // user's. `source` outlives the store.
  [[nodiscard]] static absl::StatusOr<std::unique_ptr<ImageStore>> Open(
      ImageStoreOptions options, ImageSource* source);
  ~ImageStore();

  // The image `ref` pins (InvalidArgument without a digest), pulled and
  // unpacked unless held; takes a use of it. `progress` (may be empty) is
  // called from the pulling thread, also for a caller that waits on
  // another's pull. A failed pull fails every caller waiting on it, with
  // its reason, and leaves nothing behind.
  [[nodiscard]] absl::StatusOr<ImageHandle> Ensure(
      const ImageRef& ref, const PullProgressFn& progress = {});

  // Takes a use of an image held already (for tasks a restarted agent
  // re-adopts). NotFound when it is not held.
  [[nodiscard]] absl::StatusOr<ImageHandle> Acquire(std::string_view digest);

  // Gives back a use taken by Ensure or Acquire; an image nobody uses may be
  // evicted from then on.
  void Release(std::string_view digest);

  std::vector<ImageInfo> List() const;
  // Changes whenever the list of images or their references does (not
  // their use): who reports the list sends it again only then.
  uint64_t Generation() const;
  // Bytes the store holds: blobs and root filesystems.
  int64_t BytesUsed() const;
  // Whether the blob is held (tests, and `loom images` later).
  bool HasBlob(std::string_view digest) const;

 private:
  struct Image {
    std::string manifest_digest;
    std::vector<std::string> layers;
    std::set<std::string> refs;
    int64_t bytes = 0;
    absl::Time last_used;
    int users = 0;
  };
  struct Blob {
    int64_t bytes = 0;
    absl::Time last_used;
    int pins = 0;  // pulls in progress that need it
  };
  // A pull or a blob fetch in progress; those who wait on it hold a
  // shared_ptr.
  struct Flight {
    bool done = false;
    absl::Status status;
    int waiters = 0;
    PullProgress progress;
    std::vector<PullProgressFn> watchers;
  };

  ImageStore(ImageStoreOptions options, ImageSource* source);
  absl::Status Load();

  // Pull (fetch what is missing, unpack, rename into images/) for `flight`.
  absl::Status Pull(const ImageRef& ref, Flight* flight);
  // The blob present (fetched, or waited for) and pinned.
  absl::Status EnsureBlob(const ImageRef& ref, const Descriptor& layer,
                          Flight* pull);
  void Report(Flight* flight, const std::function<void(PullProgress&)>& change)
      ABSL_LOCKS_EXCLUDED(mu_);
  void Unpin(const std::vector<std::string>& blobs) ABSL_LOCKS_EXCLUDED(mu_);

  // Picks what to evict so that BytesUsed() + reserve fits the budget, and
  // moves it under tmp/; returns the paths to remove (outside mu_).
  std::vector<std::string> EvictLocked(int64_t reserve)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Evict(int64_t reserve) ABSL_LOCKS_EXCLUDED(mu_);
  void TouchLocked(const std::string& digest, Image& image)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  ImageHandle HandleLocked(const std::string& digest, const Image& image) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int64_t BytesUsedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::string BlobPath(std::string_view digest) const;
  std::string ImageDir(std::string_view digest) const;
  std::string TmpPath(std::string_view hex) const;

  // Constant after construction.
  const ImageStoreOptions options_;
  ImageSource* const source_;

  mutable absl::Mutex mu_;
  std::map<std::string, Image, std::less<>> images_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Blob, std::less<>> blobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Flight>> pulls_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::shared_ptr<Flight>> fetches_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace loom::image
