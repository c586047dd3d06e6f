#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/http/fair_work_pool.h"
#include "loom/http/http_message.h"
#include "loom/http/request_parser.h"
#include "loom/http/transport.h"

namespace loom::http {

// Which threads answer a request. The priority lane (the agent protocol:
// heartbeats, registration) has threads of its own, so that it never waits
// behind user requests, however many or slow.
enum class Lane { kPriority, kUser };

struct Dispatch {
  Lane lane = Lane::kUser;
  // Whose request it is, for the per-caller limits (a token's id, a node,
  // an address). Never empty: "" is one shared caller.
  std::string principal;
};

struct EventLoopServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // Worker threads of each lane, and threads that produce streams.
  int user_threads = 8;
  int priority_threads = 3;
  int stream_threads = 2;
  // Deadlines (docs/server.md). The head of a request must arrive within
  // `head_timeout` of its first byte and the whole request within
  // `request_timeout`, else 408 and close (slowloris); a connection with
  // no request in progress is closed after `idle_timeout`; one whose
  // client reads nothing for `write_timeout` is closed.
  absl::Duration head_timeout = absl::Seconds(10);
  absl::Duration request_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration write_timeout = absl::Seconds(30);
  // After a response that closes the connection, what the client still
  // sends is read and dropped for this long, so that the response is not
  // lost to a reset.
  absl::Duration linger = absl::Seconds(2);
  // Connections: all, and from one address (more are closed at accept).
  int max_connections = 20000;
  int max_connections_per_address = 4096;
  // Per caller (`Dispatch::principal`) in the user lane: requests handled
  // at once, and waiting beyond those (more: 429).
  int max_running_per_principal = 4;
  int max_queued_per_principal = 32;
  // Requests waiting in the priority lane, all callers together (more:
  // 503).
  int max_priority_queued = 20000;
  // Streams open: all, and per caller (more: 429).
  int max_streams = 256;
  int max_streams_per_principal = 4;
  // A stream is polled again only once less than this is unsent.
  size_t stream_buffer = 256 << 10;
  ParserLimits parser;
  // TLS: both set: HTTPS only.
  std::string tls_cert;
  std::string tls_key;
};

// Counters of what the server refused or cut, for /metrics.
struct EventLoopServerStats {
  int64_t connections_open = 0;
  int64_t connections_accepted = 0;
  int64_t connections_refused = 0;  // over a connection limit
  int64_t streams_open = 0;
  int64_t malformed = 0;  // 4xx/5xx for the request's framing
  int64_t timeouts = 0;   // 408, idle and write deadlines
  int64_t throttled = 0;  // 429/503 for a caller's or lane's limit
};

// An HTTP/1.1 server on one epoll event loop: one thread reads and writes
// every connection without blocking, parses requests strictly
// (`RequestParser`) and enforces the deadlines and limits of the options;
// only complete requests reach the handler, on a worker thread of the
// lane the classifier picks, served fairly between callers
// (`FairWorkPool`). A connection holds no thread while it is idle, slow,
// or streaming. Why not cpp-httplib's server: it gives each connection a
// pool thread for as long as it lives, so ten slow or idle clients took
// every thread, heartbeats went unanswered and agents fenced their tasks
// (docs/server.md).
class EventLoopServer {
 public:
  // Runs on a worker thread; may block (bounded). Must not throw (what it
  // throws becomes a 500).
  using Handler = std::function<void(HttpRequest&, HttpResponse&)>;
  // Runs on the event loop for every complete request: must be cheap and
  // never block.
  using Classifier = std::function<Dispatch(const HttpRequest&)>;

  EventLoopServer(EventLoopServerOptions options, Handler handler,
                  Classifier classifier);
  ~EventLoopServer();
  EventLoopServer(const EventLoopServer&) = delete;
  EventLoopServer& operator=(const EventLoopServer&) = delete;

  // Binds (TLS context loaded first) and starts the loop and the workers.
  // Returns the port. InvalidArgument for TLS files that cannot be used,
  // Unavailable when the address cannot be bound.
  absl::StatusOr<int> Start();
  // Closes every connection and joins every thread. Idempotent.
  void Stop();
  EventLoopServerStats stats() const;

 private:
  struct Conn;
  struct Completion;
  void Loop();
  void Accept();
  void Service(Conn& c);
  bool ReadSome(Conn& c);
  void Advance(Conn& c);
  void DispatchRequest(Conn& c, HttpRequest request, bool close_after);
  void Respond(Conn& c, HttpResponse res, bool close_after);
  void RespondError(Conn& c, int status, absl::string_view code,
                    absl::string_view message, bool close_after);
  bool Flush(Conn& c);
  void Flushed(Conn& c);
  void Complete(Completion done);
  void PollStream(Conn& c);
  void EndStream(Conn& c);
  void Sweep();
  void Close(Conn& c);
  void Post(Completion done);

  const EventLoopServerOptions options_;
  const Handler handler_;
  const Classifier classifier_;
  std::unique_ptr<TlsContext> tls_;
  int listen_fd_ = -1;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;
  std::thread loop_;
  std::atomic<bool> stopping_{false};
  bool started_ = false;
  std::unique_ptr<FairWorkPool> priority_pool_;
  std::unique_ptr<FairWorkPool> user_pool_;
  std::unique_ptr<FairWorkPool> stream_pool_;

  // Owned by the loop thread.
  uint64_t next_id_ = 2;  // 0: the listener, 1: the wake-up eventfd
  int64_t accept_paused_until_ms_ = 0;  // out of descriptors: until then
  std::map<uint64_t, std::unique_ptr<Conn>> conns_;
  std::map<std::string, int> per_address_;
  std::map<std::string, int> streams_per_principal_;
  int streams_ = 0;

  // Completions from workers, for the loop.
  std::mutex done_mu_;
  std::vector<Completion> done_;

  mutable std::mutex stats_mu_;
  EventLoopServerStats stats_;
};

}  // namespace loom::http
