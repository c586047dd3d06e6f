#include "loom/image/image_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "loom/image/layer_unpack.h"
#include "loom/image/sha256.h"
#include "loom/image/test_layers.h"

namespace loom::image {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using namespace ::loom::image::testing;  // NOLINT

const std::string kConfig = R"({"config":{"Env":["PATH=/bin"]}})";

// Serves images made in the test and counts what is fetched (the config's
// fetches aside).
class FakeSource : public ImageSource {
 public:
  // An image of `layers` (tar.gz bytes, bottom first): its pinned ref.
  ImageRef Add(const std::string& name,
               const std::vector<std::string>& layers) {
    Manifest m;
    m.media_type = std::string(kOciManifest);
    nlohmann::json j = {{"schemaVersion", 2}, {"mediaType", kOciManifest}};
    j["layers"] = nlohmann::json::array();
    for (const std::string& layer : layers) {
      Descriptor d;
      d.media_type = "application/vnd.oci.image.layer.v1.tar+gzip";
      d.digest = Sha256::Of(layer);
      d.size = static_cast<int64_t>(layer.size());
      j["layers"].push_back({{"digest", d.digest}, {"size", d.size}});
      m.layers.push_back(d);
      absl::MutexLock lock(&mu_);
      blobs_[d.digest] = layer;
    }
    m.config.media_type = "application/vnd.oci.image.config.v1+json";
    m.config.digest = Sha256::Of(kConfig);
    m.config.size = static_cast<int64_t>(kConfig.size());
    m.digest = Sha256::Of(j.dump());
    absl::MutexLock lock(&mu_);
    manifests_[m.digest] = m;
    return ImageRef{"registry.test:5000", name, "1", m.digest};
  }

  absl::StatusOr<Manifest> FetchManifest(const ImageRef& ref) override {
    absl::SleepFor(manifest_delay);
    absl::MutexLock lock(&mu_);
    ++manifest_fetches_[ref.digest];
    auto it = manifests_.find(ref.digest);
    if (it == manifests_.end()) return absl::NotFoundError("no such manifest");
    return it->second;
  }

  absl::Status FetchBlob(const ImageRef& ref, const Descriptor& blob,
                         const std::string& path,
                         const ByteProgress& progress) override {
    absl::SleepFor(blob_delay);
    std::string data;
    {
      absl::MutexLock lock(&mu_);
      if (blob.digest != Sha256::Of(kConfig)) ++blob_fetches_[blob.digest];
      if (!blob_error.ok()) return blob_error;
      data =
          blob.digest == Sha256::Of(kConfig) ? kConfig : blobs_.at(blob.digest);
    }
    WriteFile(path, data);
    if (progress) progress(static_cast<int64_t>(data.size()));
    return absl::OkStatus();
  }

  int ManifestFetches(const std::string& digest) {
    absl::MutexLock lock(&mu_);
    return manifest_fetches_[digest];
  }
  int BlobFetches(const std::string& digest) {
    absl::MutexLock lock(&mu_);
    return blob_fetches_[digest];
  }
  int TotalBlobFetches() {
    absl::MutexLock lock(&mu_);
    int n = 0;
    for (const auto& [d, c] : blob_fetches_) n += c;
    return n;
  }

  absl::Duration manifest_delay = absl::ZeroDuration();
  absl::Duration blob_delay = absl::ZeroDuration();
  absl::Status blob_error;  // set before use

 private:
  absl::Mutex mu_;
  std::map<std::string, Manifest> manifests_;
  std::map<std::string, std::string> blobs_;
  std::map<std::string, int> manifest_fetches_;
  std::map<std::string, int> blob_fetches_;
};

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/image_store_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  std::unique_ptr<ImageStore> Open(int64_t budget = 0) {
    auto s = ImageStore::Open(
        {.root = dir_ + "/store",
         .budget_bytes = budget,
         .now = [this] { return absl::FromUnixSeconds(clock_.load()); }},
        &source_);
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *std::move(s) : nullptr;
  }
  // An image of two layers whose files are named for `name`.
  ImageRef Image(const std::string& name) {
    return source_.Add(name, {MakeTarGz({File("etc/" + name, name + " base"),
                                         File("etc/replaced", "lower")}),
                              MakeTarGz({File("etc/replaced", name + " upper"),
                                         File("etc/.wh." + name, "")})});
  }
  std::vector<std::string> Digests(const ImageStore& store) {
    std::vector<std::string> out;
    for (const ImageInfo& i : store.List()) out.push_back(i.digest);
    return out;
  }

  std::string dir_;
  std::atomic<int64_t> clock_{1000};
  FakeSource source_;
};

TEST_F(ImageStoreTest, PullsUnpacksAndSharesOneRootfs) {
  auto store = Open();
  const ImageRef a = source_.Add(
      "team/a",
      {MakeTarGz({File("bin/tool", "v1", 0755), File("etc/gone", "x")}),
       MakeTarGz({File("bin/tool", "v2", 04755), File("etc/.wh.gone", "")})});
  std::vector<PullProgress> seen;
  absl::StatusOr<ImageHandle> h =
      store->Ensure(a, [&](const PullProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->digest, a.digest);
  EXPECT_EQ(h->rootfs, dir_ + "/store/images/" +
                           std::string(DigestHex(a.digest)) + "/rootfs");
  EXPECT_EQ(Slurp(h->rootfs + "/bin/tool"), "v2");
  EXPECT_EQ(Slurp(h->config), kConfig);
  EXPECT_FALSE(fs::exists(h->rootfs + "/etc/gone"));
  struct stat st;
  ASSERT_EQ(stat((h->rootfs + "/bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0555u);  // no setuid, no write bits
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().phase, PullProgress::Phase::kDone);
  EXPECT_GT(seen.back().bytes_total, 0);
  EXPECT_EQ(seen.back().bytes_done, seen.back().bytes_total);
  ASSERT_EQ(store->List().size(), 1u);
  const ImageInfo info = store->List()[0];
  EXPECT_EQ(info.users, 1);
  EXPECT_THAT(info.refs, ElementsAre(a.ToString()));
  EXPECT_EQ(info.layers.size(), 2u);
  EXPECT_GT(info.bytes, 0);
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/tmp"));

  // Held: no fetch at all the second time.
  absl::StatusOr<ImageHandle> again = store->Ensure(a);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->rootfs, h->rootfs);
  EXPECT_EQ(source_.ManifestFetches(a.digest), 1);
  EXPECT_EQ(source_.TotalBlobFetches(), 2);
  EXPECT_EQ(store->List()[0].users, 2);
  store->Release(a.digest);
  store->Release(a.digest);
  store->Release(a.digest);  // one too many: ignored
  EXPECT_EQ(store->List()[0].users, 0);
}

TEST_F(ImageStoreTest, ConcurrentCallersWaitForOnePull) {
  auto store = Open();
  const ImageRef a = Image("a");
  source_.manifest_delay = absl::Milliseconds(200);
  source_.blob_delay = absl::Milliseconds(50);
  constexpr int kCallers = 8;
  std::vector<absl::StatusOr<ImageHandle>> got(kCallers);
  std::vector<std::atomic<int64_t>> done(kCallers);
  std::vector<std::thread> threads;
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      got[i] = store->Ensure(
          a, [&, i](const PullProgress& p) { done[i] = p.bytes_done; });
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kCallers; ++i) {
    ASSERT_TRUE(got[i].ok()) << got[i].status();
    EXPECT_EQ(got[i]->rootfs, got[0]->rootfs);
  }
  EXPECT_EQ(source_.ManifestFetches(a.digest), 1);
  EXPECT_EQ(source_.TotalBlobFetches(), 2);
  ASSERT_EQ(store->List().size(), 1u);
  EXPECT_EQ(store->List()[0].users, kCallers);
  EXPECT_EQ(Slurp(got[0]->rootfs + "/etc/replaced"), "a upper");
  for (int i = 0; i < kCallers; ++i) store->Release(a.digest);
  EXPECT_EQ(store->List()[0].users, 0);
}

TEST_F(ImageStoreTest, ALayerTwoImagesShareIsFetchedOnce) {
  auto store = Open();
  const std::string base = MakeTarGz({File("usr/lib/libshared", "shared")});
  const ImageRef a = source_.Add("a", {base, MakeTarGz({File("a", "a")})});
  const ImageRef b = source_.Add("b", {base, MakeTarGz({File("b", "b")})});
  source_.blob_delay = absl::Milliseconds(100);
  absl::StatusOr<ImageHandle> ha, hb;
  std::thread t([&] { ha = store->Ensure(a); });
  hb = store->Ensure(b);
  t.join();
  ASSERT_TRUE(ha.ok()) << ha.status();
  ASSERT_TRUE(hb.ok()) << hb.status();
  EXPECT_EQ(source_.BlobFetches(Sha256::Of(base)), 1);
  EXPECT_EQ(source_.TotalBlobFetches(), 3);
  EXPECT_EQ(Slurp(ha->rootfs + "/usr/lib/libshared"), "shared");
  EXPECT_EQ(Slurp(hb->rootfs + "/usr/lib/libshared"), "shared");
  EXPECT_TRUE(fs::exists(hb->rootfs + "/b"));
  EXPECT_FALSE(fs::exists(hb->rootfs + "/a"));
}

TEST_F(ImageStoreTest, EvictsTheLeastRecentlyUsedUnusedImage) {
  const ImageRef a = Image("a"), b = Image("b"), c = Image("c");
  int64_t one_image = 0;
  {
    auto probe = Open();
    ASSERT_TRUE(probe->Ensure(a).ok());
    one_image = probe->BytesUsed();
  }
  ASSERT_TRUE(RemoveTree(dir_ + "/store").ok());
  // Room for two images and a half.
  auto store = Open(one_image * 5 / 2);
  for (const ImageRef& r : {a, b}) {
    ++clock_;
    ASSERT_TRUE(store->Ensure(r).ok());
    store->Release(r.digest);
  }
  ++clock_;
  ASSERT_TRUE(store->Acquire(a.digest).ok());  // a is now the more recent
  store->Release(a.digest);
  ++clock_;
  ASSERT_TRUE(store->Ensure(c).ok());
  std::vector<std::string> held = Digests(*store);
  EXPECT_EQ(held.size(), 2u);
  EXPECT_THAT(held, ::testing::UnorderedElementsAre(a.digest, c.digest));
  EXPECT_FALSE(
      fs::exists(dir_ + "/store/images/" + std::string(DigestHex(b.digest))));
  EXPECT_LE(store->BytesUsed(), one_image * 5 / 2);
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/tmp"));
  // Pulling b again fetches it again.
  ASSERT_TRUE(store->Ensure(b).ok());
  EXPECT_EQ(source_.ManifestFetches(b.digest), 2);
}

TEST_F(ImageStoreTest, AnImageInUseIsNeverEvicted) {
  auto store = Open(/*budget=*/1);  // nothing fits
  const ImageRef a = Image("a"), b = Image("b");
  ASSERT_TRUE(store->Ensure(a).ok());
  ASSERT_TRUE(store->Ensure(b).ok());
  EXPECT_THAT(Digests(*store),
              ::testing::UnorderedElementsAre(a.digest, b.digest));
  store->Release(b.digest);
  EXPECT_THAT(Digests(*store), ElementsAre(a.digest));
  EXPECT_TRUE(fs::exists(dir_ + "/store/images/" +
                         std::string(DigestHex(a.digest)) +
                         "/rootfs/etc/replaced"));
  store->Release(a.digest);
  EXPECT_TRUE(store->List().empty());
  EXPECT_EQ(store->BytesUsed(), 0);
}

TEST_F(ImageStoreTest, SurvivesARestart) {
  const ImageRef a = Image("a");
  {
    auto store = Open();
    clock_ = 5000;
    ASSERT_TRUE(store->Ensure(a).ok());
    store->Release(a.digest);
  }
  // Left over by a crash: a half-made pull and an image without its record.
  fs::create_directories(dir_ + "/store/tmp/junk/rootfs");
  fs::create_directories(dir_ + "/store/images/" + std::string(64, 'b') +
                         "/rootfs");
  WriteFile(dir_ + "/store/blobs/sha256/not-a-digest", "x");
  clock_ = 9000;
  auto store = Open();
  ASSERT_EQ(store->List().size(), 1u);
  const ImageInfo info = store->List()[0];
  EXPECT_EQ(info.digest, a.digest);
  EXPECT_EQ(info.users, 0);
  EXPECT_EQ(info.last_used, absl::FromUnixSeconds(5000));
  EXPECT_THAT(info.refs, ElementsAre(a.ToString()));
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/tmp"));
  EXPECT_FALSE(fs::exists(dir_ + "/store/images/" + std::string(64, 'b')));
  EXPECT_FALSE(fs::exists(dir_ + "/store/blobs/sha256/not-a-digest"));
  absl::StatusOr<ImageHandle> h = store->Acquire(a.digest);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(Slurp(h->rootfs + "/etc/replaced"), "a upper");
  ASSERT_TRUE(store->Ensure(a).ok());
  EXPECT_EQ(source_.ManifestFetches(a.digest), 1);
  EXPECT_EQ(source_.TotalBlobFetches(), 2);
  for (const ImageInfo& i : store->List()) EXPECT_EQ(i.users, 2);
}

mode_t ModeOf(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 ? st.st_mode & 07777 : 0;
}

// Nobody but the store's owner (root on a node) goes into the store, and
// an image's files are the owner's whatever uid the layer gave them.
TEST_F(ImageStoreTest, TheStoreIsItsOwnersAlone) {
  auto store = Open();
  for (const char* d : {"", "/blobs", "/blobs/sha256", "/images", "/tmp"}) {
    EXPECT_EQ(ModeOf(dir_ + "/store" + d), 0700u) << d;
  }
  const ImageRef a = source_.Add(
      "team/uid",
      {MakeTarGz({OwnedBy(File("app/run.sh", "echo", 0755), 1000, 1000)})});
  absl::StatusOr<ImageHandle> h = store->Ensure(a);
  ASSERT_TRUE(h.ok()) << h.status();
  struct stat st;
  ASSERT_EQ(stat((h->rootfs + "/app/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, geteuid());
  EXPECT_EQ(st.st_mode & 07777, 0555u);
  store->Release(a.digest);
  store.reset();

  // A store made by an older loom, traversable: 0700 again when opened.
  ASSERT_EQ(chmod((dir_ + "/store").c_str(), 0755), 0);
  ASSERT_EQ(chmod((dir_ + "/store/images").c_str(), 0755), 0);
  store = Open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(ModeOf(dir_ + "/store"), 0700u);
  EXPECT_EQ(ModeOf(dir_ + "/store/images"), 0700u);
  EXPECT_EQ(store->List().size(), 1u);
}

// An image an older loom unpacked kept its tar's owners: dropped when the
// store opens, unpacked again from the blobs it keeps.
TEST_F(ImageStoreTest, AnImageUnpackedBeforeOwnersWereTheStoresGoes) {
  const ImageRef a = Image("a");
  {
    auto store = Open();
    ASSERT_TRUE(store->Ensure(a).ok());
    store->Release(a.digest);
  }
  const std::string file = dir_ + "/store/images/" +
                           std::string(DigestHex(a.digest)) + "/image.json";
  nlohmann::json j = nlohmann::json::parse(Slurp(file));
  j.erase("unpack");
  ASSERT_EQ(chmod(file.c_str(), 0644), 0);
  WriteFile(file, j.dump());
  auto store = Open();
  EXPECT_TRUE(store->List().empty());
  absl::StatusOr<ImageHandle> h = store->Ensure(a);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(Slurp(h->rootfs + "/etc/replaced"), "a upper");
  EXPECT_EQ(source_.TotalBlobFetches(), 2);  // the blobs were kept
}

TEST_F(ImageStoreTest, RefusesAStoreThatIsALink) {
  fs::create_directories(dir_ + "/elsewhere");
  fs::create_symlink(dir_ + "/elsewhere", dir_ + "/store");
  auto s = ImageStore::Open({.root = dir_ + "/store"}, &source_);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(s.status().message(), HasSubstr(dir_ + "/store"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/elsewhere"));
}

TEST_F(ImageStoreTest, AFailedPullFailsEveryWaiterAndLeavesNothing) {
  auto store = Open();
  const ImageRef bad = source_.Add(
      "bad", {MakeTarGz({File("ok", "1")}), MakeTarGz({File("../x", "2")})});
  absl::StatusOr<ImageHandle> h = store->Ensure(bad);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(h.status().message(), HasSubstr("layer 1"));
  EXPECT_THAT(h.status().message(), HasSubstr("\"../x\""));
  EXPECT_TRUE(store->List().empty());
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/images"));
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/tmp"));

  const ImageRef a = Image("a");
  source_.blob_error = absl::DataLossError("digest mismatch");
  source_.blob_delay = absl::Milliseconds(100);
  std::vector<absl::StatusOr<ImageHandle>> got(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { got[i] = store->Ensure(a); });
  }
  for (std::thread& t : threads) t.join();
  for (const auto& g : got) {
    ASSERT_FALSE(g.ok());
    EXPECT_EQ(g.status().code(), absl::StatusCode::kDataLoss);
  }
  EXPECT_EQ(source_.ManifestFetches(a.digest), 1);
  EXPECT_EQ(source_.TotalBlobFetches(), 2 + 1);  // bad's two, a's first
  EXPECT_TRUE(store->List().empty());
  EXPECT_TRUE(fs::is_empty(dir_ + "/store/tmp"));
}

TEST_F(ImageStoreTest, NeedsADigestAndKnowsWhatItHolds) {
  auto store = Open();
  ImageRef tagged{"registry.test:5000", "a", "1", ""};
  EXPECT_EQ(store->Ensure(tagged).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Acquire("sha256:" + std::string(64, 'c')).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Ensure(tagged.WithDigest("sha256:" + std::string(64, 'c')))
                .status()
                .code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::image
