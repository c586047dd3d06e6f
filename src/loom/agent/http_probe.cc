#include "loom/agent/http_probe.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/agent/agent_address.h"

namespace loom {
namespace {

// Bytes of an answer read at most (the status line is what counts).
constexpr size_t kMaxProbeAnswer = 64 * 1024;
// How often a waiting probe looks at its cancel flag.
constexpr absl::Duration kProbeCancelCheck = absl::Milliseconds(100);

class ProbeSocket {
 public:
  explicit ProbeSocket(int fd) : fd_(fd) {}
  ~ProbeSocket() {
    if (fd_ >= 0) ::close(fd_);
  }
  ProbeSocket(const ProbeSocket&) = delete;
  ProbeSocket& operator=(const ProbeSocket&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

enum class ProbeWait { kReady, kTimedOut, kCancelled, kError };

// Waits until `fd` has `events`, the deadline passes, or `cancel` holds.
ProbeWait WaitForSocket(int fd, short events, absl::Time deadline,
                        const std::atomic<bool>* cancel) {
  while (true) {
    if (cancel != nullptr && cancel->load()) return ProbeWait::kCancelled;
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return ProbeWait::kTimedOut;
    const absl::Duration slice = std::min(left, kProbeCancelCheck);
    pollfd p = {fd, events, 0};
    const int n =
        ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(slice)) + 1);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ProbeWait::kError;
    if (n > 0) return ProbeWait::kReady;
  }
}

}  // namespace

absl::StatusOr<TcpAddress> ResolveTcpAddress(const std::string& host,
                                             int port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string service = absl::StrCat(port);
  const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found);
  if (rc != 0 || found == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve ", host, ": ",
                     rc != 0 ? gai_strerror(rc) : "no address"));
  }
  TcpAddress a;
  std::memcpy(&a.addr, found->ai_addr,
              std::min<size_t>(found->ai_addrlen, sizeof(a.addr)));
  a.len = static_cast<socklen_t>(
      std::min<size_t>(found->ai_addrlen, sizeof(a.addr)));
  a.family = found->ai_family;
  ::freeaddrinfo(found);
  return a;
}

absl::Status HttpGetProbe(const std::string& host, int port,
                          const std::string& path, absl::Duration timeout,
                          const std::atomic<bool>* cancel) {
  const absl::Time deadline = absl::Now() + timeout;
  const std::string what = absl::StrCat("GET ", path, ": ");
  const std::string target = HostPort(host, port);
  auto failed = [&](const std::string& why) {
    return absl::UnavailableError(absl::StrCat(what, why));
  };
  auto timed_out = [&](const char* waiting_for) {
    return failed(absl::StrCat(
        waiting_for, " within ",
        absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1)))));
  };
  auto cancelled = [&] {
    return absl::CancelledError(absl::StrCat(what, "cancelled"));
  };
  absl::StatusOr<TcpAddress> address = ResolveTcpAddress(host, port);
  if (!address.ok()) {
    return failed(std::string(address.status().message()));
  }
  ProbeSocket sock(
      ::socket(address->family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (sock.fd() < 0) return failed(absl::StrCat("socket: ", strerror(errno)));
  if (::connect(sock.fd(), reinterpret_cast<const sockaddr*>(&address->addr),
                address->len) != 0) {
    if (errno != EINPROGRESS) {
      return failed(absl::StrCat("connect to ", target, ": ", strerror(errno)));
    }
    switch (WaitForSocket(sock.fd(), POLLOUT, deadline, cancel)) {
      case ProbeWait::kReady:
        break;
      case ProbeWait::kTimedOut:
        return failed(absl::StrCat(
            "connect to ", target, ": no connection within ",
            absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1)))));
      case ProbeWait::kCancelled:
        return cancelled();
      case ProbeWait::kError:
        return failed(absl::StrCat("poll: ", strerror(errno)));
    }
    int error = 0;
    socklen_t len = sizeof(error);
    if (::getsockopt(sock.fd(), SOL_SOCKET, SO_ERROR, &error, &len) != 0) {
      error = errno;
    }
    if (error != 0) {
      return failed(absl::StrCat("connect to ", target, ": ", strerror(error)));
    }
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: ", target,
                   "\r\nUser-Agent: loom-agent-probe\r\nAccept: */*\r\n"
                   "Connection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(sock.fd(), request.data() + sent,
                             request.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      switch (WaitForSocket(sock.fd(), POLLOUT, deadline, cancel)) {
        case ProbeWait::kReady:
          continue;
        case ProbeWait::kTimedOut:
          return timed_out("request not sent");
        case ProbeWait::kCancelled:
          return cancelled();
        case ProbeWait::kError:
          return failed(absl::StrCat("poll: ", strerror(errno)));
      }
    }
    return failed(absl::StrCat("send: ", strerror(errno)));
  }
  std::string answer;  // up to the status line
  size_t received = 0;
  int status = 0;
  char buf[4096];
  while (received < kMaxProbeAnswer) {
    const ssize_t n = ::recv(sock.fd(), buf, sizeof(buf), 0);
    if (n > 0) {
      received += static_cast<size_t>(n);
      if (status == 0) {
        answer.append(buf, static_cast<size_t>(n));
        const size_t eol = answer.find("\r\n");
        if (eol != std::string::npos) {
          // "HTTP/1.1 200 OK"
          const std::string line = answer.substr(0, eol);
          int code = 0;
          if (line.rfind("HTTP/1.", 0) != 0 || line.size() < 12 ||
              line[8] != ' ' || !absl::SimpleAtoi(line.substr(9, 3), &code) ||
              code < 100 || code > 599) {
            return failed(absl::StrCat("not an HTTP answer: \"",
                                       line.substr(0, 40), "\""));
          }
          status = code;
        } else if (answer.size() > 1024) {
          return failed("not an HTTP answer (no status line)");
        }
      }
      continue;
    }
    if (n == 0) break;  // the server closed: the answer is complete
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      const ProbeWait w = WaitForSocket(sock.fd(), POLLIN, deadline, cancel);
      if (w == ProbeWait::kReady) continue;
      if (w == ProbeWait::kCancelled) return cancelled();
      if (status != 0) break;  // the status is in; the rest does not matter
      if (w == ProbeWait::kTimedOut) return timed_out("no answer");
      return failed(absl::StrCat("poll: ", strerror(errno)));
    }
    if (status != 0) break;
    return failed(absl::StrCat("receive: ", strerror(errno)));
  }
  if (status == 0) {
    return failed(answer.empty() ? "the connection closed without an answer"
                                 : "the connection closed in the status line");
  }
  if (status < 200 || status > 399) {
    return failed(absl::StrCat("answered ", status));
  }
  return absl::OkStatus();
}

}  // namespace loom
