#pragma once

// A client of HAProxy's runtime API (management guide, section 9.3 "Unix
// Socket commands"): one connection per command on the unix stats socket,
// the command written, the write side shut, the whole answer read until
// HAProxy closes, all within a deadline. The same exchange works with the
// master CLI of master-worker mode (`-S`), which answers only once the
// write side is shut.
//
// HAProxy 2.6 answers in plain text with no status code: each helper knows
// the answer that means success ("New server registered.", "Server
// deleted.", nothing for `set server`) and returns anything else as an
// error carrying the command and HAProxy's own words.
//
// Thread-safe: every call opens its own connection. Never throws.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/gateway/haproxy_config.h"

namespace loom::gateway {

// Sends `command` (one line; no newline, no ';' joining several) to the
// unix socket at `socket_path` and returns the whole answer. Unavailable
// when the socket cannot be reached, DeadlineExceeded after `timeout`,
// both naming the path and the command.
absl::StatusOr<std::string> CliExchange(const std::string& socket_path,
                                        std::string_view command,
                                        absl::Duration timeout);

// A server's administrative state, as `set server <b>/<s> state` sets it.
// Ready: takes traffic. Drain: gets no new requests from load balancing,
// keeps the ones it has. Maint: no traffic and no checks; required before
// `del server`.
enum class ServerAdminState { kReady, kDrain, kMaint };
std::string_view AdminStateName(ServerAdminState state);  // "ready", ...

// One row of `show stat` (management guide, 9.1 "CSV format"), columns
// found by the header's names. Fields a row type does not carry are 0.
struct StatRow {
  enum class Type { kFrontend, kBackend, kServer, kListener };
  std::string proxy;  // pxname
  std::string name;   // svname: "FRONTEND", "BACKEND" or the server's name
  Type type = Type::kServer;
  // "UP", "DOWN", "DRAIN", "MAINT", "no check", "OPEN", or a transition
  // such as "UP 1/2".
  std::string status;
  int64_t qcur = 0;  // requests queued (backend: with no server assigned)
  int64_t scur = 0;  // current sessions: requests in flight at a server
  int64_t smax = 0;
  int64_t stot = 0;      // cumulative sessions
  int64_t rate = 0;      // sessions per second over the last second
  int64_t req_tot = 0;   // HTTP requests (frontends and backends)
  int64_t req_rate = 0;  // HTTP requests per second (frontends)
  int64_t hrsp_2xx = 0;
  int64_t hrsp_4xx = 0;
  int64_t hrsp_5xx = 0;
  int64_t econ = 0;    // connection errors
  int64_t eresp = 0;   // response errors
  int64_t wretr = 0;   // retries
  int64_t wredis = 0;  // redispatches
  int64_t weight = 0;
  int64_t lbtot = 0;  // times a server was chosen
  // Averages over the last 1024 requests, in ms.
  int64_t qtime_ms = 0;
  int64_t ctime_ms = 0;
  int64_t rtime_ms = 0;
  int64_t ttime_ms = 0;
  std::string address;  // servers: "ip:port"
};

// Parses the answer of `show stat`. InvalidArgument on a missing header or
// a row that does not fit it.
absl::StatusOr<std::vector<StatRow>> ParseShowStat(std::string_view csv);

// One row of `show servers state` (format version 1).
struct ServerStateRow {
  std::string backend;
  std::string server;
  std::string address;  // FormatServerAddress form; "" if unresolved
  ServerAdminState admin = ServerAdminState::kReady;
  int op_state = 0;  // 0 stopped, 1 starting, 2 running, 3 stopping
};

// Parses the answer of `show servers state`. The admin state is read from
// the admin mask: any maintenance bit (forced, inherited, configured,
// resolution) is kMaint, else a drain bit is kDrain, else kReady.
absl::StatusOr<std::vector<ServerStateRow>> ParseServersState(
    std::string_view text);

class HaproxyRuntime {
 public:
  // `socket_path`: the stats socket (level admin). `timeout`: per command.
  explicit HaproxyRuntime(std::string socket_path,
                          absl::Duration timeout = absl::Seconds(5));

  const std::string& socket_path() const { return socket_path_; }

  // The raw exchange (`CliExchange`), trailing newlines trimmed.
  absl::StatusOr<std::string> Execute(std::string_view command) const;

  // `add server <backend>/<server> <address> <ServerKeywords(options)>`,
  // then `set server ... state ready` (HAProxy 2.6 creates a dynamic server
  // in maintenance), then `enable health` when `options.health_check` (a
  // dynamic server's check starts disabled). If a later step fails the
  // server is deleted again, so that nothing is half-created. Errors:
  // InvalidArgument for a bad name or address (nothing sent);
  // AlreadyExists; NotFound for an unknown backend; FailedPrecondition for
  // any other refusal, e.g. a backend with a static balance algorithm.
  absl::Status AddServer(std::string_view backend, std::string_view server,
                         std::string_view address,
                         const ServerOptions& options) const;

  // `set server <backend>/<server> state <state>`. NotFound for an unknown
  // backend or server.
  absl::Status SetServerState(std::string_view backend, std::string_view server,
                              ServerAdminState state) const;

  // `del server <backend>/<server>`. HAProxy deletes only a server in
  // maintenance with no active or idle connection and an empty queue:
  // drain it, wait for its sessions to end, set it to maint, then delete.
  // FailedPrecondition otherwise, NotFound for an unknown one.
  absl::Status DelServer(std::string_view backend,
                         std::string_view server) const;

  // `show stat`: every frontend, backend and server.
  absl::StatusOr<std::vector<StatRow>> ShowStat() const;

  // `show servers state`: every server of every backend.
  absl::StatusOr<std::vector<ServerStateRow>> ShowServersState() const;

  // The answering worker's pid (`show info`, field "Pid").
  absl::StatusOr<int> WorkerPid() const;

 private:
  // Sends `command` and succeeds iff the trimmed answer equals `success`.
  absl::Status Expect(const std::string& command,
                      std::string_view success) const;

  const std::string socket_path_;
  const absl::Duration timeout_;
};

}  // namespace loom::gateway
