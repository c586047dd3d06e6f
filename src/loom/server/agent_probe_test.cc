#include "loom/server/agent_probe.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

// A listening socket on 127.0.0.1 and a free port: `port` is its port.
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(listen(fd, 8), 0);
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { close(fd); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

TEST(AgentProbeTest, AnAnswerOfAnyKindMeansTheAgentLives) {
  Listener l;
  std::thread server([&] {
    const int c = accept(l.fd, nullptr, nullptr);
    char buf[256];
    (void)!read(c, buf, sizeof(buf));
    const char reply[] =
        "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\n\r\n";
    (void)!write(c, reply, sizeof(reply) - 1);
    close(c);
  });
  EXPECT_EQ(ProbeAgent(l.address(), absl::Seconds(2)), ProbeResult::kAnswered);
  server.join();
}

TEST(AgentProbeTest, ARefusedConnectionMeansNoAgent) {
  int port;
  {
    Listener l;  // a port that was free a moment ago, closed again
    port = l.port;
  }
  EXPECT_EQ(ProbeAgent("127.0.0.1:" + std::to_string(port), absl::Seconds(1)),
            ProbeResult::kRefused);
}

TEST(AgentProbeTest, SilenceIsNoAnswerNotDeath) {
  // Connected (the kernel accepts it) but nothing answers: a paused or
  // busy agent, not a dead one.
  Listener l;
  const absl::Time start = absl::Now();
  EXPECT_EQ(ProbeAgent(l.address(), absl::Milliseconds(200)),
            ProbeResult::kNoAnswer);
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
}

TEST(AgentProbeTest, MalformedAddressesAreNoAnswer) {
  EXPECT_EQ(ProbeAgent("no-port", absl::Milliseconds(100)),
            ProbeResult::kNoAnswer);
  EXPECT_EQ(ProbeAgent("127.0.0.1:", absl::Milliseconds(100)),
            ProbeResult::kNoAnswer);
}

}  // namespace
}  // namespace loom
