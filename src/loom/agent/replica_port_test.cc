// The ports of service replicas (replica_port.h): unique, never one that is
// bound already, given back, held again after a restart; the range flag.

#include "loom/agent/replica_port.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <set>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "loom/agent/agent_test_util.h"
#include "loom/agent/free_ports_test_util.h"
#include "loom/agent/http_probe.h"
#include "loom/agent/launch_request.h"
#include "loom/agent/node_table.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

// A listening socket on 127.0.0.1:`port` (0: any), closed at the end.
class Listener {
 public:
  explicit Listener(int port = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a = {};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    bound_ = ::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
             ::listen(fd_, 4) == 0;
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd_); }
  bool bound() const { return bound_; }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  bool bound_ = false;
  int port_ = 0;
};

// `n` ports free on 127.0.0.1, for tests that need real free ports
// (free_ports_test_util.h).
PortRange FreshRange(int n) { return agent_testing::FreePortRange(n); }

TEST(ReplicaPortTest, ParsesTheRangeFlag) {
  absl::StatusOr<PortRange> r = ParsePortRange("20000-29999");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 20000);
  EXPECT_EQ(r->last, 29999);
  r = ParsePortRange("8080");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->first, 8080);
  EXPECT_EQ(r->last, 8080);
  for (const char* bad : {"", "-", "0-10", "10-5", "1-65536", "a-b", "1-2-3",
                          "20000-", "1.5-2"}) {
    absl::StatusOr<PortRange> p = ParsePortRange(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_THAT(std::string(p.status().message()), HasSubstr("FIRST-LAST"));
    }
  }
}

TEST(ReplicaPortTest, HandsOutUniquePortsAndSkipsBoundOnes) {
  Listener taken;
  ASSERT_TRUE(taken.bound());
  EXPECT_FALSE(PortBindable("127.0.0.1", taken.port()));
  // The range: the taken port and the next 3 (which may be taken by others
  // too: the test only counts on what it knows).
  const int first = taken.port() <= 65532 ? taken.port() : 65532;
  ReplicaPortPool pool("127.0.0.1", {first, first + 3});
  std::set<int> got;
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<int> p = pool.Allocate("h200-0/" + std::to_string(i));
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), absl::StatusCode::kUnavailable);
      break;
    }
    EXPECT_NE(*p, taken.port());
    EXPECT_GE(*p, first);
    EXPECT_LE(*p, first + 3);
    EXPECT_TRUE(got.insert(*p).second) << *p << " handed out twice";
  }
  EXPECT_LE(got.size(), 3u);
  EXPECT_EQ(pool.held(), got.size());
  absl::StatusOr<int> none = pool.Allocate("h200-0/x");
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(none.status().message()),
              HasSubstr("no free port in"));
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("127.0.0.1"));
}

TEST(ReplicaPortTest, ReleasedPortsComeBackAndOnlyTheirOwnerReleases) {
  const PortRange range = FreshRange(2);
  ReplicaPortPool pool("127.0.0.1", range);
  absl::StatusOr<int> a = pool.Allocate("n/a");
  absl::StatusOr<int> b = pool.Allocate("n/b");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(pool.Allocate("n/c").ok());
  pool.Release(*a, "n/b");  // not b's port: nothing happens
  EXPECT_EQ(pool.Holder(*a), "n/a");
  pool.Release(*a, "n/a");
  EXPECT_EQ(pool.Holder(*a), "");
  absl::StatusOr<int> c = pool.Allocate("n/c");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(*c, *a);
  EXPECT_EQ(pool.Holder(*c), "n/c");
}

TEST(ReplicaPortTest, HoldsARecoveredTasksPortWithoutBindingIt) {
  Listener task;  // the recovered task has its port bound
  ASSERT_TRUE(task.bound());
  ReplicaPortPool pool("127.0.0.1", {task.port(), task.port()});
  EXPECT_TRUE(pool.Hold(task.port(), "n/1"));
  EXPECT_TRUE(pool.Hold(task.port(), "n/1"));   // again: still its own
  EXPECT_FALSE(pool.Hold(task.port(), "n/2"));  // another task's
  EXPECT_EQ(pool.Holder(task.port()), "n/1");
  EXPECT_TRUE(pool.Hold(1, "n/3"));  // outside the range: held all the same
  EXPECT_EQ(pool.held(), 2u);
}

TEST(ReplicaPortTest, ChecksTheAgentsOwnAddress) {
  // A port bound on 127.0.0.1 only is still free on 127.0.0.2 (emulated
  // nodes each have a loopback address of their own).
  Listener taken;
  ASSERT_TRUE(taken.bound());
  EXPECT_FALSE(PortBindable("127.0.0.1", taken.port()));
  EXPECT_TRUE(PortBindable("127.0.0.2", taken.port()));
}

TEST(ReplicaPortTest, TheStepSetsPortAndHostOverTheRequestsEnv) {
  agent_testing::TempDir dir;
  agent_testing::CapturedLog log;
  std::unique_ptr<NodeTable> nodes =
      agent_testing::FakeNodes(dir.path(), {"h200-0"}, log.log());
  ASSERT_NE(nodes, nullptr);
  LaunchRequest r;
  r.task_id = "5.0.0";
  r.argv = {"serve"};
  r.env = {{"PORT", "80"}, {"OTHER", "1"}};
  LaunchContext ctx{*nodes->nodes().front(), r, log.log(), std::nullopt, ""};
  std::unique_ptr<const LaunchStep> step = MakeReplicaPortStep();
  EXPECT_EQ(step->name(), "port");
  TaskSpec plain;
  plain.env = r.env;
  step->Apply(ctx, TaskProcess(), 0, plain);  // no port: nothing
  EXPECT_EQ(plain.env, r.env);
  ctx.port = 20005;
  ctx.port_host = "127.0.0.5";
  TaskSpec spec;
  spec.env = r.env;
  step->Apply(ctx, TaskProcess(), 0, spec);
  EXPECT_EQ(spec.env["PORT"], "20005");
  EXPECT_EQ(spec.env["LOOM_PORT"], "20005");
  EXPECT_EQ(spec.env["LOOM_HOST"], "127.0.0.5");
  EXPECT_EQ(spec.env["OTHER"], "1");
}

}  // namespace
}  // namespace loom
