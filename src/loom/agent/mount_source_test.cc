// OpenMountSource and CloneMountTree (mount_source.h): a job's mount
// source is reached without a symbolic link and with the task's user's
// rights, by openat2 and by the walk that stands in for it; what is cloned
// is what was opened.

#include "loom/agent/mount_source.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_node.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/image_step.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/launch_steps.h"
#include "loom/image/image_store.h"
#include "nlohmann/json.hpp"

namespace loom {
namespace {

namespace fs = std::filesystem;
using agent_testing::CapturedLog;
using agent_testing::TempDir;
using ::testing::HasSubstr;

#ifndef MOVE_MOUNT_F_EMPTY_PATH
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif

void Write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

// uid and gid 65534 (nobody), in no group.
PathUser Nobody() { return PathUser{"nobody", 65534, 65534, {}}; }

class MountSourceTest : public ::testing::TestWithParam<bool> {
 protected:
  bool openat2() const { return GetParam(); }
  TempDir tmp_;
};

TEST_P(MountSourceTest, OpensADirectoryOrAFile) {
  Write(tmp_.path() + "/data/f", "x");
  absl::StatusOr<MountSource> dir =
      OpenMountSource(tmp_.path() + "/data", std::nullopt, openat2());
  ASSERT_TRUE(dir.ok()) << dir.status();
  EXPECT_TRUE(dir->directory);
  EXPECT_GE(dir->fd.get(), 0);
  absl::StatusOr<MountSource> file =
      OpenMountSource(tmp_.path() + "/data/f", std::nullopt, openat2());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_FALSE(file->directory);

  EXPECT_EQ(OpenMountSource(tmp_.path() + "/none", std::nullopt, openat2())
                .status()
                .code(),
            absl::StatusCode::kNotFound);
  ASSERT_EQ(::mkfifo((tmp_.path() + "/data/fifo").c_str(), 0600), 0);
  absl::StatusOr<MountSource> fifo =
      OpenMountSource(tmp_.path() + "/data/fifo", std::nullopt, openat2());
  EXPECT_EQ(fifo.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(
      OpenMountSource("relative/x", std::nullopt, openat2()).status().code(),
      absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      OpenMountSource(tmp_.path() + "/data/../data", std::nullopt, openat2())
          .status()
          .code(),
      absl::StatusCode::kInvalidArgument);
}

// A link anywhere on the way, at the end or before it, is refused, and the
// message says which.
TEST_P(MountSourceTest, RefusesASymbolicLinkOnTheWay) {
  Write(tmp_.path() + "/elsewhere/secret", "s");
  fs::create_directories(tmp_.path() + "/data");
  fs::create_directory_symlink(tmp_.path() + "/elsewhere",
                               tmp_.path() + "/data/link");
  for (const std::string& path :
       {tmp_.path() + "/data/link", tmp_.path() + "/data/link/secret"}) {
    absl::StatusOr<MountSource> s =
        OpenMountSource(path, std::nullopt, openat2());
    ASSERT_FALSE(s.ok()) << path;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(s.status().message(), HasSubstr("symbolic link"));
    EXPECT_THAT(s.status().message(), HasSubstr(tmp_.path() + "/data/link"));
  }
}

// A directory the user may not search stops the user, not root: a bind
// would otherwise hand over what lies below another user's 0700 home.
TEST_P(MountSourceTest, TheUsersRightsOnTheWay) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (fs ids of another user)";
  ASSERT_EQ(::chmod(tmp_.path().c_str(), 0755), 0);
  Write(tmp_.path() + "/home/bob/shared/f", "bob's");
  ASSERT_EQ(::chmod((tmp_.path() + "/home/bob").c_str(), 0700), 0);
  ASSERT_EQ(::chmod((tmp_.path() + "/home/bob/shared").c_str(), 0755), 0);
  const std::string path = tmp_.path() + "/home/bob/shared";
  absl::StatusOr<MountSource> as_nobody =
      OpenMountSource(path, Nobody(), openat2());
  ASSERT_FALSE(as_nobody.ok());
  EXPECT_EQ(as_nobody.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(as_nobody.status().message(), HasSubstr("user nobody"));
  EXPECT_TRUE(OpenMountSource(path, std::nullopt, openat2()).ok());
  // A group of the user's that may search it lets it through.
  ASSERT_EQ(::chown((tmp_.path() + "/home/bob").c_str(), 0, 4242), 0);
  ASSERT_EQ(::chmod((tmp_.path() + "/home/bob").c_str(), 0710), 0);
  PathUser member = Nobody();
  member.groups = {4242};
  EXPECT_TRUE(OpenMountSource(path, member, openat2()).ok());
  EXPECT_FALSE(OpenMountSource(path, Nobody(), openat2()).ok());
  // The agent's own thread keeps its rights.
  EXPECT_EQ(::access(path.c_str(), R_OK), 0);
}

INSTANTIATE_TEST_SUITE_P(Openat2AndWalk, MountSourceTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& p) {
                           return p.param ? "openat2" : "walk";
                         });

// What `tree` shows at `rel` once a child attaches it at `target` in a
// mount namespace of its own ("" when it could not).
std::string ReadThroughTree(int tree, const std::string& target,
                            const std::string& rel) {
  int out[2];
  if (::pipe(out) != 0) return "";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(out[0]);
    if (::unshare(CLONE_NEWNS) != 0 ||
        ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::syscall(SYS_move_mount, tree, "", AT_FDCWD, target.c_str(),
                  MOVE_MOUNT_F_EMPTY_PATH) != 0) {
      ::_exit(1);
    }
    const std::string file = target + "/" + rel;
    const int fd = ::open(file.c_str(), O_RDONLY);
    char buf[256];
    const ssize_t n = fd < 0 ? -1 : ::read(fd, buf, sizeof(buf));
    if (n > 0) (void)!::write(out[1], buf, static_cast<size_t>(n));
    ::_exit(n > 0 ? 0 : 1);
  }
  ::close(out[1]);
  std::string text;
  char buf[256];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof(buf))) > 0;) {
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  return text;
}

// The tree is a copy of what was opened: swapping the path for a link
// afterwards does not change what a process attaches.
TEST(MountTreeTest, TheTreeIsWhatWasOpenedNotWhatThePathNamesLater) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (open_tree, mounts)";
  TempDir tmp;
  Write(tmp.path() + "/data/hello", "checked");
  Write(tmp.path() + "/secret/hello", "secret");
  absl::StatusOr<MountSource> opened =
      OpenMountSource(tmp.path() + "/data", std::nullopt);
  ASSERT_TRUE(opened.ok()) << opened.status();
  absl::StatusOr<OwnedFd> tree = CloneMountTree(*opened, tmp.path() + "/data");
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_GT(tree->get(), STDERR_FILENO);
  fs::rename(tmp.path() + "/data", tmp.path() + "/data.old");
  fs::create_directory_symlink(tmp.path() + "/secret", tmp.path() + "/data");
  fs::create_directories(tmp.path() + "/target");
  EXPECT_EQ(ReadThroughTree(tree->get(), tmp.path() + "/target", "hello"),
            "checked");
  // Nothing was mounted here: the child's namespace had it.
  EXPECT_TRUE(fs::is_empty(tmp.path() + "/target"));
}

// A registry that has nothing: the image step's tests pull nothing.
class NoImages : public image::ImageSource {
 public:
  absl::StatusOr<image::Manifest> FetchManifest(
      const image::ImageRef&) override {
    return absl::UnavailableError("no registry in this test");
  }
  absl::Status FetchBlob(const image::ImageRef&, const image::Descriptor&,
                         const std::string&,
                         const image::ByteProgress&) override {
    return absl::UnavailableError("no registry in this test");
  }
};

// The image step end to end for a job's mount: the source checked at
// Prepare, swapped for a link to another directory while the image is
// pulled, and what the process attaches at launch is the checked one; a
// source that is a link at Prepare is refused, saying so.
class ImageStepMountTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "container tasks need root";
    node_.name = "h200-0";
    node_.root = tmp_.path() + "/node";
    node_.device_dir = node_.root + "/dev";
    absl::StatusOr<std::unique_ptr<image::ImageStore>> store =
        image::ImageStore::Open({.root = node_.root + "/images"}, &source_);
    ASSERT_TRUE(store.ok()) << store.status();
    node_.images = *std::move(store);
    request_.task_id = "9.0.0";
    request_.argv = {"/bin/cat", "/data/hello"};
    request_.container = ContainerRequest{};
    request_.container->image =
        "127.0.0.1:5000/t/b@sha256:" + std::string(64, 'a');
    request_.container->mounts = {{tmp_.path() + "/data", "/data", true}};
    Write(tmp_.path() + "/data/hello", "checked");
    Write(tmp_.path() + "/secret/hello", "secret");
  }

  TempDir tmp_;
  NoImages source_;
  AgentNode node_;
  LaunchRequest request_;
  CapturedLog log_;
};

TEST_F(ImageStepMountTest, ASourceSwappedForALinkAfterTheCheckIsNotFollowed) {
  std::unique_ptr<const LaunchStep> step = MakeImageStep({});
  LaunchContext ctx{node_, request_, log_.log(), std::nullopt, ""};
  std::string field;
  ASSERT_TRUE(step->Prepare(ctx, &field).ok()) << field;
  ASSERT_TRUE(step->NeedsFetch(ctx));  // not held: it would be pulled now

  // During the pull: the checked directory becomes a link to another.
  fs::rename(tmp_.path() + "/data", tmp_.path() + "/data.old");
  fs::create_directory_symlink(tmp_.path() + "/secret", tmp_.path() + "/data");
  image::ImageHandle pulled;
  pulled.digest = "sha256:" + std::string(64, 'a');
  pulled.rootfs = tmp_.path() + "/image/rootfs";
  pulled.config = tmp_.path() + "/image/config.json";
  ctx.container = std::make_shared<ContainerLaunch>(nullptr, pulled);

  TaskProcess p;
  p.launcher_id = "9.0.0";
  TaskSpec spec;
  spec.task_id = p.launcher_id;
  spec.argv = request_.argv;
  step->Apply(ctx, p, 0, spec);
  ASSERT_TRUE(spec.sandbox.has_value());
  const std::string bundle = BundleDir(node_, p.launcher_id);
  const std::string target = bundle + "/mounts/0";
  const TaskMount* attached = nullptr;
  for (const TaskMount& m : spec.sandbox->mounts) {
    if (m.target == target) attached = &m;
  }
  ASSERT_NE(attached, nullptr) << "no mount of the source in the bundle";
  ASSERT_GE(attached->tree_fd, 0);
  // runc binds the bundle's mount point, never the job's path.
  for (const auto& [path, text] : spec.sandbox->files) {
    if (!absl::EndsWith(path, "/config.json")) continue;
    const nlohmann::json config = nlohmann::json::parse(text);
    bool found = false;
    for (const nlohmann::json& m : config["mounts"]) {
      EXPECT_NE(m["source"], tmp_.path() + "/data");
      if (m["destination"] == "/data") {
        EXPECT_EQ(m["source"], target);
        found = true;
      }
    }
    EXPECT_TRUE(found) << config["mounts"].dump();
  }
  fs::create_directories(target);
  EXPECT_EQ(ReadThroughTree(attached->tree_fd, target, "hello"), "checked");
}

TEST_F(ImageStepMountTest, ASourceThatIsALinkAtTheCheckIsRefused) {
  fs::rename(tmp_.path() + "/data", tmp_.path() + "/data.old");
  fs::create_directory_symlink(tmp_.path() + "/secret", tmp_.path() + "/data");
  std::unique_ptr<const LaunchStep> step = MakeImageStep({});
  LaunchContext ctx{node_, request_, log_.log(), std::nullopt, ""};
  std::string field;
  absl::Status s = step->Prepare(ctx, &field);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(field, "container.mounts[0].source");
  EXPECT_THAT(s.message(), HasSubstr("on node h200-0"));
  EXPECT_THAT(s.message(), HasSubstr(tmp_.path() + "/data is reached through "
                                                   "a symbolic link"));
}

}  // namespace
}  // namespace loom
