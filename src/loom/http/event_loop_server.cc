#include "loom/http/event_loop_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace loom::http {
namespace {

constexpr uint64_t kListenId = 0;
constexpr uint64_t kWakeId = 1;
// Bytes read ahead of the request being handled (pipelining) before the
// loop stops reading a connection.
constexpr size_t kReadAhead = 64 << 10;

int64_t NowMs() { return absl::ToUnixMillis(absl::Now()); }

int64_t Ms(absl::Duration d) { return absl::ToInt64Milliseconds(d); }

std::string PeerAddress(const sockaddr_storage& ss) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    ::inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    ::inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

struct EventLoopServer::Conn {
  enum class Phase {
    kHandshake,   // TLS handshake
    kIdle,        // between requests
    kReading,     // a request partly read
    kWaiting,     // the handler runs
    kResponding,  // a response is being sent; then the next request
    kStreaming,   // a streamed response
    kDraining,    // the last response is being sent; then kLinger
    kLinger,      // write side shut; reading and dropping until EOF
  };
  uint64_t id = 0;
  std::unique_ptr<Transport> tx;
  std::string address;
  Phase phase = Phase::kIdle;
  bool closed = false;
  bool peer_eof = false;
  bool close_after = false;  // of the response in progress
  bool continue_sent = false;
  std::string in;
  RequestParser parser;
  std::string out;
  size_t out_off = 0;
  int64_t deadline_ms = 0;  // of the current phase; 0: none
  int64_t request_start_ms = 0;
  int64_t write_progress_ms = 0;  // last time bytes went out (or 0)
  // Streaming.
  std::string principal;
  std::shared_ptr<StreamSource> stream;
  bool polling = false;
  int64_t next_poll_ms = 0;
};

struct EventLoopServer::Completion {
  uint64_t conn = 0;
  bool is_stream = false;
  HttpResponse response;  // !is_stream
  StreamChunk chunk;      // is_stream
  std::string principal;
};

EventLoopServer::EventLoopServer(EventLoopServerOptions options,
                                 Handler handler, Classifier classifier)
    : options_(std::move(options)),
      handler_(std::move(handler)),
      classifier_(std::move(classifier)) {}

EventLoopServer::~EventLoopServer() { Stop(); }

absl::StatusOr<int> EventLoopServer::Start() {
  if (!options_.tls_cert.empty() || !options_.tls_key.empty()) {
    absl::StatusOr<std::unique_ptr<TlsContext>> tls =
        TlsContext::Create(options_.tls_cert, options_.tls_key);
    if (!tls.ok()) return tls.status();
    tls_ = *std::move(tls);
  }
  // As many descriptors as the hard limit allows: each connection is one,
  // and idle ones are cheap here (nginx's worker_rlimit_nofile).
  if (rlimit rl{};
      ::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(options_.port);
  if (int e =
          ::getaddrinfo(options_.host.c_str(), port.c_str(), &hints, &found);
      e != 0) {
    return absl::UnavailableError(absl::StrCat(
        "cannot listen on ", options_.host, ": ", ::gai_strerror(e)));
  }
  std::string why = "no address";
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd = ::socket(a->ai_family,
                            a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 1024) == 0) {
      listen_fd_ = fd;
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(found);
  if (listen_fd_ < 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ",
                                               options_.host, ":",
                                               options_.port, " (", why, ")"));
  }
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      bound.ss_family == AF_INET6
          ? ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port)
          : ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);

  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  wake_fd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, listen_fd_, &ev);
  ev.data.u64 = kWakeId;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &ev);

  priority_pool_ = std::make_unique<FairWorkPool>(FairWorkPool::Options{
      .threads = options_.priority_threads,
      .max_running_per_key = 0,
      .max_queued_per_key = options_.max_priority_queued,
      .max_queued = static_cast<size_t>(options_.max_priority_queued)});
  user_pool_ = std::make_unique<FairWorkPool>(FairWorkPool::Options{
      .threads = options_.user_threads,
      .max_running_per_key = options_.max_running_per_principal,
      .max_queued_per_key = options_.max_queued_per_principal});
  stream_pool_ = std::make_unique<FairWorkPool>(
      FairWorkPool::Options{.threads = options_.stream_threads,
                            .max_running_per_key = 1,
                            .max_queued_per_key = options_.max_streams});
  started_ = true;
  loop_ = std::thread([this] { Loop(); });
  return bound_port;
}

void EventLoopServer::Stop() {
  if (!started_ || stopping_.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof(one));
  if (loop_.joinable()) loop_.join();
  // Workers may still post completions; nothing reads them any more.
  priority_pool_->Stop();
  user_pool_->Stop();
  stream_pool_->Stop();
  conns_.clear();
  ::close(listen_fd_);
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

EventLoopServerStats EventLoopServer::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  return stats_;
}

void EventLoopServer::Post(Completion done) {
  {
    std::lock_guard<std::mutex> lock(done_mu_);
    done_.push_back(std::move(done));
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t w = ::write(wake_fd_, &one, sizeof(one));
}

void EventLoopServer::Loop() {
  std::vector<epoll_event> events(256);
  int64_t last_sweep = 0;
  while (!stopping_) {
    const int n = ::epoll_wait(epoll_fd_, events.data(),
                               static_cast<int>(events.size()), 50);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        Accept();
      } else if (id == kWakeId) {
        uint64_t v;
        while (::read(wake_fd_, &v, sizeof(v)) > 0) {
        }
      } else if (auto it = conns_.find(id); it != conns_.end()) {
        Service(*it->second);
      }
    }
    std::vector<Completion> done;
    {
      std::lock_guard<std::mutex> lock(done_mu_);
      done.swap(done_);
    }
    for (Completion& d : done) Complete(std::move(d));
    const int64_t now = NowMs();
    if (now - last_sweep >= 50) {
      last_sweep = now;
      Sweep();
    }
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->second->closed) {
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
}

void EventLoopServer::Accept() {
  while (true) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len,
                             SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
          errno == ENOMEM) {
        // Out of descriptors: the pending connection stays in the backlog
        // and the listener stays readable, so stop watching it for a
        // moment instead of spinning (`Sweep` watches it again).
        epoll_event ev{};
        ev.data.u64 = kListenId;
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
        accept_paused_until_ms_ = NowMs() + 100;
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.connections_refused;
      }
      return;  // EAGAIN
    }
    const std::string address = PeerAddress(ss);
    int& from_here = per_address_[address];
    if (static_cast<int>(conns_.size()) >= options_.max_connections ||
        from_here >= options_.max_connections_per_address) {
      ::close(fd);
      if (from_here == 0) per_address_.erase(address);
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.connections_refused;
      continue;
    }
    ++from_here;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->id = next_id_++;
    c->address = address;
    c->parser = RequestParser(options_.parser);
    c->tx = tls_ != nullptr ? tls_->Wrap(fd) : MakePlainTransport(fd);
    if (c->tx == nullptr) {
      if (--from_here == 0) per_address_.erase(address);
      continue;
    }
    c->phase = tls_ != nullptr ? Conn::Phase::kHandshake : Conn::Phase::kIdle;
    // The handshake has the head's deadline; an idle connection its own.
    c->deadline_ms = NowMs() + Ms(tls_ != nullptr ? options_.head_timeout
                                                  : options_.idle_timeout);
    epoll_event ev{};
    ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
    ev.data.u64 = c->id;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev);
    Conn& ref = *c;
    conns_[c->id] = std::move(c);
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.connections_accepted;
      ++stats_.connections_open;
    }
    Service(ref);
  }
}

void EventLoopServer::Service(Conn& c) {
  if (c.closed) return;
  if (c.phase == Conn::Phase::kHandshake) {
    const Transport::Io r = c.tx->Handshake();
    if (r == Transport::Io::kAgain) return;
    if (r != Transport::Io::kOk) return Close(c);
    c.phase = Conn::Phase::kIdle;
    c.deadline_ms = NowMs() + Ms(options_.idle_timeout);
  }
  if (!Flush(c)) return;
  if (!ReadSome(c)) return;
  Advance(c);
}

bool EventLoopServer::ReadSome(Conn& c) {
  char buf[16 << 10];
  while (!c.peer_eof) {
    const bool lingering = c.phase == Conn::Phase::kLinger;
    // Parsing phases read what the parser may need; others read ahead a
    // little (to see the client go away), then leave the rest in the
    // socket until the response is out.
    const size_t cap =
        c.phase == Conn::Phase::kIdle || c.phase == Conn::Phase::kReading
            ? options_.parser.max_head + options_.parser.max_body + kReadAhead
            : kReadAhead;
    if (!lingering && c.in.size() >= cap) return true;
    size_t n = 0;
    const Transport::Io r = c.tx->Read(buf, sizeof(buf), &n);
    if (r == Transport::Io::kAgain) return true;
    if (r == Transport::Io::kError) {
      Close(c);
      return false;
    }
    if (r == Transport::Io::kEof) {
      c.peer_eof = true;
      // A client that half-closes after its request still gets the
      // answer; one that goes away in the middle of a request (or when
      // there is nothing left to answer) is closed.
      if (c.phase == Conn::Phase::kIdle || c.phase == Conn::Phase::kLinger ||
          (c.phase == Conn::Phase::kStreaming)) {
        Close(c);
        return false;
      }
      return true;
    }
    if (lingering) continue;  // dropped
    if (c.phase == Conn::Phase::kIdle) {
      c.phase = Conn::Phase::kReading;
      c.request_start_ms = NowMs();
      c.deadline_ms = c.request_start_ms + Ms(options_.head_timeout);
    }
    c.in.append(buf, n);
  }
  return true;
}

void EventLoopServer::Advance(Conn& c) {
  while (!c.closed && c.phase == Conn::Phase::kReading) {
    const RequestParser::Status st = c.parser.Parse(c.in);
    if (st == RequestParser::Status::kError) {
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.malformed;
      }
      const int status = c.parser.error_status();
      RespondError(c, status,
                   status == 413   ? "too_large"
                   : status == 501 ? "not_implemented"
                                   : "invalid_request",
                   c.parser.error_message(), true);
      return;
    }
    if (st == RequestParser::Status::kIncomplete) {
      if (c.parser.head_complete()) {
        c.deadline_ms = c.request_start_ms + Ms(options_.request_timeout);
        if (c.parser.expects_continue() && !c.continue_sent) {
          c.continue_sent = true;
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
          Flush(c);
        }
      }
      if (c.peer_eof) Close(c);  // it will never be complete
      return;
    }
    HttpRequest request = std::move(c.parser.request());
    const bool close_after = c.parser.wants_close() || c.peer_eof;
    c.in.erase(0, c.parser.consumed());
    c.parser.Reset();
    c.continue_sent = false;
    request.remote_addr = c.address;
    DispatchRequest(c, std::move(request), close_after);
  }
}

void EventLoopServer::DispatchRequest(Conn& c, HttpRequest request,
                                      bool close_after) {
  const http::Dispatch d = classifier_(request);
  c.phase = Conn::Phase::kWaiting;
  c.deadline_ms = 0;
  c.close_after = close_after;
  c.principal = d.principal;
  const uint64_t id = c.id;
  auto task = [this, id, principal = d.principal,
               req = std::make_shared<HttpRequest>(std::move(request))] {
    Completion done;
    done.conn = id;
    done.principal = principal;
    try {
      handler_(*req, done.response);
    } catch (const std::exception& e) {
      done.response = HttpResponse();
      done.response.status = 500;
      done.response.set_content(
          nlohmann::json{
              {"error", {{"code", "internal"}, {"message", e.what()}}}}
              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
          "application/json");
    }
    Post(std::move(done));
  };
  FairWorkPool& pool =
      d.lane == Lane::kPriority ? *priority_pool_ : *user_pool_;
  if (!pool.Submit(d.principal, std::move(task))) {
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.throttled;
    }
    HttpResponse res;
    res.status = d.lane == Lane::kPriority ? 503 : 429;
    res.set_header("Retry-After", "1");
    res.set_content(
        nlohmann::json{
            {"error",
             {{"code",
               d.lane == Lane::kPriority ? "unavailable" : "too_many_requests"},
              {"message",
               d.lane == Lane::kPriority
                   ? std::string("the server is overloaded; retry in a moment")
                   : absl::StrCat("too many requests in progress for this "
                                  "caller (at most ",
                                  options_.max_running_per_principal,
                                  " at once and ",
                                  options_.max_queued_per_principal,
                                  " waiting); retry in a moment")}}}}
            .dump(),
        "application/json");
    // Answered through the completion queue, not here: a burst of
    // pipelined requests refused one by one must not recurse.
    Completion refused;
    refused.conn = c.id;
    refused.principal = d.principal;
    refused.response = std::move(res);
    Post(std::move(refused));
  }
}

void EventLoopServer::RespondError(Conn& c, int status, absl::string_view code,
                                   absl::string_view message,
                                   bool close_after) {
  HttpResponse res;
  res.status = status;
  res.set_content(
      nlohmann::json{
          {"error",
           {{"code", std::string(code)}, {"message", std::string(message)}}}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
      "application/json");
  Respond(c, std::move(res), close_after);
}

void EventLoopServer::Respond(Conn& c, HttpResponse res, bool close_after) {
  if (c.closed) return;
  c.close_after = close_after;
  c.out += SerializeHead(res, close_after && !res.stream);
  if (res.stream) {
    c.stream = std::make_shared<StreamSource>(std::move(res.stream));
    c.phase = Conn::Phase::kStreaming;
    c.polling = false;
    c.next_poll_ms = 0;
    ++streams_;
    ++streams_per_principal_[c.principal];
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.streams_open;
    }
    PollStream(c);
  } else {
    c.out += res.body;
    c.phase = close_after ? Conn::Phase::kDraining : Conn::Phase::kResponding;
  }
  Flush(c);  // `Flushed` goes on from there once all is out
}

bool EventLoopServer::Flush(Conn& c) {
  while (!c.closed && c.out_off < c.out.size()) {
    size_t n = 0;
    const Transport::Io r =
        c.tx->Write(c.out.data() + c.out_off, c.out.size() - c.out_off, &n);
    if (r == Transport::Io::kAgain) {
      if (c.write_progress_ms == 0) c.write_progress_ms = NowMs();
      return true;
    }
    if (r != Transport::Io::kOk) {
      Close(c);
      return false;
    }
    c.out_off += n;
    c.write_progress_ms = NowMs();
  }
  if (c.closed) return false;
  c.out.clear();
  c.out_off = 0;
  c.write_progress_ms = 0;
  Flushed(c);
  return !c.closed;
}

void EventLoopServer::Flushed(Conn& c) {
  switch (c.phase) {
    case Conn::Phase::kResponding:
      if (c.peer_eof && c.in.empty()) return Close(c);
      c.phase = c.in.empty() ? Conn::Phase::kIdle : Conn::Phase::kReading;
      if (c.phase == Conn::Phase::kIdle) {
        c.deadline_ms = NowMs() + Ms(options_.idle_timeout);
      } else {
        c.request_start_ms = NowMs();
        c.deadline_ms = c.request_start_ms + Ms(options_.head_timeout);
      }
      // Bytes of the next request may already be here (pipelining), or
      // left in the socket while this one was handled.
      if (ReadSome(c)) Advance(c);
      return;
    case Conn::Phase::kDraining:
      if (c.peer_eof) return Close(c);
      c.tx->ShutdownWrite();
      c.phase = Conn::Phase::kLinger;
      c.deadline_ms = NowMs() + Ms(options_.linger);
      c.in.clear();
      return;
    case Conn::Phase::kStreaming:
      PollStream(c);
      return;
    default:
      return;
  }
}

void EventLoopServer::PollStream(Conn& c) {
  if (c.closed || c.phase != Conn::Phase::kStreaming || c.polling ||
      c.stream == nullptr) {
    return;
  }
  if (c.out.size() - c.out_off >= options_.stream_buffer) return;
  if (NowMs() < c.next_poll_ms) return;  // Sweep polls it when due
  c.polling = true;
  const uint64_t id = c.id;
  std::shared_ptr<StreamSource> source = c.stream;
  const bool queued = stream_pool_->Submit(c.principal, [this, id, source] {
    Completion done;
    done.conn = id;
    done.is_stream = true;
    try {
      done.chunk = (*source)();
    } catch (const std::exception& e) {
      done.chunk.done = true;
    }
    Post(std::move(done));
  });
  if (!queued) c.polling = false;  // tried again at the next sweep
}

void EventLoopServer::EndStream(Conn& c) {
  if (c.stream == nullptr) return;
  c.stream = nullptr;
  --streams_;
  if (--streams_per_principal_[c.principal] <= 0) {
    streams_per_principal_.erase(c.principal);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  --stats_.streams_open;
}

void EventLoopServer::Complete(Completion done) {
  auto it = conns_.find(done.conn);
  if (it == conns_.end() || it->second->closed) return;
  Conn& c = *it->second;
  if (!done.is_stream) {
    if (c.phase != Conn::Phase::kWaiting) return;
    HttpResponse& res = done.response;
    if (res.stream && (streams_ >= options_.max_streams ||
                       streams_per_principal_[c.principal] >=
                           options_.max_streams_per_principal)) {
      if (streams_per_principal_[c.principal] == 0) {
        streams_per_principal_.erase(c.principal);
      }
      {
        std::lock_guard<std::mutex> lock(stats_mu_);
        ++stats_.throttled;
      }
      HttpResponse refused;
      refused.status = 429;
      refused.set_header("Retry-After", "1");
      refused.set_content(
          nlohmann::json{
              {"error",
               {{"code", "too_many_streams"},
                {"message",
                 absl::StrCat("too many streams open (at most ",
                              options_.max_streams_per_principal,
                              " per caller and ", options_.max_streams,
                              " in all); close one or read without "
                              "follow")}}}}
              .dump(),
          "application/json");
      return Respond(c, std::move(refused), c.close_after);
    }
    return Respond(c, std::move(res), c.close_after);
  }
  if (c.phase != Conn::Phase::kStreaming) return;
  c.polling = false;
  const StreamChunk& chunk = done.chunk;
  if (!chunk.data.empty()) {
    absl::StrAppend(&c.out, absl::Hex(chunk.data.size()), "\r\n", chunk.data,
                    "\r\n");
  }
  if (chunk.done) {
    c.out += "0\r\n\r\n";
    EndStream(c);
    c.phase = c.close_after ? Conn::Phase::kDraining : Conn::Phase::kResponding;
  } else {
    c.next_poll_ms = NowMs() + Ms(chunk.next_poll);
  }
  Flush(c);
}

void EventLoopServer::Sweep() {
  const int64_t now = NowMs();
  if (accept_paused_until_ms_ != 0 && now >= accept_paused_until_ms_) {
    accept_paused_until_ms_ = 0;
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kListenId;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  }
  for (auto& [id, conn] : conns_) {
    Conn& c = *conn;
    if (c.closed) continue;
    if (c.out_off < c.out.size() && c.write_progress_ms != 0 &&
        now - c.write_progress_ms > Ms(options_.write_timeout)) {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.timeouts;
      Close(c);
      continue;
    }
    if (c.phase == Conn::Phase::kStreaming) {
      if (!c.polling && now >= c.next_poll_ms) PollStream(c);
      continue;
    }
    if (c.deadline_ms == 0 || now < c.deadline_ms) continue;
    {
      std::lock_guard<std::mutex> lock(stats_mu_);
      ++stats_.timeouts;
    }
    if (c.phase == Conn::Phase::kReading) {
      RespondError(
          c, 408, "request_timeout",
          c.parser.head_complete()
              ? absl::StrCat("the request body did not arrive within ",
                             absl::FormatDuration(options_.request_timeout))
              : absl::StrCat("the request head did not arrive within ",
                             absl::FormatDuration(options_.head_timeout)),
          true);
    } else {
      Close(c);  // idle, handshake, linger
    }
  }
}

void EventLoopServer::Close(Conn& c) {
  if (c.closed) return;
  c.closed = true;
  EndStream(c);
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c.tx->fd(), nullptr);
  c.tx.reset();  // closes the socket
  if (auto it = per_address_.find(c.address);
      it != per_address_.end() && --it->second <= 0) {
    per_address_.erase(it);
  }
  std::lock_guard<std::mutex> lock(stats_mu_);
  --stats_.connections_open;
}

}  // namespace loom::http
