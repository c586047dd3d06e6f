#include "loom/gateway/haproxy_runtime.h"

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <charconv>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::gateway {
namespace {

constexpr size_t kMaxAnswer = size_t{64} << 20;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Trimmed(std::string text) {
  while (!text.empty() &&
         (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) {
    text.pop_back();
  }
  return text;
}

// Waits for `events` on `fd` until `deadline`; false on timeout.
bool WaitFd(int fd, short events, absl::Time deadline) {
  for (;;) {
    const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (ms < 0) return false;
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(ms, 1000)));
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // the next call reports it
  }
}

// A name that is safe inside one CLI command: no space, ';' or '/'.
absl::Status ValidateProxyName(std::string_view name) {
  bool ok = !name.empty() && name.size() <= 128;
  for (char c : name) {
    ok = ok && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.');
  }
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("backend name '", std::string(name),
                   "' must be letters, digits, '_', '-' or '.'"));
}

absl::Status ValidateTarget(std::string_view backend, std::string_view server) {
  if (auto s = ValidateProxyName(backend); !s.ok()) return s;
  return ValidateServerName(server);
}

// The status code for HAProxy's refusal `answer`.
absl::StatusCode CodeOf(std::string_view text) {
  const absl::string_view answer(text.data(), text.size());
  if (absl::StrContains(answer, "No such")) return absl::StatusCode::kNotFound;
  if (absl::StrContains(answer, "Already exists")) {
    return absl::StatusCode::kAlreadyExists;
  }
  if (absl::StrContains(answer, "Permission denied")) {
    return absl::StatusCode::kPermissionDenied;
  }
  if (absl::StrContains(answer, "Unknown command")) {
    return absl::StatusCode::kUnimplemented;
  }
  return absl::StatusCode::kFailedPrecondition;
}

absl::Status Refused(std::string_view command, std::string_view answer) {
  std::string first_line(answer.substr(0, answer.find('\n')));
  if (first_line.empty()) first_line = "(empty answer)";
  return absl::Status(
      CodeOf(answer),
      absl::StrCat("haproxy '", std::string(command), "': ", first_line));
}

std::string_view Sv(absl::string_view a) { return {a.data(), a.size()}; }
absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }

bool ParseInt(std::string_view text, int64_t* out) {
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// One CSV line, with HAProxy's optional double quotes ("" inside them is a
// quote).
std::vector<std::string> SplitCsvLine(std::string_view line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else {
      out.back() += c;
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::string> CliExchange(const std::string& socket_path,
                                        std::string_view command,
                                        absl::Duration timeout) {
  const std::string cmd(command);
  auto fail = [&](absl::StatusCode code, std::string_view what) {
    return absl::Status(code, absl::StrCat("haproxy socket ", socket_path, " '",
                                           cmd, "': ", std::string(what)));
  };
  if (cmd.find_first_of("\n;") != std::string::npos) {
    return fail(absl::StatusCode::kInvalidArgument,
                "one command per call, without newline or ';'");
  }
  const absl::Time deadline = absl::Now() + timeout;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (socket_path.size() >= sizeof(addr.sun_path)) {
    return fail(absl::StatusCode::kInvalidArgument, "socket path too long");
  }
  std::memcpy(addr.sun_path, socket_path.c_str(), socket_path.size() + 1);
  Fd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (fd.get() < 0) {
    return fail(absl::StatusCode::kInternal, std::strerror(errno));
  }
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) !=
      0) {
    if (errno != EAGAIN && errno != EINPROGRESS) {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("connect: ", std::strerror(errno)));
    }
    if (!WaitFd(fd.get(), POLLOUT, deadline)) {
      return fail(absl::StatusCode::kDeadlineExceeded, "connect timed out");
    }
    int err = 0;
    socklen_t len = sizeof(err);
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("connect: ", std::strerror(err)));
    }
  }
  const std::string line = cmd + "\n";
  size_t sent = 0;
  while (sent < line.size()) {
    const ssize_t n =
        ::send(fd.get(), line.data() + sent, line.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      if (!WaitFd(fd.get(), POLLOUT, deadline)) {
        return fail(absl::StatusCode::kDeadlineExceeded, "send timed out");
      }
    } else {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("send: ", std::strerror(errno)));
    }
  }
  // The master CLI answers only once it sees the end of the input.
  ::shutdown(fd.get(), SHUT_WR);
  std::string answer;
  char buf[16384];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buf, sizeof(buf), 0);
    if (n > 0) {
      answer.append(buf, static_cast<size_t>(n));
      if (answer.size() > kMaxAnswer) {
        return fail(absl::StatusCode::kResourceExhausted,
                    "answer larger than 64 MiB");
      }
    } else if (n == 0) {
      return answer;
    } else if (errno == EAGAIN || errno == EINTR) {
      if (!WaitFd(fd.get(), POLLIN, deadline)) {
        return fail(absl::StatusCode::kDeadlineExceeded,
                    absl::StrCat("no complete answer within ",
                                 absl::FormatDuration(timeout)));
      }
    } else if (errno == ECONNRESET && !answer.empty()) {
      return answer;
    } else {
      return fail(absl::StatusCode::kUnavailable,
                  absl::StrCat("recv: ", std::strerror(errno)));
    }
  }
}

std::string_view AdminStateName(ServerAdminState state) {
  switch (state) {
    case ServerAdminState::kReady:
      return "ready";
    case ServerAdminState::kDrain:
      return "drain";
    case ServerAdminState::kMaint:
      return "maint";
  }
  return "ready";
}

absl::StatusOr<std::vector<StatRow>> ParseShowStat(std::string_view csv) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(Av(csv), '\n', absl::SkipEmpty());
  if (lines.empty() || !absl::StartsWith(lines[0], "# ")) {
    return absl::InvalidArgumentError(
        absl::StrCat("show stat: no '# pxname,...' header in '",
                     std::string(csv.substr(0, 200)), "'"));
  }
  std::map<std::string, size_t> col;
  const std::vector<std::string> header = SplitCsvLine(Sv(lines[0].substr(2)));
  for (size_t i = 0; i < header.size(); ++i) col.emplace(header[i], i);
  for (const char* need : {"pxname", "svname", "type", "status", "scur"}) {
    if (!col.count(need)) {
      return absl::InvalidArgumentError(
          absl::StrCat("show stat: header lacks '", need, "'"));
    }
  }
  std::vector<StatRow> rows;
  for (size_t l = 1; l < lines.size(); ++l) {
    const std::vector<std::string> v = SplitCsvLine(Sv(lines[l]));
    auto text = [&](const char* name) -> std::string {
      auto it = col.find(name);
      return it == col.end() || it->second >= v.size() ? "" : v[it->second];
    };
    auto number = [&](const char* name) -> int64_t {
      int64_t out = 0;
      return ParseInt(text(name), &out) ? out : 0;
    };
    if (v.size() < col.at("status") + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("show stat: row ", l, " has ", v.size(), " fields: '",
                       std::string(Sv(lines[l].substr(0, 200))), "'"));
    }
    StatRow r;
    r.proxy = text("pxname");
    r.name = text("svname");
    switch (number("type")) {
      case 0:
        r.type = StatRow::Type::kFrontend;
        break;
      case 1:
        r.type = StatRow::Type::kBackend;
        break;
      case 2:
        r.type = StatRow::Type::kServer;
        break;
      default:
        r.type = StatRow::Type::kListener;
    }
    r.status = text("status");
    r.qcur = number("qcur");
    r.scur = number("scur");
    r.smax = number("smax");
    r.stot = number("stot");
    r.rate = number("rate");
    r.req_tot = number("req_tot");
    r.req_rate = number("req_rate");
    r.hrsp_2xx = number("hrsp_2xx");
    r.hrsp_4xx = number("hrsp_4xx");
    r.hrsp_5xx = number("hrsp_5xx");
    r.econ = number("econ");
    r.eresp = number("eresp");
    r.wretr = number("wretr");
    r.wredis = number("wredis");
    r.weight = number("weight");
    r.lbtot = number("lbtot");
    r.qtime_ms = number("qtime");
    r.ctime_ms = number("ctime");
    r.rtime_ms = number("rtime");
    r.ttime_ms = number("ttime");
    r.address = text("addr");
    rows.push_back(std::move(r));
  }
  return rows;
}

absl::StatusOr<std::vector<ServerStateRow>> ParseServersState(
    std::string_view text) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(Av(text), '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != "1") {
    return absl::InvalidArgumentError(
        absl::StrCat("show servers state: not format version 1: '",
                     std::string(text.substr(0, 200)), "'"));
  }
  std::map<std::string, size_t> col;
  std::vector<ServerStateRow> rows;
  for (size_t l = 1; l < lines.size(); ++l) {
    std::vector<absl::string_view> v =
        absl::StrSplit(lines[l], ' ', absl::SkipEmpty());
    if (!v.empty() && v[0] == "#") {
      if (col.empty()) {
        for (size_t i = 1; i < v.size(); ++i) {
          col.emplace(std::string(Sv(v[i])), i - 1);
        }
      }
      continue;
    }
    if (col.empty()) {
      return absl::InvalidArgumentError(
          "show servers state: data before the '#' header");
    }
    auto field = [&](const char* name) -> std::string {
      auto it = col.find(name);
      return it == col.end() || it->second >= v.size()
                 ? ""
                 : std::string(Sv(v[it->second]));
    };
    ServerStateRow r;
    r.backend = field("be_name");
    r.server = field("srv_name");
    int64_t admin = 0, op = 0, port = 0;
    if (r.backend.empty() || r.server.empty() ||
        !ParseInt(field("srv_admin_state"), &admin) ||
        !ParseInt(field("srv_op_state"), &op)) {
      return absl::InvalidArgumentError(
          absl::StrCat("show servers state: bad row '",
                       std::string(Sv(lines[l].substr(0, 200))), "'"));
    }
    r.op_state = static_cast<int>(op);
    // FMAINT 0x01, IMAINT 0x02, CMAINT 0x04, RMAINT 0x20; FDRAIN 0x08,
    // IDRAIN 0x10 (management guide, "show servers state").
    if (admin & (0x01 | 0x02 | 0x04 | 0x20)) {
      r.admin = ServerAdminState::kMaint;
    } else if (admin & (0x08 | 0x10)) {
      r.admin = ServerAdminState::kDrain;
    }
    const std::string host = field("srv_addr");
    if (!host.empty() && host != "-" && ParseInt(field("srv_port"), &port)) {
      r.address = host.find(':') != std::string::npos
                      ? absl::StrCat("[", host, "]:", port)
                      : absl::StrCat(host, ":", port);
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

HaproxyRuntime::HaproxyRuntime(std::string socket_path, absl::Duration timeout)
    : socket_path_(std::move(socket_path)), timeout_(timeout) {}

absl::StatusOr<std::string> HaproxyRuntime::Execute(
    std::string_view command) const {
  absl::StatusOr<std::string> answer =
      CliExchange(socket_path_, command, timeout_);
  if (!answer.ok()) return answer.status();
  return Trimmed(*std::move(answer));
}

absl::Status HaproxyRuntime::Expect(const std::string& command,
                                    std::string_view success) const {
  absl::StatusOr<std::string> answer = Execute(command);
  if (!answer.ok()) return answer.status();
  if (*answer != success) return Refused(command, *answer);
  return absl::OkStatus();
}

absl::Status HaproxyRuntime::AddServer(std::string_view backend,
                                       std::string_view server,
                                       std::string_view address,
                                       const ServerOptions& options) const {
  if (auto s = ValidateTarget(backend, server); !s.ok()) return s;
  absl::StatusOr<ServerAddress> addr = ParseServerAddress(address);
  if (!addr.ok()) return addr.status();
  const std::string target =
      absl::StrCat(std::string(backend), "/", std::string(server));
  const std::string keywords = ServerKeywords(options);
  const std::string add =
      absl::StrCat("add server ", target, " ", FormatServerAddress(*addr),
                   keywords.empty() ? "" : " ", keywords);
  if (auto s = Expect(add, "New server registered."); !s.ok()) return s;
  absl::Status s =
      Expect(absl::StrCat("set server ", target, " state ready"), "");
  if (s.ok() && options.health_check) {
    s = Expect(absl::StrCat("enable health ", target), "");
  }
  if (!s.ok()) {
    // Leave nothing half-created: back to maint (a no-op if it still is),
    // then delete. Errors here are secondary to `s`.
    (void)SetServerState(backend, server, ServerAdminState::kMaint);
    (void)DelServer(backend, server);
  }
  return s;
}

absl::Status HaproxyRuntime::SetServerState(std::string_view backend,
                                            std::string_view server,
                                            ServerAdminState state) const {
  if (auto s = ValidateTarget(backend, server); !s.ok()) return s;
  return Expect(absl::StrCat("set server ", std::string(backend), "/",
                             std::string(server), " state ",
                             std::string(AdminStateName(state))),
                "");
}

absl::Status HaproxyRuntime::DelServer(std::string_view backend,
                                       std::string_view server) const {
  if (auto s = ValidateTarget(backend, server); !s.ok()) return s;
  return Expect(absl::StrCat("del server ", std::string(backend), "/",
                             std::string(server)),
                "Server deleted.");
}

absl::StatusOr<std::vector<StatRow>> HaproxyRuntime::ShowStat() const {
  const std::string command = "show stat";
  absl::StatusOr<std::string> answer = Execute(command);
  if (!answer.ok()) return answer.status();
  if (answer->substr(0, 2) != "# ") return Refused(command, *answer);
  return ParseShowStat(*answer);
}

absl::StatusOr<std::vector<ServerStateRow>> HaproxyRuntime::ShowServersState()
    const {
  const std::string command = "show servers state";
  absl::StatusOr<std::string> answer = Execute(command);
  if (!answer.ok()) return answer.status();
  if (answer->substr(0, 2) != "1\n") return Refused(command, *answer);
  return ParseServersState(*answer);
}

absl::StatusOr<int> HaproxyRuntime::WorkerPid() const {
  const std::string command = "show info";
  absl::StatusOr<std::string> answer = Execute(command);
  if (!answer.ok()) return answer.status();
  for (absl::string_view line : absl::StrSplit(*answer, '\n')) {
    if (absl::StartsWith(line, "Pid: ")) {
      int64_t pid = 0;
      if (ParseInt(Sv(line.substr(5)), &pid)) {
        return static_cast<int>(pid);
      }
    }
  }
  return Refused(command, *answer);
}

}  // namespace loom::gateway
