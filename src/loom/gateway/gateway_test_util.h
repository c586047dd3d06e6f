#pragma once

// What the gateway's tests share: a tiny HTTP server standing in for a
// replica, one GET, a free loopback port, and polling until a condition
// holds. Header-only; tests only.

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace loom::gateway::testutil {

// A replica: answers every request with its name; "/hold" requests wait
// until `Release()`. Connection: close after each response.
class NameServer {
 public:
  explicit NameServer(std::string name) : name_(std::move(name)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    EXPECT_EQ(::listen(fd_, 128), 0);
    socklen_t len = sizeof(a);
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~NameServer() { Stop(); }
  // Closes the listener (new connections are refused) and ends every
  // connection.
  void Stop() {
    if (stopped_.exchange(true)) return;
    Release();
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    acceptor_.join();
    for (std::thread& t : conns_) t.join();
  }
  std::string address() const { return absl::StrCat("127.0.0.1:", port_); }
  int holding() const { return holding_; }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  void Accept() {
    for (;;) {
      const int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      conns_.emplace_back([this, c] { Serve(c); });
    }
  }
  void Serve(int c) {
    timeval tv{5, 0};
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    std::string in;
    char buf[2048];
    ssize_t n;
    while (in.find("\r\n\r\n") == std::string::npos &&
           (n = ::read(c, buf, sizeof(buf))) > 0) {
      in.append(buf, n);
    }
    if (in.find("\r\n\r\n") != std::string::npos) {  // not a health check
      if (in.rfind("GET /hold ", 0) == 0) {
        std::unique_lock<std::mutex> lock(mu_);
        ++holding_;
        cv_.wait(lock, [this] { return released_; });
        --holding_;
      }
      const std::string out =
          absl::StrCat("HTTP/1.1 200 OK\r\nContent-Length: ", name_.size(),
                       "\r\nConnection: close\r\n\r\n", name_);
      (void)!::write(c, out.data(), out.size());
    }
    ::close(c);
  }

  const std::string name_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stopped_{false};
  std::thread acceptor_;
  std::vector<std::thread> conns_;  // only the acceptor touches it until Stop
  std::mutex mu_;
  std::condition_variable cv_;
  bool released_ = false;
  std::atomic<int> holding_{0};
};

struct HttpAnswer {
  int status = 0;
  std::string body;
};

// One GET through 127.0.0.1:`port`.
inline absl::StatusOr<HttpAnswer> Get(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("connect: ", errno));
  }
  const std::string req = absl::StrCat("GET ", path,
                                       " HTTP/1.1\r\nHost: svc\r\n"
                                       "Connection: close\r\n\r\n");
  (void)!::write(fd, req.data(), req.size());
  std::string in;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0) in.append(buf, n);
  ::close(fd);
  const size_t head_end = in.find("\r\n\r\n");
  if (in.size() < 12 || head_end == std::string::npos) {
    return absl::UnavailableError(absl::StrCat("bad answer '", in, "'"));
  }
  return HttpAnswer{std::atoi(in.c_str() + 9), in.substr(head_end + 4)};
}

inline int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Polls `f` (returning bool) until true or 10 s.
template <typename F>
bool Eventually(F f) {
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!f()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return true;
}

}  // namespace loom::gateway::testutil
