#include "loom/batch/batch_wire.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace loom::batch {

int64_t MonotonicMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}
namespace {

void PutU32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

uint32_t GetU32(std::string_view s, size_t at) {
  auto b = [&](size_t i) {
    return static_cast<uint32_t>(static_cast<uint8_t>(s[at + i]));
  };
  return b(0) << 24 | b(1) << 16 | b(2) << 8 | b(3);
}

std::string Errno(std::string_view what) {
  return absl::StrCat(std::string(what), ": ", std::strerror(errno));
}

absl::StatusOr<sockaddr_storage> Resolve(const std::string& host, int port,
                                         socklen_t* len) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(host.c_str(), service.c_str(), &hints, &res);
      rc != 0 || res == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", host, ": ", gai_strerror(rc)));
  }
  sockaddr_storage addr{};
  std::memcpy(&addr, res->ai_addr, res->ai_addrlen);
  *len = res->ai_addrlen;
  freeaddrinfo(res);
  return addr;
}

absl::StatusOr<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    return absl::InvalidArgumentError(
        absl::StrCat("socket path too long: ", path));
  }
  std::memcpy(addr.sun_path, path.data(), path.size());
  return addr;
}

}  // namespace

std::string EncodeFrame(FrameType type, std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 5);
  PutU32(out, static_cast<uint32_t>(payload.size() + 1));
  out.push_back(static_cast<char>(type));
  out.append(payload);
  return out;
}

std::string EncodeJsonFrame(FrameType type, const nlohmann::json& body) {
  return EncodeFrame(type, body.dump(-1, ' ', false,
                                     nlohmann::json::error_handler_t::replace));
}

std::string EncodeOutput(const OutputChunk& chunk) {
  std::string out;
  out.reserve(chunk.bytes.size() + 9);
  PutU32(out, chunk.step);
  PutU32(out, chunk.procid);
  out.push_back(static_cast<char>(chunk.stream));
  out.append(chunk.bytes);
  return EncodeFrame(FrameType::kOutput, out);
}

absl::StatusOr<OutputChunk> DecodeOutput(std::string_view payload) {
  if (payload.size() < 9) {
    return absl::InvalidArgumentError("output frame shorter than its header");
  }
  OutputChunk c;
  c.step = GetU32(payload, 0);
  c.procid = GetU32(payload, 4);
  c.stream = static_cast<uint8_t>(payload[8]);
  if (c.stream != 1 && c.stream != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("output frame for stream ", c.stream));
  }
  c.bytes = std::string(payload.substr(9));
  return c;
}

absl::StatusOr<nlohmann::json> DecodeJson(const Frame& frame) {
  nlohmann::json j = nlohmann::json::parse(frame.payload, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("frame of type ",
                                                   static_cast<int>(frame.type),
                                                   " is not a JSON object"));
  }
  return j;
}

absl::StatusOr<std::optional<Frame>> FrameReader::Next() {
  if (buffer_.size() - offset_ < 4) return std::nullopt;
  const uint32_t len = GetU32(buffer_, offset_);
  if (len == 0 || len > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "frame of ", len, " bytes (at most ", kMaxFrameBytes, ")"));
  }
  if (buffer_.size() - offset_ - 4 < len) return std::nullopt;
  Frame f;
  f.type = static_cast<FrameType>(buffer_[offset_ + 4]);
  f.payload = buffer_.substr(offset_ + 5, len - 1);
  offset_ += 4 + len;
  if (offset_ == buffer_.size()) {
    buffer_.clear();
    offset_ = 0;
  } else if (offset_ > (size_t{1} << 16)) {
    buffer_.erase(0, offset_);
    offset_ = 0;
  }
  return f;
}

Conn::Conn(int fd) : fd_(fd) {
  const int flags = fcntl(fd_, F_GETFL);
  if (flags >= 0) fcntl(fd_, F_SETFL, flags | O_NONBLOCK);
}

Conn::~Conn() { Close(); }

void Conn::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Conn::Send(std::string frame) {
  if (fd_ < 0) return;
  if (sent_ == out_.size()) {
    out_ = std::move(frame);
    sent_ = 0;
  } else {
    out_.append(frame);
  }
  Flush();
}

void OutputSender::Send(Conn& conn, const OutputChunk& chunk) {
  conn.Flush();
  if (conn.pending() >= backlog_) {
    dropped_ += chunk.bytes.size();
    dropped_total_ += chunk.bytes.size();
    return;
  }
  if (dropped_ > 0) {
    conn.Send(EncodeOutput(
        {chunk.step, chunk.procid, 2,
         absl::StrCat("loom: ", dropped_,
                      " bytes of output dropped: the reader did not keep "
                      "up\n")}));
    dropped_ = 0;
  }
  conn.Send(EncodeOutput(chunk));
}

bool Conn::Flush() {
  while (fd_ >= 0 && sent_ < out_.size()) {
    const ssize_t n =
        ::send(fd_, out_.data() + sent_, out_.size() - sent_, MSG_NOSIGNAL);
    if (n > 0) {
      sent_ += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;
  }
  if (sent_ == out_.size() && sent_ > 0) {
    out_.clear();
    sent_ = 0;
  }
  return fd_ >= 0;
}

bool Conn::Fill() {
  char buf[65536];
  while (fd_ >= 0) {
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n > 0) {
      reader_.Append(std::string_view(buf, static_cast<size_t>(n)));
      if (static_cast<size_t>(n) < sizeof(buf)) return true;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // EOF or an error
  }
  return false;
}

void Conn::Drain(int timeout_ms) {
  const int64_t end = MonotonicMs() + timeout_ms;
  while (fd_ >= 0 && wants_write()) {
    if (!Flush()) return;
    if (!wants_write()) return;
    const int64_t left = end - MonotonicMs();
    if (left <= 0) return;
    pollfd p{fd_, POLLOUT, 0};
    ::poll(&p, 1, static_cast<int>(left));
  }
}

absl::StatusOr<int> ListenTcp(const std::string& host, int port) {
  socklen_t len = 0;
  absl::StatusOr<sockaddr_storage> addr = Resolve(host, port, &len);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&*addr), len) != 0 ||
      ::listen(fd, 64) != 0) {
    const std::string why = Errno(absl::StrCat("listen on ", host, ":", port));
    ::close(fd);
    return absl::UnavailableError(why);
  }
  return fd;
}

absl::StatusOr<int> ConnectTcp(const std::string& host, int port) {
  socklen_t len = 0;
  absl::StatusOr<sockaddr_storage> addr = Resolve(host, port, &len);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(addr->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&*addr), len) != 0) {
    const std::string why = Errno(absl::StrCat("connect to ", host, ":", port));
    ::close(fd);
    return absl::UnavailableError(why);
  }
  return fd;
}

absl::StatusOr<int> ListenUnix(const std::string& path) {
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  ::unlink(path.c_str());
  if (::bind(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0 ||
      ::listen(fd, 64) != 0) {
    const std::string why = Errno(absl::StrCat("listen on ", path));
    ::close(fd);
    return absl::UnavailableError(why);
  }
  return fd;
}

absl::StatusOr<int> ConnectUnix(const std::string& path) {
  absl::StatusOr<sockaddr_un> addr = UnixAddress(path);
  if (!addr.ok()) return addr.status();
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&*addr), sizeof(*addr)) != 0) {
    const std::string why = Errno(absl::StrCat("connect to ", path));
    ::close(fd);
    return absl::UnavailableError(why);
  }
  return fd;
}

absl::StatusOr<int> FreeTcpPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    const std::string why = Errno("bind a free port");
    ::close(fd);
    return absl::UnavailableError(why);
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

absl::StatusOr<Frame> ReadFrameBlocking(int fd, FrameReader& reader,
                                        int timeout_ms) {
  const int64_t end = MonotonicMs() + timeout_ms;
  while (true) {
    absl::StatusOr<std::optional<Frame>> f = reader.Next();
    if (!f.ok()) return f.status();
    if (f->has_value()) return **std::move(f);
    const int64_t left = end - MonotonicMs();
    if (left <= 0) return absl::DeadlineExceededError("no answer in time");
    pollfd p{fd, POLLIN, 0};
    const int rc = ::poll(&p, 1, static_cast<int>(left));
    if (rc < 0 && errno == EINTR) continue;
    if (rc <= 0) continue;
    char buf[65536];
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return absl::UnavailableError("the peer closed the connection");
    reader.Append(std::string_view(buf, static_cast<size_t>(n)));
  }
}

absl::Status WriteAllBlocking(int fd, std::string_view data, int timeout_ms) {
  const int64_t end = MonotonicMs() + timeout_ms;
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n =
        ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      const int64_t left = end - MonotonicMs();
      if (left <= 0) return absl::DeadlineExceededError("write timed out");
      pollfd p{fd, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(left));
      continue;
    }
    return absl::UnavailableError(Errno("write"));
  }
  return absl::OkStatus();
}

}  // namespace loom::batch
