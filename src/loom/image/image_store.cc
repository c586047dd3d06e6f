#include "loom/image/image_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/common/atomic_file.h"
#include "loom/common/digest.h"
#include "loom/image/absl_view.h"
#include "loom/image/layer_unpack.h"

namespace loom::image {
namespace {

namespace fs = std::filesystem;

constexpr char kImageFile[] = "image.json";
// The store's directories: the process's (root's on a node) alone.
constexpr mode_t kStoreDirMode = 0700;
// `image.json`'s "unpack": how its root filesystem was made. 2: every file
// the store's own (layer_unpack.h). An image without it (1, made before)
// kept the tar's owners: it is unpacked again from its blobs when next used.
constexpr int kUnpackVersion = 2;

bool IsHex64(std::string_view s) {
  return IsSha256Digest(absl::StrCat("sha256:", Av(s)));
}

void SetMtime(const std::string& path, absl::Time t) {
  const timespec ts = absl::ToTimespec(t);
  const timespec times[2] = {ts, ts};
  utimensat(AT_FDCWD, path.c_str(), times, 0);
}

absl::Time Mtime(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::InfinitePast();
  return absl::TimeFromTimespec(st.st_mtim);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

absl::Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot make ", path, ": ", ec.message()));
  }
  return absl::OkStatus();
}

// The directory `path` made (its parents as `mkdir -p` does) or found, not
// through a symbolic link, the process's own and 0700 (set so when it was
// not). FailedPrecondition for another user's directory or a non-directory.
absl::Status MakePrivateDir(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty()) {
    if (absl::Status s = MakeDirs(parent.string()); !s.ok()) return s;
  }
  if (::mkdir(path.c_str(), kStoreDirMode) != 0 && errno != EEXIST) {
    return absl::InternalError(
        absl::StrCat("cannot make ", path, ": ", std::strerror(errno)));
  }
  const int fd =
      ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        path,
        " is not a directory (a symbolic link?): ", std::strerror(errno)));
  }
  absl::Status status;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    status = absl::InternalError(
        absl::StrCat("cannot stat ", path, ": ", std::strerror(errno)));
  } else if (st.st_uid != ::geteuid()) {
    status = absl::FailedPreconditionError(
        absl::StrCat(path, " belongs to uid ", st.st_uid, ", not to uid ",
                     ::geteuid(), " who keeps the image store"));
  } else if ((st.st_mode & 07777) != kStoreDirMode &&
             ::fchmod(fd, kStoreDirMode) != 0) {
    status = absl::InternalError(
        absl::StrCat("cannot chmod ", path, ": ", std::strerror(errno)));
  }
  ::close(fd);
  return status;
}

}  // namespace

ImageStore::ImageStore(ImageStoreOptions options, ImageSource* source)
    : options_(std::move(options)), source_(source) {}

ImageStore::~ImageStore() = default;

std::string ImageStore::BlobPath(std::string_view digest) const {
  return absl::StrCat(options_.root, "/blobs/sha256/", Av(DigestHex(digest)));
}
std::string ImageStore::ImageDir(std::string_view digest) const {
  return absl::StrCat(options_.root, "/images/", Av(DigestHex(digest)));
}
std::string ImageStore::TmpPath(std::string_view hex) const {
  return absl::StrCat(options_.root, "/tmp/", Av(hex), ".", RandomHex(6));
}

absl::StatusOr<std::unique_ptr<ImageStore>> ImageStore::Open(
    ImageStoreOptions options, ImageSource* source) {
  std::error_code ec;
  options.root = fs::absolute(options.root, ec).lexically_normal().string();
  if (!options.root.empty() && options.root.back() == '/') {
    options.root.pop_back();
  }
  std::unique_ptr<ImageStore> store(new ImageStore(std::move(options), source));
  if (absl::Status s = store->Load(); !s.ok()) return s;
  return store;
}

absl::Status ImageStore::Load() {
  const std::string& root = options_.root;
  // Readable by its owner alone: blobs and root filesystems hold whatever
  // an image holds, and a shared image must not be anyone else's to change.
  if (absl::Status s = MakePrivateDir(root); !s.ok()) return s;
  if (absl::Status s = RemoveTree(root + "/tmp"); !s.ok()) return s;
  for (const char* dir : {"/blobs", "/blobs/sha256", "/images", "/tmp"}) {
    if (absl::Status s = MakePrivateDir(root + dir); !s.ok()) return s;
  }
  absl::MutexLock lock(&mu_);
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root + "/images", ec)) {
    const std::string hex = e.path().filename().string();
    const std::string file = absl::StrCat(e.path().string(), "/", kImageFile);
    nlohmann::json j = nlohmann::json::parse(ReadFile(file), nullptr, false);
    if (!IsHex64(hex) || !j.is_object() ||
        j.value("unpack", 1) != kUnpackVersion ||
        !fs::is_directory(e.path() / "rootfs")) {
      if (absl::Status s = RemoveTree(e.path().string()); !s.ok()) return s;
      continue;
    }
    Image image;
    image.manifest_digest = j.value("manifest_digest", "");
    image.layers = j.value("layers", std::vector<std::string>{});
    for (const std::string& r : j.value("refs", std::vector<std::string>{})) {
      image.refs.insert(r);
    }
    image.bytes = j.value("bytes", int64_t{0});
    image.last_used = Mtime(file);
    images_.emplace(absl::StrCat("sha256:", hex), std::move(image));
  }
  for (const auto& e : fs::directory_iterator(root + "/blobs/sha256", ec)) {
    const std::string hex = e.path().filename().string();
    if (!IsHex64(hex) || !e.is_regular_file()) {
      if (absl::Status s = RemoveTree(e.path().string()); !s.ok()) return s;
      continue;
    }
    blobs_.emplace(
        absl::StrCat("sha256:", hex),
        Blob{static_cast<int64_t>(e.file_size()), Mtime(e.path().string()), 0});
  }
  // A blob was last used when an image made of it was.
  for (const auto& [digest, image] : images_) {
    for (const std::string& layer : image.layers) {
      auto b = blobs_.find(layer);
      if (b != blobs_.end()) {
        b->second.last_used = std::max(b->second.last_used, image.last_used);
      }
    }
  }
  if (ec) {
    return absl::InternalError(
        absl::StrCat("cannot read the image store ", root, ": ", ec.message()));
  }
  return absl::OkStatus();
}

ImageHandle ImageStore::HandleLocked(const std::string& digest,
                                     const Image& image) const {
  return ImageHandle{digest, ImageDir(digest) + "/rootfs",
                     ImageDir(digest) + "/config.json", image.manifest_digest};
}

void ImageStore::TouchLocked(const std::string& digest, Image& image) {
  image.last_used = options_.now();
  SetMtime(absl::StrCat(ImageDir(digest), "/", kImageFile), image.last_used);
  for (const std::string& layer : image.layers) {
    auto b = blobs_.find(layer);
    if (b != blobs_.end()) b->second.last_used = image.last_used;
  }
}

absl::StatusOr<ImageHandle> ImageStore::Ensure(const ImageRef& ref,
                                               const PullProgressFn& progress) {
  if (!IsSha256Digest(ref.digest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "image ", ref.ToString(), " has no digest: resolve its tag first"));
  }
  const std::string& digest = ref.digest;
  std::shared_ptr<Flight> flight;
  {
    absl::MutexLock lock(&mu_);
    if (auto it = images_.find(digest); it != images_.end()) {
      ++it->second.users;
      if (it->second.refs.insert(ref.ToString()).second) ++generation_;
      TouchLocked(digest, it->second);
      return HandleLocked(digest, it->second);
    }
    if (auto it = pulls_.find(digest); it != pulls_.end()) {
      // Someone pulls it: wait for that pull, which takes our use for us.
      std::shared_ptr<Flight> theirs = it->second;
      ++theirs->waiters;
      if (progress) theirs->watchers.push_back(progress);
      mu_.Await(absl::Condition(&theirs->done));
      if (!theirs->status.ok()) return theirs->status;
      auto image = images_.find(digest);
      if (image == images_.end()) {
        return absl::InternalError(absl::StrCat("image ", digest, " vanished"));
      }
      return HandleLocked(digest, image->second);
    }
    flight = std::make_shared<Flight>();
    if (progress) flight->watchers.push_back(progress);
    pulls_.emplace(digest, flight);
  }
  absl::Status status = Pull(ref, flight.get());
  // Before the waiters wake: their progress functions may not outlive them.
  if (status.ok()) {
    Report(flight.get(),
           [](PullProgress& p) { p.phase = PullProgress::Phase::kDone; });
  }
  absl::StatusOr<ImageHandle> handle;
  {
    absl::MutexLock lock(&mu_);
    flight->status = status;
    flight->done = true;
    pulls_.erase(digest);
    if (!status.ok()) return status;
    Image& image = images_.at(digest);
    image.users += 1 + flight->waiters;
    handle = HandleLocked(digest, image);
  }
  Evict(0);
  return handle;
}

absl::Status ImageStore::Pull(const ImageRef& ref, Flight* flight) {
  absl::StatusOr<Manifest> manifest = source_->FetchManifest(ref);
  if (!manifest.ok()) return manifest.status();
  const int64_t total = manifest->LayerBytes();
  Report(flight, [&](PullProgress& p) {
    p.phase = PullProgress::Phase::kLayers;
    p.bytes_total = total;
  });
  Evict(total);
  std::vector<std::string> pinned;
  absl::Status status;
  for (const Descriptor& layer : manifest->layers) {
    status = EnsureBlob(ref, layer, flight);
    if (!status.ok()) break;
    pinned.push_back(layer.digest);
  }
  const std::string hex(DigestHex(ref.digest));
  const std::string tmp = TmpPath(hex);
  if (status.ok()) {
    Report(flight,
           [](PullProgress& p) { p.phase = PullProgress::Phase::kUnpacking; });
    status = MakeDirs(tmp + "/rootfs");
  }
  if (status.ok()) {
    // The config (env, entrypoint, user, working directory) is small: kept
    // with the image, not as a blob.
    status =
        source_->FetchBlob(ref, manifest->config, tmp + "/config.json", {});
  }
  for (size_t i = 0; status.ok() && i < manifest->layers.size(); ++i) {
    status = ApplyLayer(BlobPath(manifest->layers[i].digest), tmp + "/rootfs");
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrCat("image ", ref.ToString(), ": layer ", i, " (",
                       manifest->layers[i].digest, "): ", status.message()));
    }
  }
  int64_t bytes = 0;
  if (status.ok()) {
    absl::StatusOr<int64_t> sealed = SealTree(tmp + "/rootfs");
    status = sealed.status();
    if (sealed.ok()) bytes = *sealed;
  }
  if (status.ok()) {
    nlohmann::json j = {{"digest", ref.digest},
                        {"manifest_digest", manifest->digest},
                        {"refs", {ref.ToString()}},
                        {"bytes", bytes},
                        {"unpack", kUnpackVersion}};
    j["layers"] = nlohmann::json::array();
    for (const Descriptor& layer : manifest->layers) {
      j["layers"].push_back(layer.digest);
    }
    status = WriteFileAtomically(absl::StrCat(tmp, "/", kImageFile), j.dump(2));
  }
  if (status.ok()) {
    absl::MutexLock lock(&mu_);
    if (std::rename(tmp.c_str(), ImageDir(ref.digest).c_str()) != 0) {
      status = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ",
                                                ImageDir(ref.digest), ": ",
                                                std::strerror(errno)));
    } else {
      Image image;
      image.manifest_digest = manifest->digest;
      for (const Descriptor& layer : manifest->layers) {
        image.layers.push_back(layer.digest);
      }
      image.refs.insert(ref.ToString());
      image.bytes = bytes;
      TouchLocked(ref.digest, image);
      images_.emplace(ref.digest, std::move(image));
      ++generation_;
    }
  }
  if (!status.ok()) (void)RemoveTree(tmp);
  Unpin(pinned);
  return status;
}

absl::Status ImageStore::EnsureBlob(const ImageRef& ref,
                                    const Descriptor& layer, Flight* pull) {
  const auto add_bytes = [&](int64_t n) {
    Report(pull, [n](PullProgress& p) { p.bytes_done += n; });
  };
  std::shared_ptr<Flight> fetch;
  {
    absl::MutexLock lock(&mu_);
    for (;;) {
      if (auto it = blobs_.find(layer.digest); it != blobs_.end()) {
        ++it->second.pins;
        it->second.last_used = options_.now();
        break;
      }
      auto f = fetches_.find(layer.digest);
      if (f == fetches_.end()) {
        fetch = std::make_shared<Flight>();
        fetches_.emplace(layer.digest, fetch);
        break;
      }
      std::shared_ptr<Flight> theirs = f->second;
      mu_.Await(absl::Condition(&theirs->done));
      if (!theirs->status.ok()) return theirs->status;
    }
  }
  if (fetch == nullptr) {
    add_bytes(layer.size);
    return absl::OkStatus();
  }
  const std::string tmp = TmpPath(DigestHex(layer.digest));
  int64_t reported = 0;
  absl::Status status = source_->FetchBlob(ref, layer, tmp, [&](int64_t bytes) {
    add_bytes(bytes - reported);
    reported = bytes;
  });
  if (status.ok() &&
      std::rename(tmp.c_str(), BlobPath(layer.digest).c_str()) != 0) {
    status = absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ",
                                              BlobPath(layer.digest), ": ",
                                              std::strerror(errno)));
  }
  if (!status.ok()) std::remove(tmp.c_str());
  absl::MutexLock lock(&mu_);
  if (status.ok()) {
    SetMtime(BlobPath(layer.digest), options_.now());
    blobs_[layer.digest] = Blob{layer.size, options_.now(), 1};
  }
  fetch->status = status;
  fetch->done = true;
  fetches_.erase(layer.digest);
  return status;
}

void ImageStore::Report(Flight* flight,
                        const std::function<void(PullProgress&)>& change) {
  PullProgress now;
  std::vector<PullProgressFn> watchers;
  {
    absl::MutexLock lock(&mu_);
    change(flight->progress);
    now = flight->progress;
    watchers = flight->watchers;
  }
  for (const PullProgressFn& w : watchers) w(now);
}

void ImageStore::Unpin(const std::vector<std::string>& blobs) {
  absl::MutexLock lock(&mu_);
  for (const std::string& digest : blobs) {
    auto it = blobs_.find(digest);
    if (it != blobs_.end() && it->second.pins > 0) --it->second.pins;
  }
}

absl::StatusOr<ImageHandle> ImageStore::Acquire(std::string_view digest) {
  absl::MutexLock lock(&mu_);
  auto it = images_.find(digest);
  if (it == images_.end()) {
    return absl::NotFoundError(
        absl::StrCat("image ", Av(digest), " is not in the store"));
  }
  ++it->second.users;
  TouchLocked(it->first, it->second);
  return HandleLocked(it->first, it->second);
}

void ImageStore::Release(std::string_view digest) {
  {
    absl::MutexLock lock(&mu_);
    auto it = images_.find(digest);
    if (it == images_.end() || it->second.users == 0) return;
    --it->second.users;
    TouchLocked(it->first, it->second);
  }
  Evict(0);
}

int64_t ImageStore::BytesUsedLocked() const {
  int64_t total = 0;
  for (const auto& [d, image] : images_) total += image.bytes;
  for (const auto& [d, blob] : blobs_) total += blob.bytes;
  return total;
}

int64_t ImageStore::BytesUsed() const {
  absl::MutexLock lock(&mu_);
  return BytesUsedLocked();
}

bool ImageStore::HasBlob(std::string_view digest) const {
  absl::MutexLock lock(&mu_);
  return blobs_.contains(digest);
}

std::vector<std::string> ImageStore::EvictLocked(int64_t reserve) {
  std::vector<std::string> doomed;
  if (options_.budget_bytes <= 0) return doomed;
  int64_t used = BytesUsedLocked();
  while (used + reserve > options_.budget_bytes) {
    // The least recently used of the unused images and unpinned blobs; at
    // equal times an image before its blobs.
    const std::string* victim = nullptr;
    bool is_image = false;
    absl::Time oldest = absl::InfiniteFuture();
    for (const auto& [d, image] : images_) {
      if (image.users == 0 && image.last_used < oldest) {
        victim = &d, is_image = true, oldest = image.last_used;
      }
    }
    for (const auto& [d, blob] : blobs_) {
      if (blob.pins == 0 && blob.last_used < oldest) {
        victim = &d, is_image = false, oldest = blob.last_used;
      }
    }
    if (victim == nullptr) break;  // all in use: over budget until released
    const std::string digest = *victim;
    const std::string from = is_image ? ImageDir(digest) : BlobPath(digest);
    const std::string to = TmpPath(DigestHex(digest));
    if (std::rename(from.c_str(), to.c_str()) == 0) doomed.push_back(to);
    if (is_image) {
      used -= images_.at(digest).bytes;
      images_.erase(digest);
      ++generation_;
    } else {
      used -= blobs_.at(digest).bytes;
      blobs_.erase(digest);
    }
  }
  return doomed;
}

void ImageStore::Evict(int64_t reserve) {
  std::vector<std::string> doomed;
  {
    absl::MutexLock lock(&mu_);
    doomed = EvictLocked(reserve);
  }
  for (const std::string& path : doomed) (void)RemoveTree(path);
}

uint64_t ImageStore::Generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::vector<ImageInfo> ImageStore::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<ImageInfo> out;
  for (const auto& [digest, image] : images_) {
    out.push_back(ImageInfo{digest,
                            image.manifest_digest,
                            {image.refs.begin(), image.refs.end()},
                            image.layers,
                            image.bytes,
                            image.last_used,
                            image.users});
  }
  return out;
}

}  // namespace loom::image
