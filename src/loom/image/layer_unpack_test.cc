#include "loom/image/layer_unpack.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "loom/image/test_layers.h"

namespace loom::image {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using namespace ::loom::image::testing;  // NOLINT

class ImageLayerUnpackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/layer_unpack_test.XXXXXX";
    dir_ = mkdtemp(tmpl);
    rootfs_ = dir_ + "/rootfs";
    fs::create_directories(rootfs_);
  }
  void TearDown() override { (void)RemoveTree(dir_); }

  absl::Status Apply(const std::vector<TarEntry>& entries) {
    const std::string path = dir_ + "/layer" + std::to_string(n_++);
    WriteFile(path, MakeTarGz(entries));
    return ApplyLayer(path, rootfs_);
  }
  std::string Read(const std::string& rel) const {
    std::ifstream in(rootfs_ + "/" + rel);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  bool Exists(const std::string& rel) const {
    std::error_code ec;
    return fs::exists(fs::symlink_status(rootfs_ + "/" + rel, ec));
  }

  std::string dir_;
  std::string rootfs_;
  int n_ = 0;
};

TEST_F(ImageLayerUnpackTest, LayersApplyInOrder) {
  ASSERT_TRUE(
      Apply({Dir("etc"), File("etc/os", "one"), File("bin/tool", "x", 0755)})
          .ok());
  ASSERT_TRUE(
      Apply({File("etc/os", "two"), Symlink("bin/alias", "tool")}).ok());
  EXPECT_EQ(Read("etc/os"), "two");
  EXPECT_EQ(Read("bin/tool"), "x");  // a parent made though not in the tar
  EXPECT_EQ(fs::read_symlink(rootfs_ + "/bin/alias"), "tool");
  struct stat st;
  ASSERT_EQ(stat((rootfs_ + "/bin/tool").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  EXPECT_EQ(st.st_mtime, 1700000000);
}

TEST_F(ImageLayerUnpackTest, WhiteoutsRemoveWhatLowerLayersHold) {
  ASSERT_TRUE(
      Apply({File("a/keep", "k"), File("a/gone", "g"), File("a/sub/deep", "d"),
             File("b/old1", "1"), File("b/old2", "2")})
          .ok());
  ASSERT_TRUE(
      Apply({File("a/.wh.gone", ""), File("a/.wh.sub", ""), File("b/new", "n"),
             File("b/.wh..wh..opq", ""), File("b/newer", "m")})
          .ok());
  EXPECT_TRUE(Exists("a/keep"));
  EXPECT_FALSE(Exists("a/gone"));
  EXPECT_FALSE(Exists("a/sub"));
  EXPECT_FALSE(Exists("a/.wh.gone"));
  // An opaque directory keeps only what its own layer put there, before the
  // marker or after it.
  EXPECT_FALSE(Exists("b/old1"));
  EXPECT_FALSE(Exists("b/old2"));
  EXPECT_EQ(Read("b/new"), "n");
  EXPECT_EQ(Read("b/newer"), "m");
  EXPECT_FALSE(Exists("b/.wh..wh..opq"));
}

TEST_F(ImageLayerUnpackTest, ReplacesAcrossTypes) {
  ASSERT_TRUE(Apply({File("x/f", "1"), File("y", "file")}).ok());
  ASSERT_TRUE(Apply({File("x", "now a file"), Dir("y")}).ok());
  EXPECT_EQ(Read("x"), "now a file");
  EXPECT_TRUE(fs::is_directory(rootfs_ + "/y"));
}

TEST_F(ImageLayerUnpackTest, RejectsEntriesThatEscape) {
  for (const std::vector<TarEntry>& layer : {
           std::vector<TarEntry>{File("../escaped", "x")},
           std::vector<TarEntry>{File("a/../../escaped", "x")},
           std::vector<TarEntry>{File("/abs", "x")},
           std::vector<TarEntry>{HardLink("h", "../../etc/passwd")},
           std::vector<TarEntry>{File("d/.wh...", "")},
       }) {
    absl::Status s = Apply(layer);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << layer[0].path;
  }
  EXPECT_FALSE(fs::exists(dir_ + "/escaped"));
  EXPECT_FALSE(fs::exists("/abs"));
}

TEST_F(ImageLayerUnpackTest, LinksNeverLeadWritesOutside) {
  // `out` points at the host's directory outside the root; a later entry
  // under it must land inside the root (as the image sees the path).
  const std::string outside = dir_ + "/outside";
  fs::create_directories(outside);
  ASSERT_TRUE(Apply({Symlink("out", outside), Symlink("up", "../../..")}).ok());
  ASSERT_TRUE(Apply({File("out/planted", "p"), File("up/planted2", "q"),
                     HardLink("hl", "out/planted")})
                  .ok());
  EXPECT_FALSE(fs::exists(outside + "/planted"));
  EXPECT_FALSE(fs::exists(dir_ + "/planted2"));
  EXPECT_EQ(Read(outside.substr(1) + "/planted"), "p");
  EXPECT_EQ(Read("planted2"), "q");
  EXPECT_EQ(Read("hl"), "p");
  struct stat a, b;
  ASSERT_EQ(stat((rootfs_ + "/hl").c_str(), &a), 0);
  ASSERT_EQ(stat((rootfs_ + outside + "/planted").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);
}

TEST_F(ImageLayerUnpackTest, DropsSetuidAndDevices) {
  ASSERT_TRUE(Apply({File("bin/su", "s", 04755), File("bin/sg", "g", 02755),
                     Dir("tmp", 01777), CharDevice("dev/null")})
                  .ok());
  struct stat st;
  ASSERT_EQ(stat((rootfs_ + "/bin/su").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((rootfs_ + "/bin/sg").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0755u);
  ASSERT_EQ(stat((rootfs_ + "/tmp").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);
  EXPECT_FALSE(Exists("dev/null"));
}

// A layer's uid (1000 is a local user's on many hosts) never owns a file
// of the root filesystem: what an image shares is the unpacker's (root's
// on a node), its mode kept.
TEST_F(ImageLayerUnpackTest, FilesBelongToTheUnpackerNotTheTarsUid) {
  ASSERT_TRUE(
      Apply({OwnedBy(Dir("home/app", 0755), 1000, 1000),
             OwnedBy(File("home/app/run.sh", "echo hi", 0755), 1000, 1000),
             OwnedBy(File("home/app/secret", "s", 0600), 1000, 1000),
             OwnedBy(Symlink("home/app/link", "run.sh"), 1000, 1000)})
          .ok());
  // A later layer's entry over a lower one's, and a hard link to it.
  ASSERT_TRUE(
      Apply(
          {OwnedBy(File("home/app/run.sh", "echo two", 0775), 1001, 1001),
           OwnedBy(HardLink("home/app/again", "home/app/run.sh"), 1000, 1000)})
          .ok());
  for (const char* rel :
       {"home", "home/app", "home/app/run.sh", "home/app/secret",
        "home/app/link", "home/app/again"}) {
    struct stat st;
    ASSERT_EQ(lstat((rootfs_ + "/" + rel).c_str(), &st), 0) << rel;
    EXPECT_EQ(st.st_uid, geteuid()) << rel;
    EXPECT_EQ(st.st_gid, getegid()) << rel;
  }
  struct stat st;
  ASSERT_EQ(stat((rootfs_ + "/home/app/secret").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  ASSERT_EQ(stat((rootfs_ + "/home/app/run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0775u);
  EXPECT_EQ(Read("home/app/again"), "echo two");
}

TEST_F(ImageLayerUnpackTest, SealTakesWriteBitsAndCountsBytes) {
  ASSERT_TRUE(Apply({File("etc/f", std::string(10000, 'x'), 0664),
                     Symlink("l", "etc/f")})
                  .ok());
  absl::StatusOr<int64_t> bytes = SealTree(rootfs_);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_GE(*bytes, 10000);
  struct stat st;
  ASSERT_EQ(stat((rootfs_ + "/etc/f").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0444u);
  ASSERT_EQ(stat((rootfs_ + "/etc").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0222, 0u);
  ASSERT_TRUE(RemoveTree(rootfs_).ok());
  EXPECT_FALSE(fs::exists(rootfs_));
  EXPECT_TRUE(RemoveTree(rootfs_).ok());  // absent is fine
}

TEST_F(ImageLayerUnpackTest, NotAnArchive) {
  WriteFile(dir_ + "/junk", "this is not a tar");
  absl::Status s = ApplyLayer(dir_ + "/junk", rootfs_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("junk"));
}

}  // namespace
}  // namespace loom::image
