#include "loom/gateway/haproxy_process.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/gateway/child_process.h"
#include "loom/gateway/gateway_test_util.h"

namespace loom::gateway {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

TEST(ParseShowProcTest, MasterWorkersAndOldWorkers) {
  // As HAProxy 2.6.12 prints it, with an old worker still finishing.
  constexpr char kText[] =
      "#<PID>          <type>          <reloads>       <uptime>        "
      "<version>      \n"
      "20705           master          2 [failed: 1]   0d00h10m28s     "
      "2.6.12-1+deb12u4\n"
      "# workers\n"
      "24874           worker          0               0d00h00m01s     "
      "2.6.12-1+deb12u4\n"
      "# old workers\n"
      "20710           worker          1               0d00h10m28s     "
      "2.6.12-1+deb12u4\n"
      "# programs\n\n";
  absl::StatusOr<MasterProcs> p = ParseShowProc(kText);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->master_pid, 20705);
  EXPECT_EQ(p->reloads, 2);
  EXPECT_EQ(p->failed_reloads, 1);
  EXPECT_THAT(p->workers, ElementsAre(24874));
  EXPECT_THAT(p->old_workers, ElementsAre(20710));
}

TEST(ParseShowProcTest, FreshMaster) {
  absl::StatusOr<MasterProcs> p = ParseShowProc(
      "#<PID> <type> <reloads> <uptime> <version>\n"
      "7 master 0 [failed: 0] 0d00h00m01s 2.6.12\n# workers\n"
      "8 worker 0 0d00h00m01s 2.6.12\n# programs\n");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->failed_reloads, 0);
  EXPECT_THAT(p->workers, ElementsAre(8));
  EXPECT_THAT(p->old_workers, IsEmpty());
}

TEST(ParseShowProcTest, NoMasterIsAnError) {
  EXPECT_FALSE(ParseShowProc("Unknown command.\n").ok());
  EXPECT_FALSE(ParseShowProc("").ok());
}

TEST(HaproxyProcessTest, MissingBinaryIsAClearError) {
  HaproxyProcessOptions o;
  o.binary = "/nonexistent/haproxy";
  HaproxyProcess p(o);
  HaproxyConfig c;
  c.stats_socket = "/tmp/loom-gw-unused.sock";
  const absl::Status s = p.Start(c);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent/haproxy"));
  EXPECT_FALSE(p.running());
  EXPECT_TRUE(p.Stop().ok());
  EXPECT_EQ(p.Reload(c).code(), absl::StatusCode::kFailedPrecondition);
}

// HaproxyProcess::Start on a run directory with symlinks planted in it,
// pointing at files outside. `/bin/echo` stands in for haproxy: `-c`
// passes, and the "master" prints its arguments to haproxy.log and exits.
class PlantedRunDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/loom-gw-planted-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    ASSERT_EQ(::mkdir((base_ + "/run").c_str(), 0700), 0);
    absl::StatusOr<std::shared_ptr<const RunDir>> d =
        RunDir::Open(base_ + "/run", /*create=*/false);
    ASSERT_TRUE(d.ok()) << d.status();
    dir_ = *d;
    for (const char* f : {"victim", "victim2", "victim3"}) {
      std::ofstream(base_ + "/" + f) << "root's " << f << "\n";
    }
    HaproxyProcessOptions o;
    o.binary = "/bin/echo";
    o.run_dir = dir_;
    o.ready_timeout = absl::Seconds(2);
    process_ = std::make_unique<HaproxyProcess>(o);
    config_.stats_socket = dir_->PathOf("admin.sock");
    ServiceFrontend f;
    f.name = "alpha";
    f.bind_host = "127.0.0.1";
    f.port = testutil::FreePort();
    config_.services = {f};
  }
  void TearDown() override {
    process_.reset();
    std::filesystem::remove_all(base_);
  }
  void Plant(const std::string& name, const std::string& target) {
    ASSERT_EQ(
        ::symlink((base_ + "/" + target).c_str(), dir_->PathOf(name).c_str()),
        0);
  }
  std::string Victim(const std::string& name) const {
    std::ifstream in(base_ + "/" + name);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }

  std::string base_;
  std::shared_ptr<const RunDir> dir_;
  std::unique_ptr<HaproxyProcess> process_;
  HaproxyConfig config_;
};

TEST_F(PlantedRunDirTest, ConfigFilesAreNotWrittenThroughSymlinks) {
  Plant("haproxy.cfg.tmp", "victim");
  Plant("haproxy.cfg.next.tmp", "victim2");
  Plant("haproxy.cfg", "victim3");
  const absl::Status s = process_->Start(config_);
  EXPECT_FALSE(s.ok()) << "echo is no haproxy";
  EXPECT_EQ(Victim("victim"), "root's victim\n");
  EXPECT_EQ(Victim("victim2"), "root's victim2\n");
  EXPECT_EQ(Victim("victim3"), "root's victim3\n");
  struct stat st {};
  ASSERT_EQ(::lstat(process_->config_path().c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the symlink was replaced";
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  // And the "master" ran with its output in our own log.
  EXPECT_THAT(dir_->Tail("haproxy.log", 4096), HasSubstr("-W -S"));
}

TEST_F(PlantedRunDirTest, ALogThatIsASymlinkStopsTheStart) {
  Plant("haproxy.log", "victim");
  const absl::Status s = process_->Start(config_);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("haproxy.log is a symlink; not writing through it"));
  EXPECT_FALSE(process_->running());
  EXPECT_EQ(Victim("victim"), "root's victim\n");
  EXPECT_FALSE(dir_->Exists("haproxy.cfg")) << "nothing written";
}

TEST_F(PlantedRunDirTest, AStatsSocketOutsideTheRunDirIsRefused) {
  config_.stats_socket = base_ + "/admin.sock";
  const absl::Status s = process_->Start(config_);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("is not in the run directory"));
}

TEST(ChildProcessTest, RunCommandCapturesOutputAndStatus) {
  absl::StatusOr<CommandResult> r = RunCommand(
      {"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->succeeded());
  EXPECT_EQ(DescribeWaitStatus(r->wait_status), "exited with status 3");
  EXPECT_THAT(r->output, HasSubstr("out\n"));
  EXPECT_THAT(r->output, HasSubstr("err\n"));
}

TEST(ChildProcessTest, RunCommandKillsWhatOverstays) {
  const absl::Time start = absl::Now();
  absl::StatusOr<CommandResult> r =
      RunCommand({"/bin/sleep", "30"}, absl::Milliseconds(200));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(ChildProcessTest, ExecFailureIs127) {
  absl::StatusOr<CommandResult> r =
      RunCommand({"/nonexistent/prog"}, absl::Seconds(10));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(DescribeWaitStatus(r->wait_status), "exited with status 127");
  EXPECT_THAT(r->output, HasSubstr("exec failed"));
}

}  // namespace
}  // namespace loom::gateway
