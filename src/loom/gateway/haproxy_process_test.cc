#include "loom/gateway/haproxy_process.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/gateway/child_process.h"

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
  o.run_dir = "/tmp";
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
