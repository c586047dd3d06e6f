#include "loom/server/agent_probe.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {
namespace {

// Waits until `fd` is ready for `events` or `deadline` passed; false on a
// timeout or an error.
bool WaitFor(int fd, short events, absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return false;
    pollfd p{fd, events, 0};
    const int r =
        poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r > 0) return true;
    if (r == 0) return false;
    if (errno != EINTR) return false;
  }
}

// One connect attempt to `ai`: kAnswered once an HTTP answer starts.
ProbeResult ProbeOne(const addrinfo& ai, const std::string& host,
                     absl::Time deadline) {
  const int fd =
      socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
             ai.ai_protocol);
  if (fd < 0) return ProbeResult::kNoAnswer;
  ProbeResult result = ProbeResult::kNoAnswer;
  int err = 0;
  if (connect(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      err = ETIMEDOUT;
      if (WaitFor(fd, POLLOUT, deadline)) {
        socklen_t len = sizeof(err);
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = EIO;
      }
    }
  }
  if (err == ECONNREFUSED) {
    result = ProbeResult::kRefused;
  } else if (err == 0) {
    const std::string request =
        absl::StrCat("GET /healthz HTTP/1.1\r\nHost: ", host,
                     "\r\nConnection: close\r\n\r\n");
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(request.size()) &&
        WaitFor(fd, POLLIN, deadline)) {
      char buf[5] = {};
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n > 0) result = ProbeResult::kAnswered;
    }
  }
  close(fd);
  return result;
}

}  // namespace

ProbeResult ProbeAgent(const std::string& address, absl::Duration deadline) {
  const absl::Time until = absl::Now() + deadline;
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon + 1 >= address.size()) {
    return ProbeResult::kNoAnswer;
  }
  std::string host = address.substr(0, colon);
  const std::string port = address.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &found) != 0 ||
      found == nullptr) {
    return ProbeResult::kNoAnswer;
  }
  // Refused only when every address of the name refused.
  ProbeResult result = ProbeResult::kRefused;
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    const ProbeResult one = ProbeOne(*ai, host, until);
    if (one == ProbeResult::kAnswered) {
      result = one;
      break;
    }
    if (one == ProbeResult::kNoAnswer) result = one;
  }
  freeaddrinfo(found);
  return result;
}

}  // namespace loom
