// A local dataset source read with its user's rights (dataset_local_read.h):
// as root, with the system's `nobody` as the job's user.

#include "loom/agent/dataset_local_read.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using agent_testing::TempDir;

void PutFile(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}
std::string GetFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

constexpr uid_t kNobody = 65534;

UserAccount Nobody() {
  UserAccount u;
  u.name = "nobody";
  u.uid = kNobody;
  u.gid = kNobody;
  u.groups = {kNobody};
  return u;
}

class LocalReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (it reads as nobody)";
    fs::permissions(tmp_.path(), fs::perms::owner_all | fs::perms::group_exec |
                                     fs::perms::others_exec);
    src_ = tmp_.path() + "/src";
    dir_ = tmp_.path() + "/cache";
    fs::create_directories(src_ + "/sub");
    fs::create_directories(dir_);
    fs::permissions(src_, fs::perms(0755));
    fs::permissions(src_ + "/sub", fs::perms(0755));
    PutFile(src_ + "/open.txt", "for everyone");
    PutFile(src_ + "/sub/open2.txt", "also");
    fs::permissions(src_ + "/open.txt", fs::perms(0644));
    fs::permissions(src_ + "/sub/open2.txt", fs::perms(0644));
  }
  TempDir tmp_;
  std::string src_, dir_;
};

TEST_F(LocalReadTest, CopiesWhatTheUserMayReadAsRootsFiles) {
  std::vector<DatasetEntry> entries = {{"open.txt", 12, "", ""},
                                       {"sub/open2.txt", 4, "", ""}};
  int64_t last = 0;
  absl::Status st = CopyLocalSourceAs(Nobody(), src_, entries, dir_,
                                      [&](int64_t n) { last = n; });
  ASSERT_TRUE(st.ok()) << st;
  EXPECT_EQ(GetFile(dir_ + "/open.txt"), "for everyone");
  EXPECT_EQ(GetFile(dir_ + "/sub/open2.txt"), "also");
  EXPECT_EQ(last, 16);
  struct stat s;
  ASSERT_EQ(::stat((dir_ + "/open.txt").c_str(), &s), 0);
  EXPECT_EQ(s.st_uid, 0u);
  EXPECT_EQ(s.st_mode & 0777, 0644u);
  EXPECT_TRUE(CheckLocalSourceReadable(Nobody(), src_, entries).ok());
  // The thread that read as nobody is gone; this one is still root's.
  EXPECT_EQ(::access("/root", W_OK), 0);
}

TEST_F(LocalReadTest, AFileTheUserMayNotReadIsRefusedAndNotCopied) {
  PutFile(src_ + "/secret", "root only");
  fs::permissions(src_ + "/secret", fs::perms(0600));
  std::vector<DatasetEntry> entries = {{"open.txt", 12, "", ""},
                                       {"secret", 9, "", ""}};
  absl::Status st =
      CopyLocalSourceAs(Nobody(), src_, entries, dir_, [](int64_t) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(st.message(), HasSubstr("user nobody cannot read " + src_ +
                                      "/secret: Permission denied"));
  EXPECT_FALSE(fs::exists(dir_ + "/secret"));
  EXPECT_FALSE(fs::exists(dir_ + "/secret.part"));
  absl::Status check = CheckLocalSourceReadable(Nobody(), src_, entries);
  EXPECT_EQ(check.code(), absl::StatusCode::kPermissionDenied) << check;
  // A directory the user may not enter hides what is in it.
  fs::permissions(src_ + "/sub", fs::perms(0700));
  EXPECT_EQ(CheckLocalSourceReadable(Nobody(), src_,
                                     {{"sub/open2.txt", 4, "", ""}})
                .code(),
            absl::StatusCode::kPermissionDenied);
}

TEST_F(LocalReadTest, LinksAndChangedFilesAreRefused) {
  PutFile(tmp_.path() + "/shadow", "root only");
  fs::permissions(tmp_.path() + "/shadow", fs::perms(0644));
  fs::create_symlink(tmp_.path() + "/shadow", src_ + "/link");
  absl::Status st = CopyLocalSourceAs(Nobody(), src_, {{"link", 9, "", ""}},
                                      dir_, [](int64_t) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kPermissionDenied) << st;
  EXPECT_THAT(st.message(), HasSubstr("is a symbolic link"));
  EXPECT_FALSE(fs::exists(dir_ + "/link"));
  // Not the size the listing gave: changed since it.
  st = CopyLocalSourceAs(Nobody(), src_, {{"open.txt", 3, "", ""}}, dir_,
                         [](int64_t) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  // A listing that names a path outside the source.
  st = CopyLocalSourceAs(Nobody(), src_, {{"../shadow", 9, "", ""}}, dir_,
                         [](int64_t) {});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  // A link left where a part file goes is removed, not written through.
  fs::create_symlink(tmp_.path() + "/shadow", dir_ + "/open.txt.part");
  st = CopyLocalSourceAs(Nobody(), src_, {{"open.txt", 12, "", ""}}, dir_,
                         [](int64_t) {});
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(GetFile(tmp_.path() + "/shadow"), "root only");
  EXPECT_EQ(GetFile(dir_ + "/open.txt"), "for everyone");
}

}  // namespace
}  // namespace loom
