#include "loom/gateway/access_log_reader.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "loom/gateway/access_log.h"

namespace loom::gateway {

absl::Status AccessLogReader::Start(const std::string& path) {
  if (fd_ >= 0) return absl::FailedPreconditionError("already started");
  sockaddr_un a{};
  if (path.empty() || path.size() >= sizeof(a.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("access log socket '", path, "': not a socket path"));
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    return absl::InternalError(absl::StrCat("socket: ", std::strerror(errno)));
  }
  a.sun_family = AF_UNIX;
  std::memcpy(a.sun_path, path.data(), path.size());
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    const int err = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(
        "access log socket ", path, ": bind: ", std::strerror(err)));
  }
  // As much queue as the kernel grants (net.core.rmem_max): lines are
  // dropped by HAProxy, not waited for, when it is full.
  const int want = 8 << 20;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof(want));
  fd_ = fd;
  path_ = path;
  stop_ = false;
  reader_ = std::thread([this] { Read(); });
  return absl::OkStatus();
}

void AccessLogReader::Stop() {
  if (fd_ < 0) return;
  stop_ = true;
  if (reader_.joinable()) reader_.join();
  ::close(fd_);
  ::unlink(path_.c_str());
  fd_ = -1;
}

void AccessLogReader::Read() {
  char buf[4096];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
    if (n <= 0) continue;
    absl::StatusOr<AccessLogEntry> e =
        ParseAccessLogLine(std::string_view(buf, static_cast<size_t>(n)));
    if (!e.ok()) {
      ++skipped_;
      continue;
    }
    ++lines_;
    absl::MutexLock lock(&mu_);
    window_.Add(*e, absl::Now());
  }
}

std::optional<double> AccessLogReader::P95Ms(const std::string& backend,
                                             absl::Time now) {
  absl::MutexLock lock(&mu_);
  return window_.P95Ms(backend, now);
}

LatencyHistogram AccessLogReader::Histogram(const std::string& backend) {
  absl::MutexLock lock(&mu_);
  return window_.Histogram(backend);
}

}  // namespace loom::gateway
