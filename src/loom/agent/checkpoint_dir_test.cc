#include "loom/agent/checkpoint_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

class CheckpointDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-ckpt-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }

  static struct stat Stat(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st;
  }

  std::string dir_;
};

TEST_F(CheckpointDirTest, MakesAPrivateDirectoryPerJob) {
  const std::string root = dir_ + "/checkpoints";
  absl::StatusOr<std::string> path =
      PrepareCheckpointDir(root, 42, std::nullopt, std::nullopt);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, root + "/42");
  EXPECT_EQ(Stat(root).st_mode & 07777, 0711u);
  const struct stat st = Stat(*path);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  // Again (a restarted job): kept, with what it holds, and its mode reset.
  ASSERT_TRUE(fs::create_directories(*path + "/step-10"));
  ASSERT_EQ(::chmod(path->c_str(), 0755), 0);
  path = PrepareCheckpointDir(root, 42, std::nullopt, std::nullopt);
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_TRUE(fs::exists(*path + "/step-10"));
  EXPECT_EQ(Stat(*path).st_mode & 07777, 0700u);
  EXPECT_EQ(
      PrepareCheckpointDir(root, 0, std::nullopt, std::nullopt).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointDirTest, OnlyWhenNobodyNamedOne) {
  absl::StatusOr<std::string> dir =
      DefaultCheckpointDir(dir_, 5, {{"LOOM_CHECKPOINT_DIR", "/ckpt"}}, {});
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, "");
  EXPECT_EQ(*DefaultCheckpointDir(dir_, 0, {}, {}), "");
  EXPECT_EQ(*DefaultCheckpointDir("", 5, {}, {}), "");
  dir = DefaultCheckpointDir(dir_, 5, {{"PATH", "/bin"}}, {});
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_EQ(*dir, dir_ + "/checkpoints/5");
  EXPECT_EQ(Stat(*dir).st_mode & 07777, 0700u);
}

TEST_F(CheckpointDirTest, NeverFollowsALink) {
  const std::string root = dir_ + "/checkpoints";
  ASSERT_TRUE(fs::create_directories(root));
  fs::create_directory_symlink("/etc", root + "/7");
  absl::StatusOr<std::string> path =
      PrepareCheckpointDir(root, 7, std::nullopt, std::nullopt);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kFailedPrecondition)
      << path.status();
  std::ofstream(root + "/8") << "a file";
  EXPECT_EQ(
      PrepareCheckpointDir(root, 8, std::nullopt, std::nullopt).status().code(),
      absl::StatusCode::kFailedPrecondition);
}

// A task that runs as another user owns its directory and can write there
// (and nobody else can).
TEST_F(CheckpointDirTest, BelongsToTheTasksUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown)";
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const uid_t uid = 65534;  // nobody
  const gid_t gid = 65534;
  const std::string root = dir_ + "/checkpoints";
  absl::StatusOr<std::string> path = PrepareCheckpointDir(root, 9, uid, gid);
  ASSERT_TRUE(path.ok()) << path.status();
  const struct stat st = Stat(*path);
  EXPECT_EQ(st.st_uid, uid);
  EXPECT_EQ(st.st_gid, gid);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  const std::string cmd = absl::StrCat(
      "setpriv --reuid=65534 --regid=65534 --clear-groups sh -c 'touch ", *path,
      "/step && ! touch ", root, "/squat 2>/dev/null'");
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  EXPECT_EQ(Stat(*path + "/step").st_uid, uid);
}

}  // namespace
}  // namespace loom
