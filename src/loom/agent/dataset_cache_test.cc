#include "loom/agent/dataset_cache.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/data_step.h"
#include "loom/agent/fake_dataset_filler.h"
#include "loom/common/dataset_token.h"
#include "loom/common/digest.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {
namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using agent_testing::FakeFiller;

class DatasetCacheTest : public ::testing::Test {
 protected:
  DatasetCacheTest() {
    root_ =
        fs::temp_directory_path() /
        absl::StrCat(
            "loom-dataset-cache-", getpid(), "-",
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    filler_.files = {{"a.bin", "aaaa"}, {"d/b.bin", "bbbbbbbb"}};
  }
  ~DatasetCacheTest() override { fs::remove_all(root_); }

  DatasetWant Want() const {
    DatasetWant w;
    w.source = "cold:sets/a";
    w.version = DatasetVersion("cold:sets/a", filler_.Listing());
    w.files = static_cast<int64_t>(filler_.files.size());
    for (const auto& [p, c] : filler_.files) w.bytes += c.size();
    return w;
  }
  static std::string Read(const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  fs::path root_;
  FakeFiller filler_;
  std::function<void(int64_t, int64_t)> no_progress_ = [](int64_t, int64_t) {};
};

TEST_F(DatasetCacheTest, FillsVerifiesAndReuses) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  int64_t last_done = 0, last_total = 0;
  auto hold = cache.Ensure(Want(), [&](int64_t d, int64_t t) {
    last_done = d;
    last_total = t;
  });
  ASSERT_TRUE(hold.ok()) << hold.status();
  EXPECT_EQ(Read((*hold)->dir() + "/d/b.bin"), "bbbbbbbb");
  EXPECT_EQ(last_done, 12);
  EXPECT_EQ(last_total, 12);
  EXPECT_EQ(filler_.cold_copies, 2);
  EXPECT_TRUE(fs::exists(root_ / Want().version / "complete"));
  // Used again: nothing copied.
  auto again = cache.Ensure(Want(), no_progress_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(filler_.cold_copies, 2);
  // Its manifest and files are served to peers; nothing else is.
  auto m = cache.Manifest(Want().version);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 2u);
  EXPECT_TRUE(cache.FilePath(Want().version, "d/b.bin").ok());
  EXPECT_FALSE(cache.FilePath(Want().version, "../complete").ok());
  EXPECT_FALSE(cache.FilePath(Want().version, "nope").ok());
  EXPECT_FALSE(cache.FilePath("0123456789abcdef", "a.bin").ok());
}

TEST_F(DatasetCacheTest, FillsFromAPeerWhenOneHasIt) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  filler_.peer_has = true;
  DatasetWant w = Want();
  w.peers.push_back({"n1", "127.0.0.1:1", "tok"});
  ASSERT_TRUE(cache.Ensure(w, no_progress_).ok());
  EXPECT_EQ(filler_.peer_copies, 2);
  EXPECT_EQ(filler_.cold_copies, 0);
}

TEST_F(DatasetCacheTest, TruncatedFileIsFetchedAgain) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  std::string dir;
  {
    auto hold = cache.Ensure(Want(), no_progress_);
    ASSERT_TRUE(hold.ok());
    dir = (*hold)->dir();
  }
  fs::resize_file(fs::path(dir) / "d/b.bin", 3);
  auto hold = cache.Ensure(Want(), no_progress_);
  ASSERT_TRUE(hold.ok()) << hold.status();
  EXPECT_EQ(filler_.cold_copies, 3);  // only the truncated file again
  EXPECT_EQ(Read(dir + "/d/b.bin"), "bbbbbbbb");
}

TEST_F(DatasetCacheTest, SaysWhereTheBytesCameFrom) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  DatasetFillStats stats;
  std::string dir;
  {
    auto hold = cache.Ensure(Want(), no_progress_, &stats);
    ASSERT_TRUE(hold.ok()) << hold.status();
    dir = (*hold)->dir();
  }
  EXPECT_EQ(stats.cold_bytes, 12);
  EXPECT_EQ(stats.peer_bytes, 0);
  EXPECT_EQ(stats.cached_bytes, 0);
  ASSERT_TRUE(cache.Ensure(Want(), no_progress_, &stats).ok());
  EXPECT_EQ(stats.cached_bytes, 12);  // a hit: nothing copied
  EXPECT_EQ(stats.cold_bytes + stats.peer_bytes, 0);
  EXPECT_EQ(stats.fill_time, absl::ZeroDuration());
  // One file truncated, fetched again from a peer that has the version.
  fs::resize_file(fs::path(dir) / "d/b.bin", 3);
  filler_.peer_has = true;
  DatasetWant w = Want();
  w.peers.push_back({"n1", "127.0.0.1:1", "tok"});
  ASSERT_TRUE(cache.Ensure(w, no_progress_, &stats).ok());
  EXPECT_EQ(stats.cached_bytes, 4);
  EXPECT_EQ(stats.peer_bytes, 8);
  EXPECT_EQ(stats.peer, "n1");
}

TEST_F(DatasetCacheTest, ChecksumsOfCopiedFilesAreChecked) {
  filler_.with_hashes = true;
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  DatasetFillStats stats;
  ASSERT_TRUE(cache.Ensure(Want(), no_progress_, &stats).ok());
  EXPECT_EQ(stats.verified_files, 2);
  EXPECT_EQ(filler_.hash_calls, 1);  // one call per hash type
}

TEST_F(DatasetCacheTest, APeersCorruptCopyIsFetchedAgainFromTheStore) {
  filler_.with_hashes = true;
  filler_.peer_has = true;
  filler_.corrupt_peer_copy = true;  // same sizes, other bytes
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  DatasetWant w = Want();
  w.peers.push_back({"n1", "127.0.0.1:1", "tok"});
  DatasetFillStats stats;
  auto hold = cache.Ensure(w, no_progress_, &stats);
  ASSERT_TRUE(hold.ok()) << hold.status();
  EXPECT_EQ(filler_.peer_copies, 2);
  EXPECT_EQ(filler_.cold_copies, 2);  // both again, from the cold store
  EXPECT_EQ(Read((*hold)->dir() + "/a.bin"), "aaaa");
  EXPECT_EQ(stats.cold_bytes, 12);
  EXPECT_EQ(stats.verified_files, 2);
}

TEST_F(DatasetCacheTest, AColdCopyWithAWrongChecksumIsNotComplete) {
  // The store serves other bytes of the same size than its listing's
  // checksum says (a corrupt object): the fill fails, nothing is marked
  // complete.
  class Lying : public FakeFiller {
   public:
    std::vector<DatasetEntry> listing;
    absl::StatusOr<std::vector<DatasetEntry>> ListSource(
        const DatasetWant&) override {
      return listing;
    }
  } lying;
  lying.with_hashes = true;
  lying.files = filler_.files;
  lying.listing = lying.Listing();  // the hashes of the original content
  lying.files["a.bin"] = "aaab";
  DatasetWant w = Want();
  w.version = DatasetVersion("cold:sets/a", lying.listing);
  DatasetCache liar_cache({(root_ / "l").string(), 1 << 20}, &lying);
  auto hold = liar_cache.Ensure(w, no_progress_);
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kDataLoss) << hold.status();
  EXPECT_THAT(hold.status().message(), HasSubstr("checksum"));
  EXPECT_FALSE(fs::exists(root_ / "l" / w.version / "complete"));
  EXPECT_FALSE(fs::exists(root_ / "l" / w.version / "data" / "a.bin"));
}

TEST_F(DatasetCacheTest, AnAgentRestartHoldsWhatItsTasksReadAgain) {
  DatasetWant w = Want();
  w.holder = "7.0.0";
  {
    DatasetCache cache({root_.string(), 0}, &filler_);  // no room at all
    auto hold = cache.Ensure(w, no_progress_);
    ASSERT_TRUE(hold.ok()) << hold.status();
    EXPECT_TRUE(fs::exists(root_ / w.version / "holders" / "7.0.0"));
  }
  // Released: its record goes with it.
  EXPECT_FALSE(fs::exists(root_ / w.version / "holders" / "7.0.0"));
  // What an agent that stopped with tasks 7.0.0 and 8.0.0 running leaves.
  std::ofstream(root_ / w.version / "holders" / "7.0.0");
  std::ofstream(root_ / w.version / "holders" / "8.0.0");
  // The restarted agent: task 7.0.0 is re-adopted, 8.0.0 is gone.
  DatasetCache cache({root_.string(), 0}, &filler_);
  auto holds = cache.Readopt({"7.0.0", "9.0.0"});
  ASSERT_EQ(holds.size(), 1u);
  ASSERT_EQ(holds["7.0.0"].size(), 1u);
  EXPECT_FALSE(fs::exists(root_ / w.version / "holders" / "8.0.0"));
  EXPECT_TRUE(cache.Evict().empty());  // held: kept over the budget
  holds.clear();                       // the task is forgotten
  EXPECT_FALSE(fs::exists(root_ / w.version / "holders" / "7.0.0"));
  EXPECT_THAT(cache.Evict(), ElementsAre(w.version));
}

TEST_F(DatasetCacheTest, ServesAFewPeersAtOnce) {
  DatasetCacheOptions o{root_.string(), 1 << 20};
  o.max_peer_clients = 2;
  o.peer_lease = absl::Seconds(2);
  DatasetCache cache(o, &filler_);
  const absl::Time t0 = absl::FromUnixSeconds(1000);
  const std::string v = "0123456789abcdef";
  EXPECT_TRUE(cache.AdmitPeer(v, "n1", t0));
  EXPECT_TRUE(cache.AdmitPeer(v, "n2", t0));
  EXPECT_FALSE(cache.AdmitPeer(v, "n3", t0));  // two copy already
  EXPECT_TRUE(cache.AdmitPeer(v, "n1", t0));   // one of them asks again
  EXPECT_TRUE(cache.AdmitPeer("fedcba9876543210", "n3", t0));  // per version
  EXPECT_TRUE(cache.AdmitPeer(v, "", t0));  // an older agent: no name
  // n1 goes on copying files; n2 is done (silent past its lease).
  cache.TouchPeer(v, "n1", t0 + absl::Seconds(2));
  EXPECT_TRUE(cache.AdmitPeer(v, "n3", t0 + absl::Seconds(3)));
  EXPECT_FALSE(cache.AdmitPeer(v, "n4", t0 + absl::Seconds(3)));
}

TEST_F(DatasetCacheTest, ACopyThatDoesNotMatchIsNotComplete) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  filler_.truncate_on_copy = true;
  auto hold = cache.Ensure(Want(), no_progress_);
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_FALSE(fs::exists(root_ / Want().version / "complete"));
}

TEST_F(DatasetCacheTest, StoreDownAndChangedSource) {
  DatasetCache cache({root_.string(), 1 << 20}, &filler_);
  filler_.store_down = true;
  auto hold = cache.Ensure(Want(), no_progress_);
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kUnavailable);
  filler_.store_down = false;
  DatasetWant old = Want();
  filler_.files["c.bin"] = "c";
  hold = cache.Ensure(old, no_progress_);
  EXPECT_EQ(hold.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(hold.status().message(), HasSubstr("changed"));
}

TEST_F(DatasetCacheTest, EvictsLeastRecentlyUsedVersionsNoOneHolds) {
  // Versions of 12, 13 and 14 bytes (another size: another version); the
  // budget holds two of them, not three.
  DatasetCache cache({root_.string(), 30}, &filler_);
  auto v1_hold = cache.Ensure(Want(), no_progress_);
  ASSERT_TRUE(v1_hold.ok());
  const std::string v1 = Want().version;
  v1_hold->reset();
  filler_.files["a.bin"] = "AAAAA";
  const std::string v2 = Want().version;
  ASSERT_NE(v2, v1);
  ASSERT_TRUE(cache.Ensure(Want(), no_progress_).ok());
  // v1 used again, after v2: v2 is now the least recently used.
  filler_.files["a.bin"] = "aaaa";
  ASSERT_TRUE(cache.Ensure(Want(), no_progress_).ok());
  EXPECT_EQ(filler_.cold_copies, 4);  // v1 was not copied again
  filler_.files["a.bin"] = "XXXXXX";
  const std::string v3 = Want().version;
  auto v3_hold = cache.Ensure(Want(), no_progress_);
  ASSERT_TRUE(v3_hold.ok());
  EXPECT_FALSE(fs::exists(root_ / v2)) << "v2 should be gone";
  EXPECT_TRUE(fs::exists(root_ / v1 / "complete"));
  EXPECT_TRUE(fs::exists(root_ / v3 / "complete"));
  EXPECT_EQ(cache.Bytes(), 26);
}

TEST_F(DatasetCacheTest, HeldVersionsStayOverTheBudget) {
  DatasetCache cache({root_.string(), 1}, &filler_);
  auto hold = cache.Ensure(Want(), no_progress_);
  ASSERT_TRUE(hold.ok());
  EXPECT_TRUE(cache.Evict().empty());
  EXPECT_TRUE(fs::exists(root_ / Want().version / "complete"));
  hold->reset();
  EXPECT_THAT(cache.Evict(), ElementsAre(Want().version));
  EXPECT_FALSE(fs::exists(root_ / Want().version));
}

TEST(DatasetManifestTest, RefusesPathsOutsideTheVersion) {
  EXPECT_TRUE(SafeDatasetPath("a/b.bin"));
  EXPECT_FALSE(SafeDatasetPath("../x"));
  EXPECT_FALSE(SafeDatasetPath("/etc/passwd"));
  EXPECT_FALSE(SafeDatasetPath("a//b"));
  EXPECT_FALSE(SafeDatasetPath(""));
  EXPECT_FALSE(ParseDatasetManifest(R"([{"path":"../x","size":1}])").ok());
  EXPECT_FALSE(ParseDatasetManifest("nope").ok());
  auto m = ParseDatasetManifest(DatasetManifestJson({{"a", 1, "md5:x", "t"}}));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)[0].hash, "md5:x");
}

TEST(DataLaunchTest, ParsesAndChecksTheLaunchsData) {
  std::string field;
  auto ok = ParseDataLaunch(nlohmann::json::parse(R"([{
      "source": "cold:set", "mount": "/data/set/", "version": "0123456789abcdef",
      "files": 3, "bytes": 30, "fill_from_store": false,
      "peers": [{"node": "h200-1", "address": "127.0.0.3:7101", "token": "t"}]}])"),
                            &field);
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].mount, "/data/set");
  EXPECT_FALSE((*ok)[0].fill_from_store);
  ASSERT_EQ((*ok)[0].peers.size(), 1u);
  EXPECT_EQ((*ok)[0].peers[0].address, "127.0.0.3:7101");
  auto bad = [&](const char* text) {
    field.clear();
    auto r = ParseDataLaunch(nlohmann::json::parse(text), &field);
    EXPECT_FALSE(r.ok()) << text;
    return field;
  };
  EXPECT_EQ(bad(R"({})"), "data");
  EXPECT_EQ(bad(R"([{"source": "a:b", "mount": "/d", "version": "../x",
                     "files": 1, "bytes": 1}])"),
            "data[0].version");
  EXPECT_EQ(bad(R"([{"source": ":s3,key=x:", "mount": "/d",
                     "version": "0123456789abcdef", "files": 1, "bytes": 1}])"),
            "data[0].source");
  EXPECT_EQ(bad(R"([{"source": "a:b", "mount": "d",
                     "version": "0123456789abcdef", "files": 1, "bytes": 1}])"),
            "data[0].mount");
  EXPECT_EQ(bad(R"([{"source": "a:b", "mount": "/d",
                     "version": "0123456789abcdef", "files": 1, "bytes": 1,
                     "peers": [{"node": "x"}]}])"),
            "data[0].peers[0].address");
}

TEST(DatasetPeerTokenTest, OpensOneVersionOnOneNode) {
  ApiGuard guard(/*insecure=*/false);
  guard.SetKey("h200-0", "key-0");
  guard.SetKey("h200-1", "key-1");
  const std::string v = "0123456789abcdef";
  const std::string token = DatasetPeerToken("key-0", v);
  EXPECT_TRUE(guard.CheckDatasetPeer("h200-0", v, "Bearer " + token).allowed);
  EXPECT_FALSE(guard.CheckDatasetPeer("h200-1", v, "Bearer " + token).allowed);
  EXPECT_FALSE(
      guard.CheckDatasetPeer("h200-0", "fedcba9876543210", "Bearer " + token)
          .allowed);
  EXPECT_FALSE(guard.CheckDatasetPeer("h200-0", v, "").allowed);
  // The server's key itself opens the task routes, not datasets.
  EXPECT_FALSE(guard.CheckDatasetPeer("h200-0", v, "Bearer key-0").allowed);
  ApiGuard open(/*insecure=*/true);
  EXPECT_TRUE(open.CheckDatasetPeer("h200-0", v, "").allowed);
}

}  // namespace
}  // namespace loom
