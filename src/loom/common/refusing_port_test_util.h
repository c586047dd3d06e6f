// For tests: a loopback port on which connections are refused, for as long
// as the object lives. The socket stays bound and never listens, so the
// kernel answers each connect with a reset, and no other process (another
// test of a parallel ctest run) can bind the port and leave a connection
// hanging. A port bound and closed at once, as tests used to take, could be
// handed out again to a listener that accepts and never answers.

#ifndef LOOM_COMMON_REFUSING_PORT_TEST_UTIL_H_
#define LOOM_COMMON_REFUSING_PORT_TEST_UTIL_H_

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace loom::testing {

class RefusingPort {
 public:
  RefusingPort() {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 ||
        ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      return;
    }
    socklen_t len = sizeof(addr);
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~RefusingPort() {
    if (fd_ >= 0) ::close(fd_);
  }
  RefusingPort(const RefusingPort&) = delete;
  RefusingPort& operator=(const RefusingPort&) = delete;

  // 0 when no port could be bound.
  int port() const { return port_; }
  std::string url() const {
    return "http://127.0.0.1:" + std::to_string(port_);
  }

 private:
  int fd_ = -1;
  int port_ = 0;
};

}  // namespace loom::testing

#endif  // LOOM_COMMON_REFUSING_PORT_TEST_UTIL_H_
