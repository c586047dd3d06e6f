// The gateway's run directory (run_dir.h): a directory another user made,
// one others may read or write, a symlink in its place or above it under
// another user's control, are refused; files are written without following
// symlinks planted in it.

#include "loom/gateway/run_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::gateway {
namespace {

using ::testing::HasSubstr;

// A uid no test user has: the "other user" of these tests (chown needs
// root).
constexpr uid_t kOtherUid = 65534;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

void WriteAll(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

class RunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-rundir-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    outside_ = base_ + "/outside";
    ASSERT_EQ(::mkdir(outside_.c_str(), 0755), 0);
    victim_ = outside_ + "/victim";
    WriteAll(victim_, "precious\n");
  }
  void TearDown() override { std::filesystem::remove_all(base_); }

  // A directory `base_/<name>` with `mode`, owned by `uid` (-1: ours).
  std::string MakeDir(const std::string& name, mode_t mode, int uid = -1) {
    const std::string path = base_ + "/" + name;
    EXPECT_EQ(::mkdir(path.c_str(), 0700), 0) << path;
    EXPECT_EQ(::chmod(path.c_str(), mode), 0) << path;
    if (uid >= 0) {
      EXPECT_EQ(::chown(path.c_str(), uid, -1), 0) << path;
    }
    return path;
  }
  std::shared_ptr<const RunDir> OpenOk(const std::string& path) {
    absl::StatusOr<std::shared_ptr<const RunDir>> d =
        RunDir::Open(path, /*create=*/false);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? *d : nullptr;
  }
  static bool Root() { return ::geteuid() == 0; }

  std::string base_;
  std::string outside_;
  std::string victim_;
};

TEST_F(RunDirTest, OpensAnOwn0700Directory) {
  const std::string gw = MakeDir("gw", 0700);
  std::shared_ptr<const RunDir> d = OpenOk(gw + "//");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->path(), gw);
  EXPECT_EQ(d->PathOf("haproxy.cfg"), gw + "/haproxy.cfg");
  EXPECT_GE(d->fd(), 0);
}

TEST_F(RunDirTest, RefusesADirectoryAnotherUserMade) {
  if (!Root()) GTEST_SKIP() << "chown to another uid needs root";
  // As in the finding: a user made the gateway's directory before it, with
  // a haproxy.cfg of their own in it.
  const std::string planted = MakeDir("loom-gateway-host", 0700, kOtherUid);
  WriteAll(planted + "/haproxy.cfg", "global\n    lua-load /tmp/evil.lua\n");
  for (bool create : {false, true}) {
    absl::StatusOr<std::shared_ptr<const RunDir>> d =
        RunDir::Open(planted, create);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(d.status().message()),
                HasSubstr("is owned by uid 65534, not by this gateway's uid"));
  }
  EXPECT_EQ(ReadAll(planted + "/haproxy.cfg"),
            "global\n    lua-load /tmp/evil.lua\n");
}

TEST_F(RunDirTest, RefusesADirectoryOthersMayReadOrWrite) {
  for (mode_t mode : {0755, 0750, 0711, 0777, 01777}) {
    const std::string dir = MakeDir(absl::StrCat("m", mode), mode);
    absl::StatusOr<std::shared_ptr<const RunDir>> d =
        RunDir::Open(dir, /*create=*/true);
    ASSERT_FALSE(d.ok()) << mode;
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(d.status().message()),
                HasSubstr(absl::StrFormat("has mode %04o; it must be 0700",
                                          static_cast<unsigned>(mode))));
    EXPECT_EQ(ModeOf(dir), mode) << "left as it was";
  }
}

TEST_F(RunDirTest, RefusesASymlinkInItsPlace) {
  const std::string real = MakeDir("real", 0700);
  const std::string link = base_ + "/loom-gateway-host";
  ASSERT_EQ(::symlink(real.c_str(), link.c_str()), 0);
  for (bool create : {false, true}) {
    absl::StatusOr<std::shared_ptr<const RunDir>> d =
        RunDir::Open(link, create);
    ASSERT_FALSE(d.ok());
    EXPECT_EQ(d.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(d.status().message()),
                HasSubstr(link + " is a symlink; not following it"));
  }
  // A dangling one is not made through either.
  const std::string dangling = base_ + "/dangling";
  ASSERT_EQ(::symlink((outside_ + "/made").c_str(), dangling.c_str()), 0);
  EXPECT_FALSE(RunDir::Open(dangling, /*create=*/true).ok());
  EXPECT_FALSE(std::filesystem::exists(outside_ + "/made"));
}

TEST_F(RunDirTest, RefusesADirectoryUnderOneOthersCanChange) {
  // Writable by all, not sticky: anyone could rename the run directory away
  // and put their own in its place.
  const std::string open = MakeDir("open", 0777);
  ASSERT_EQ(::mkdir((open + "/gw").c_str(), 0700), 0);
  absl::StatusOr<std::shared_ptr<const RunDir>> d =
      RunDir::Open(open + "/gw", /*create=*/false);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("its ancestor " + open +
                        " (mode 0777) is writable by other users"));
  // Sticky, as /tmp: only an entry's owner may rename it.
  const std::string sticky = MakeDir("sticky", 01777);
  ASSERT_EQ(::mkdir((sticky + "/gw").c_str(), 0700), 0);
  EXPECT_NE(OpenOk(sticky + "/gw"), nullptr);
  if (!Root()) return;
  // Another user's directory, however its mode.
  const std::string bob = MakeDir("bob", 0755, kOtherUid);
  ASSERT_EQ(::mkdir((bob + "/gw").c_str(), 0700), 0);
  d = RunDir::Open(bob + "/gw", /*create=*/false);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()),
              HasSubstr("its ancestor " + bob + " is owned by uid 65534"));
}

TEST_F(RunDirTest, FollowsASymlinkAboveOnlyWhenRootOrTheGatewayOwnsIt) {
  const std::string real = MakeDir("real", 0755);
  ASSERT_EQ(::mkdir((real + "/gw").c_str(), 0700), 0);
  const std::string alias = base_ + "/alias";  // as /var/run -> /run
  ASSERT_EQ(::symlink("real", alias.c_str()), 0);
  std::shared_ptr<const RunDir> d = OpenOk(alias + "/gw");
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->path(), real + "/gw") << "HAProxy is given the walked path";
  if (!Root()) return;
  const std::string evil = base_ + "/evil";
  ASSERT_EQ(::symlink(real.c_str(), evil.c_str()), 0);
  ASSERT_EQ(::lchown(evil.c_str(), kOtherUid, -1), 0);
  absl::StatusOr<std::shared_ptr<const RunDir>> refused =
      RunDir::Open(evil + "/gw", /*create=*/false);
  ASSERT_FALSE(refused.ok());
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr(evil + " is a symlink owned by uid 65534"));
}

TEST_F(RunDirTest, MakesWhatIsMissing0700WhateverTheUmask) {
  const mode_t old = ::umask(0277);
  absl::StatusOr<std::shared_ptr<const RunDir>> d =
      RunDir::Open(base_ + "/a/b", /*create=*/true);
  ::umask(old);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ((*d)->path(), base_ + "/a/b");
  EXPECT_EQ(ModeOf(base_ + "/a"), 0700u);
  EXPECT_EQ(ModeOf(base_ + "/a/b"), 0700u);
  // Without `create`, a missing one is NotFound.
  EXPECT_EQ(RunDir::Open(base_ + "/c", /*create=*/false).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(RunDir::Open("/", /*create=*/false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(RunDirTest, WriteFileReplacesPlantedSymlinksAndNeverFollowsThem) {
  std::shared_ptr<const RunDir> d = OpenOk(MakeDir("gw", 0700));
  ASSERT_NE(d, nullptr);
  const std::string other = outside_ + "/other";
  WriteAll(other, "also precious\n");
  // The stale temporary and the file itself point at root's files.
  ASSERT_EQ(::symlink(victim_.c_str(), d->PathOf("haproxy.cfg.tmp").c_str()),
            0);
  ASSERT_EQ(::symlink(other.c_str(), d->PathOf("haproxy.cfg").c_str()), 0);
  ASSERT_TRUE(d->WriteFile("haproxy.cfg", "global\n", 0600).ok());
  EXPECT_EQ(ReadAll(victim_), "precious\n");
  EXPECT_EQ(ReadAll(other), "also precious\n");
  struct stat st {};
  ASSERT_EQ(::lstat(d->PathOf("haproxy.cfg").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(ReadAll(d->PathOf("haproxy.cfg")), "global\n");
  EXPECT_FALSE(d->Exists("haproxy.cfg.tmp"));
  EXPECT_EQ(d->WriteFile("../escape", "x").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(base_ + "/escape"));
}

TEST_F(RunDirTest, TheLogIsNeitherFollowedNorAnotherFilesLink) {
  std::shared_ptr<const RunDir> d = OpenOk(MakeDir("gw", 0700));
  ASSERT_NE(d, nullptr);
  ASSERT_EQ(::symlink(victim_.c_str(), d->PathOf("haproxy.log").c_str()), 0);
  absl::StatusOr<int> fd = d->OpenAppend("haproxy.log");
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(fd.status().message()),
              HasSubstr("haproxy.log is a symlink; not writing through it"));
  EXPECT_EQ(d->Tail("haproxy.log", 100), "") << "not read through it";
  // A hard link to another file.
  ASSERT_TRUE(d->Remove("haproxy.log").ok());
  ASSERT_EQ(::link(victim_.c_str(), d->PathOf("haproxy.log").c_str()), 0);
  fd = d->OpenAppend("haproxy.log");
  ASSERT_FALSE(fd.ok());
  EXPECT_THAT(std::string(fd.status().message()), HasSubstr("hard links"));
  EXPECT_EQ(ReadAll(victim_), "precious\n");
  EXPECT_EQ(std::filesystem::exists(victim_), true);
  // Our own log: appended to, 0600.
  ASSERT_TRUE(d->Remove("haproxy.log").ok());
  EXPECT_EQ(ReadAll(victim_), "precious\n") << "the link went, not the file";
  for (const char* line : {"one\n", "two\n"}) {
    fd = d->OpenAppend("haproxy.log");
    ASSERT_TRUE(fd.ok()) << fd.status();
    ASSERT_EQ(::write(*fd, line, 4), 4);
    ::close(*fd);
  }
  EXPECT_EQ(d->Tail("haproxy.log", 100), "one\ntwo\n");
  EXPECT_EQ(d->Tail("haproxy.log", 4), "two\n");
  EXPECT_EQ(ModeOf(d->PathOf("haproxy.log")), 0600u);
}

TEST(DefaultRunDirTest, UnderARootOwnedDirectoryForRootElseTheUsersOwn) {
  EXPECT_EQ(DefaultRunDir(0, "gw1", "/run/user/0", "/tmp").value(),
            "/run/loom-gateway/gw1");
  EXPECT_EQ(DefaultRunDir(1000, "gw1", "/run/user/1000", "/var/tmp").value(),
            "/run/user/1000/loom-gateway-gw1");
  EXPECT_EQ(DefaultRunDir(1000, "gw1", "", "/var/tmp").value(),
            "/var/tmp/loom-gateway-gw1");
  EXPECT_EQ(DefaultRunDir(1000, "gw1", "relative", "").value(),
            "/tmp/loom-gateway-gw1");
  for (const char* bad : {"", ".", "..", "a/b", "../../etc"}) {
    absl::StatusOr<std::string> d = DefaultRunDir(0, bad, "", "");
    ASSERT_FALSE(d.ok()) << bad;
    EXPECT_THAT(std::string(d.status().message()), HasSubstr("--run-dir"));
  }
}

}  // namespace
}  // namespace loom::gateway
