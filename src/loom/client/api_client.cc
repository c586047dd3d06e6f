#include "loom/client/api_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "httplib.h"

namespace loom {
namespace {

constexpr char kCodePayload[] = "type.loom.dev/error_code";
constexpr char kHttpStatusPayload[] = "type.loom.dev/http_status";
// poll() takes int milliseconds: 20 days is "forever" and fits.
constexpr auto kFollowReadTimeout = std::chrono::hours(24 * 20);

// What one server answered.
struct Reply {
  int status = 0;
  std::string body;  // the whole body, except for streamed 2xx answers
  std::string url;
};

using SendFn = std::function<httplib::Result(httplib::Client&)>;

// Percent-encodes `s` for a path segment or a query value.
std::string Escape(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

struct HostPort {
  std::string host;
  std::string port;
};

// Splits a normalised URL ("http://host:port").
HostPort SplitUrl(std::string_view url) {
  HostPort hp;
  const bool https = url.starts_with("https://");
  url.remove_prefix(url.find("://") + 3);
  hp.port = https ? "443" : "80";
  if (url.starts_with("[")) {  // [v6]:port
    const size_t close = url.find(']');
    hp.host = std::string(url.substr(1, close - 1));
    url.remove_prefix(close + 1);
    if (url.starts_with(":")) hp.port = std::string(url.substr(1));
    return hp;
  }
  const size_t colon = url.rfind(':');
  if (colon == std::string_view::npos) {
    hp.host = std::string(url);
  } else {
    hp.host = std::string(url.substr(0, colon));
    hp.port = std::string(url.substr(colon + 1));
  }
  return hp;
}

// httplib reports a failed connect without its cause; this tries once more
// with plain sockets to name it ("Connection refused", "No route to host",
// "Name or service not known").
std::string DescribeConnectFailure(const std::string& url,
                                   absl::Duration timeout) {
  const HostPort hp = SplitUrl(url);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (int rc = getaddrinfo(hp.host.c_str(), hp.port.c_str(), &hints, &addrs);
      rc != 0) {
    return gai_strerror(rc);
  }
  std::string why = "connection failed";
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = 0;
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int ms = static_cast<int>(absl::ToInt64Milliseconds(timeout));
        if (poll(&p, 1, ms) <= 0) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(err);
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
        }
      }
    }
    close(fd);
    if (err == 0) {  // reachable now: it was a passing failure
      why = "connection failed";
      break;
    }
    why = err == ETIMEDOUT
              ? absl::StrCat("no answer within ", absl::FormatDuration(timeout))
              : std::strerror(err);
  }
  freeaddrinfo(addrs);
  return why;
}

bool IsConnectError(httplib::Error e) {
  return e == httplib::Error::Connection ||
         e == httplib::Error::ConnectionTimeout ||
         e == httplib::Error::BindIPAddress;
}

// Why a request that was sent got no complete answer.
std::string DescribeTransportError(httplib::Error e,
                                   const ApiClientOptions& options,
                                   bool follow) {
  switch (e) {
    case httplib::Error::Read:
      return follow ? "the connection was lost while reading the response"
                    : absl::StrCat("no complete response within ",
                                   absl::FormatDuration(options.read_timeout),
                                   " (or the connection was closed)");
    case httplib::Error::Write:
      return "the connection was lost while sending the request";
    case httplib::Error::SSLConnection:
    case httplib::Error::SSLLoadingCerts:
    case httplib::Error::SSLServerVerification:
      return absl::StrCat("TLS failure (", httplib::to_string(e), ")");
    default:
      return absl::StrCat("request failed (", httplib::to_string(e), ")");
  }
}

absl::StatusCode CodeFor(std::string_view error_code, int http_status) {
  if (error_code == "invalid_argument" || error_code == "infeasible") {
    return absl::StatusCode::kInvalidArgument;
  }
  if (error_code == "not_found") return absl::StatusCode::kNotFound;
  if (error_code == "failed_precondition") {
    return absl::StatusCode::kFailedPrecondition;
  }
  if (error_code == "method_not_allowed") {
    return absl::StatusCode::kUnimplemented;
  }
  if (error_code == "too_large") return absl::StatusCode::kResourceExhausted;
  if (error_code == "unavailable") return absl::StatusCode::kUnavailable;
  if (error_code == "internal") return absl::StatusCode::kInternal;
  switch (http_status) {  // an answer without a loom error body
    case 400:
      return absl::StatusCode::kInvalidArgument;
    case 404:
      return absl::StatusCode::kNotFound;
    case 405:
      return absl::StatusCode::kUnimplemented;
    case 409:
      return absl::StatusCode::kFailedPrecondition;
    case 413:
      return absl::StatusCode::kResourceExhausted;
    case 503:
      return absl::StatusCode::kUnavailable;
    default:
      return absl::StatusCode::kInternal;
  }
}

// " Not Found" for 404, "" for codes without a well-known phrase.
std::string ReasonPhrase(int status) {
  switch (status) {
    case 400:
      return " Bad Request";
    case 401:
      return " Unauthorized";
    case 403:
      return " Forbidden";
    case 404:
      return " Not Found";
    case 405:
      return " Method Not Allowed";
    case 409:
      return " Conflict";
    case 413:
      return " Payload Too Large";
    case 500:
      return " Internal Server Error";
    case 502:
      return " Bad Gateway";
    case 503:
      return " Service Unavailable";
    case 504:
      return " Gateway Timeout";
    default:
      return "";
  }
}

// Turns a non-2xx answer into a status: the server's error object when the
// body has one, else the HTTP status and the start of the body.
absl::Status ErrorFromReply(const Reply& reply) {
  std::string code;
  std::string message;
  const nlohmann::json body = nlohmann::json::parse(reply.body, nullptr,
                                                    /*allow_exceptions=*/false);
  if (body.is_object() && body.contains("error") && body["error"].is_object()) {
    const nlohmann::json& e = body["error"];
    if (e.contains("code") && e["code"].is_string()) {
      code = e["code"].get<std::string>();
    }
    if (e.contains("message") && e["message"].is_string()) {
      message = e["message"].get<std::string>();
    }
    if (e.contains("field") && e["field"].is_string()) {
      const std::string field = e["field"].get<std::string>();
      if (!field.empty() && !absl::StrContains(message, field)) {
        message = message.empty() ? field : absl::StrCat(field, ": ", message);
      }
    }
  }
  if (message.empty()) {
    message = absl::StrCat("HTTP ", reply.status, ReasonPhrase(reply.status),
                           " from ", reply.url);
    std::string text(absl::StripAsciiWhitespace(reply.body));
    if (!text.empty() && !body.is_object()) {
      if (text.size() > 200) text = text.substr(0, 200) + "...";
      absl::StrAppend(&message, ": ", text);
    }
  }
  absl::Status status(CodeFor(code, reply.status), message);
  if (!code.empty()) status.SetPayload(kCodePayload, absl::Cord(code));
  status.SetPayload(kHttpStatusPayload, absl::Cord(absl::StrCat(reply.status)));
  return status;
}

absl::StatusOr<nlohmann::json> JsonFromReply(const Reply& reply) {
  if (reply.status < 200 || reply.status >= 300) return ErrorFromReply(reply);
  if (absl::StripAsciiWhitespace(reply.body).empty()) {
    return nlohmann::json::object();
  }
  nlohmann::json j = nlohmann::json::parse(reply.body, nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InternalError(absl::StrCat(
        "the loom server at ", reply.url,
        " sent a response that is not JSON (HTTP ", reply.status, ")"));
  }
  return j;
}

// The leader a standby named in its 307 answer ("" if none).
std::string LeaderOf(const httplib::Result& result) {
  return result->get_header_value("X-Loom-Leader");
}

// One pass over the servers, starting at `*preferred`: returns the first
// answer. 503 answers (busy, no leader yet) and 307 answers (a standby of a
// replicated controller) move on to the next server while there is one; a
// standby's leader that is not in the list is tried last. Transport failures
// after the request was sent move on only when `retry_after_send`. `send`
// must fill `Reply::body` itself when it streams. `failures` collects why
// servers did not answer.
absl::StatusOr<Reply> ExchangeOnce(const std::vector<std::string>& urls,
                                   size_t* preferred,
                                   const ApiClientOptions& options, bool follow,
                                   bool retry_after_send, const SendFn& send,
                                   std::vector<std::string>* failures) {
  std::optional<Reply> fallback;  // the last 503 or 307 answer
  std::vector<std::string> order;
  for (size_t i = 0; i < urls.size(); ++i) {
    order.push_back(urls[(*preferred + i) % urls.size()]);
  }
  for (size_t attempt = 0; attempt < order.size(); ++attempt) {
    const std::string url = order[attempt];
    httplib::Client client(url);
    if (!client.is_valid()) {
      failures->push_back(absl::StrCat(url, ": not a valid server URL"));
      continue;
    }
    client.set_connection_timeout(std::chrono::milliseconds(
        absl::ToInt64Milliseconds(options.connect_timeout)));
    if (follow) {
      client.set_read_timeout(kFollowReadTimeout);
    } else {
      client.set_read_timeout(std::chrono::milliseconds(
          absl::ToInt64Milliseconds(options.read_timeout)));
    }
    client.set_write_timeout(std::chrono::milliseconds(
        absl::ToInt64Milliseconds(options.read_timeout)));
    client.set_keep_alive(false);
    client.set_follow_location(false);
    if (!options.ca_cert.empty()) {
      client.set_ca_cert_path(options.ca_cert.c_str());
    }
    client.enable_server_certificate_verification(true);

    httplib::Result result = send(client);
    if (!result) {
      const httplib::Error e = result.error();
      if (e == httplib::Error::Canceled) {
        return absl::CancelledError("stopped reading the response");
      }
      if (IsConnectError(e)) {
        failures->push_back(absl::StrCat(
            url, ": ", DescribeConnectFailure(url, options.connect_timeout)));
        continue;
      }
      failures->push_back(
          absl::StrCat(url, ": ", DescribeTransportError(e, options, follow)));
      if (retry_after_send) continue;
      break;
    }
    Reply reply;
    reply.status = result->status;
    reply.body = std::move(result->body);
    reply.url = url;
    if (reply.status == 307) {
      const std::string leader = LeaderOf(result);
      if (!leader.empty() &&
          std::find(order.begin(), order.end(), leader) == order.end()) {
        order.push_back(leader);
      }
    }
    if ((reply.status == 503 || reply.status == 307) &&
        attempt + 1 < order.size()) {
      failures->push_back(absl::StrCat(
          url, reply.status == 307 ? ": a standby" : ": HTTP 503"));
      fallback = std::move(reply);
      continue;
    }
    auto known = std::find(urls.begin(), urls.end(), url);
    if (known != urls.end()) *preferred = known - urls.begin();
    return reply;
  }
  if (fallback.has_value()) return *std::move(fallback);
  return absl::UnavailableError("no answer");
}

// `ExchangeOnce`, again and again while a replicated controller fails over
// (every server refused, or only standbys and 503s answered) for up to
// `options.failover_wait`, when several servers are known or a standby
// answered. Then the last answer, or an error naming every server.
absl::StatusOr<Reply> Exchange(const std::vector<std::string>& urls,
                               size_t* preferred,
                               const ApiClientOptions& options, bool follow,
                               bool retry_after_send, const SendFn& send) {
  const absl::Time deadline = absl::Now() + options.failover_wait;
  std::vector<std::string> failures;
  while (true) {
    failures.clear();
    absl::StatusOr<Reply> reply = ExchangeOnce(
        urls, preferred, options, follow, retry_after_send, send, &failures);
    const bool failing_over =
        reply.ok() ? (reply->status == 307 ||
                      (reply->status == 503 &&
                       absl::StrContains(reply->body, "\"no_leader\"")))
                   : reply.status().code() == absl::StatusCode::kUnavailable &&
                         urls.size() > 1;
    if (!failing_over || absl::Now() >= deadline) {
      if (reply.ok() ||
          reply.status().code() != absl::StatusCode::kUnavailable) {
        return reply;
      }
      break;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  if (failures.size() == 1) {
    const size_t colon = failures[0].find(": ");
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the loom server at ", failures[0].substr(0, colon), ":",
        failures[0].substr(colon + 1)));
  }
  return absl::UnavailableError(absl::StrCat(
      "cannot reach any loom server (", absl::StrJoin(failures, "; "), ")"));
}

}  // namespace

std::string ServerErrorCode(const absl::Status& status) {
  auto code = status.GetPayload(kCodePayload);
  return code.has_value() ? std::string(*code) : std::string();
}

int HttpStatusOf(const absl::Status& status) {
  auto text = status.GetPayload(kHttpStatusPayload);
  int n = 0;
  if (!text.has_value() || !absl::SimpleAtoi(std::string(*text), &n)) return 0;
  return n;
}

absl::StatusOr<std::string> NormalizeServerUrl(std::string_view url) {
  std::string u(
      absl::StripAsciiWhitespace(absl::string_view(url.data(), url.size())));
  const std::string original = u;
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", original, "' is not a loom server URL (",
                     std::string(why), "; expected http://HOST:PORT)"));
  };
  if (u.empty()) return bad("empty");
  if (u.find("://") == std::string::npos) u = "http://" + u;
  std::string scheme = absl::AsciiStrToLower(u.substr(0, u.find("://")));
  if (scheme != "http" && scheme != "https") {
    return bad(absl::StrCat("unsupported scheme '", scheme, "'"));
  }
  std::string rest = u.substr(u.find("://") + 3);
  while (absl::EndsWith(rest, "/")) rest.pop_back();
  if (rest.find('/') != std::string::npos ||
      rest.find('?') != std::string::npos) {
    return bad("paths are not supported");
  }
  if (rest.find('@') != std::string::npos)
    return bad("user info is not supported");
  if (rest.empty()) return bad("no host");
  const std::string normalized = absl::StrCat(scheme, "://", rest);
  const HostPort hp = SplitUrl(normalized);
  if (hp.host.empty()) return bad("no host");
  int port = 0;
  if (!absl::SimpleAtoi(hp.port, &port) || port < 1 || port > 65535) {
    return bad(absl::StrCat("bad port '", hp.port, "'"));
  }
  return normalized;
}

ApiClient::ApiClient(std::vector<std::string> server_urls,
                     ApiClientOptions options)
    : urls_(std::move(server_urls)), options_(std::move(options)) {}

absl::StatusOr<nlohmann::json> ApiClient::Call(
    const std::string& method, const std::string& path, const std::string& body,
    const std::string& idempotency_key, const std::string& content_type) {
  if (urls_.empty()) {
    return absl::FailedPreconditionError("no loom server URL was given");
  }
  httplib::Headers headers = {{"Accept", "application/json"}};
  if (!options_.user.empty()) headers.emplace("X-Loom-User", options_.user);
  if (!options_.token.empty()) {
    headers.emplace("Authorization", "Bearer " + options_.token);
  }
  if (!idempotency_key.empty()) {
    headers.emplace("Idempotency-Key", idempotency_key);
  }
  const bool is_get = method == "GET";
  absl::StatusOr<Reply> reply =
      Exchange(urls_, &preferred_, options_, /*follow=*/false,
               /*retry_after_send=*/is_get || !idempotency_key.empty(),
               [&](httplib::Client& client) {
                 if (is_get) return client.Get(path, headers);
                 if (body.empty()) return client.Post(path, headers);
                 return client.Post(path, headers, body, content_type);
               });
  if (!reply.ok()) return reply.status();
  return JsonFromReply(*reply);
}

absl::StatusOr<nlohmann::json> ApiClient::SubmitJob(
    const nlohmann::json& spec) {
  // A random idempotency key makes the submission safe to send again when
  // the answer was lost (a server killed after writing the job): the server
  // that gets it again answers with the job already made.
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(getpid()) << 32 ^
                                   absl::ToUnixNanos(absl::Now()));
  const std::string key = absl::StrFormat("%016x%016x", rng(), rng());
  return Call(
      "POST", "/v1/jobs",
      spec.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), key);
}

absl::StatusOr<nlohmann::json> ApiClient::ListJobs(const JobFilter& filter) {
  std::vector<std::string> query;
  if (!filter.states.empty()) {
    query.push_back("state=" + Escape(absl::StrJoin(filter.states, ",")));
  }
  if (!filter.project.empty())
    query.push_back("project=" + Escape(filter.project));
  if (!filter.user.empty()) query.push_back("user=" + Escape(filter.user));
  if (filter.limit > 0) query.push_back(absl::StrCat("limit=", filter.limit));
  std::string path = "/v1/jobs";
  if (!query.empty()) absl::StrAppend(&path, "?", absl::StrJoin(query, "&"));
  return Call("GET", path, "");
}

absl::StatusOr<nlohmann::json> ApiClient::AccountingJobs(
    const AccountingFilter& filter) {
  std::vector<std::string> query;
  if (!filter.ids.empty()) {
    query.push_back("ids=" + Escape(absl::StrJoin(filter.ids, ",")));
  }
  if (!filter.user.empty()) query.push_back("user=" + Escape(filter.user));
  if (!filter.project.empty())
    query.push_back("project=" + Escape(filter.project));
  if (!filter.states.empty()) {
    query.push_back("state=" + Escape(absl::StrJoin(filter.states, ",")));
  }
  if (!filter.since.empty()) query.push_back("since=" + Escape(filter.since));
  if (!filter.until.empty()) query.push_back("until=" + Escape(filter.until));
  if (filter.limit > 0) query.push_back(absl::StrCat("limit=", filter.limit));
  std::string path = "/v1/accounting/jobs";
  if (!query.empty()) absl::StrAppend(&path, "?", absl::StrJoin(query, "&"));
  return Call("GET", path, "");
}

absl::StatusOr<nlohmann::json> ApiClient::Usage(const std::string& by,
                                                const std::string& since,
                                                const std::string& until,
                                                const std::string& per) {
  std::vector<std::string> query = {"by=" + Escape(by)};
  if (!since.empty()) query.push_back("since=" + Escape(since));
  if (!until.empty()) query.push_back("until=" + Escape(until));
  if (!per.empty()) query.push_back("per=" + Escape(per));
  return Call("GET", absl::StrCat("/v1/usage?", absl::StrJoin(query, "&")), "");
}

absl::StatusOr<nlohmann::json> ApiClient::GetJob(int64_t id) {
  return Call("GET", absl::StrCat("/v1/jobs/", id), "");
}

absl::StatusOr<nlohmann::json> ApiClient::GetJobRef(const std::string& ref) {
  return Call("GET", absl::StrCat("/v1/jobs/", ref), "");
}

absl::StatusOr<nlohmann::json> ApiClient::HoldJob(int64_t id) {
  return Call("POST", absl::StrCat("/v1/jobs/", id, "/hold"), "");
}

absl::StatusOr<nlohmann::json> ApiClient::CancelJob(int64_t id) {
  return Call("POST", absl::StrCat("/v1/jobs/", id, "/cancel"), "");
}

absl::StatusOr<nlohmann::json> ApiClient::ReleaseJob(int64_t id) {
  return Call("POST", absl::StrCat("/v1/jobs/", id, "/release"), "");
}

absl::StatusOr<nlohmann::json> ApiClient::ReleaseJobs(
    const std::vector<int64_t>& ids) {
  return Call("POST", "/v1/jobs/release", nlohmann::json{{"ids", ids}}.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ReportCheckpoint(int64_t id,
                                                           int64_t step) {
  return Call("POST", absl::StrCat("/v1/jobs/", id, "/checkpoint"),
              step >= 0 ? nlohmann::json{{"step", step}}.dump() : "{}");
}

absl::StatusOr<nlohmann::json> ApiClient::ListTokens() {
  return Call("GET", "/v1/tokens", "");
}

absl::StatusOr<nlohmann::json> ApiClient::CreateToken(
    const nlohmann::json& request) {
  return Call("POST", "/v1/tokens", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::RevokeToken(std::string_view id) {
  return Call("POST",
              absl::StrCat("/v1/tokens/", Escape(std::string(id)), "/revoke"),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::RevokeNode(std::string_view node) {
  return Call("POST",
              absl::StrCat("/v1/nodes/", Escape(std::string(node)), "/revoke"),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::WhoAmI() {
  return Call("GET", "/v1/whoami", "");
}

absl::StatusOr<nlohmann::json> ApiClient::JobEvents(int64_t id) {
  return Call("GET", absl::StrCat("/v1/jobs/", id, "/events"), "");
}

absl::Status ApiClient::StreamLogs(int64_t id, const LogRequest& request,
                                   const LogChunkFn& on_chunk) {
  if (urls_.empty()) {
    return absl::FailedPreconditionError("no loom server URL was given");
  }
  std::string path = absl::StrCat("/v1/jobs/", id, "/logs?task=", request.task,
                                  "&stream=", Escape(request.stream));
  if (request.run >= 0) absl::StrAppend(&path, "&run=", request.run);
  if (request.process > 0) absl::StrAppend(&path, "&process=", request.process);
  if (request.offset > 0) absl::StrAppend(&path, "&offset=", request.offset);

  if (request.follow) absl::StrAppend(&path, "&follow=1");
  httplib::Headers headers = {{"Accept", "text/plain"}};
  if (!options_.user.empty()) headers.emplace("X-Loom-User", options_.user);
  if (!options_.token.empty()) {
    headers.emplace("Authorization", "Bearer " + options_.token);
  }

  int status = 0;
  std::string error_body;
  absl::StatusOr<Reply> reply =
      Exchange(urls_, &preferred_, options_, request.follow,
               /*retry_after_send=*/false, [&](httplib::Client& client) {
                 status = 0;
                 error_body.clear();
                 return client.Get(
                     path, headers,
                     [&](const httplib::Response& response) {
                       status = response.status;
                       return true;
                     },
                     [&](const char* data, size_t size) {
                       if (status >= 200 && status < 300) {
                         return on_chunk(std::string_view(data, size));
                       }
                       if (error_body.size() < (1 << 20))
                         error_body.append(data, size);
                       return true;
                     });
               });
  if (!reply.ok()) return reply.status();
  if (reply->status < 200 || reply->status >= 300) {
    reply->body = std::move(error_body);
    return ErrorFromReply(*reply);
  }
  return absl::OkStatus();
}

absl::StatusOr<nlohmann::json> ApiClient::ListImages(std::string_view node) {
  return Call("GET",
              node.empty() ? std::string("/v1/images")
                           : "/v1/images?node=" + Escape(node),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::PullImage(
    const nlohmann::json& request) {
  return Call("POST", "/v1/images/pull", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ListDatasets() {
  return Call("GET", "/v1/datasets", "");
}

absl::StatusOr<nlohmann::json> ApiClient::AddDataset(
    const nlohmann::json& request) {
  return Call("POST", "/v1/datasets", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::DeleteDataset(std::string_view name) {
  return Call("POST", absl::StrCat("/v1/datasets/", Escape(name), "/delete"),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::PlanCluster(
    const nlohmann::json& request) {
  return Call("POST", "/v1/cluster/plan", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ApplyCluster(
    const nlohmann::json& request) {
  return Call("POST", "/v1/cluster/apply", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::RollbackCluster(
    const nlohmann::json& request) {
  return Call("POST", "/v1/cluster/rollback", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ClusterRevisions() {
  return Call("GET", "/v1/cluster/revisions", "");
}

absl::StatusOr<nlohmann::json> ApiClient::ClusterRevision(int64_t revision) {
  return Call("GET", absl::StrCat("/v1/cluster/revisions/", revision), "");
}

absl::StatusOr<nlohmann::json> ApiClient::StartMaintenance(
    const nlohmann::json& request) {
  return Call("POST", "/v1/maintenance", request.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ListMaintenances() {
  return Call("GET", "/v1/maintenance", "");
}

absl::StatusOr<nlohmann::json> ApiClient::GetMaintenance(int64_t id) {
  return Call("GET", absl::StrCat("/v1/maintenance/", id), "");
}

absl::StatusOr<nlohmann::json> ApiClient::MaintenanceAction(
    int64_t id, std::string_view action) {
  if (action != "pause" && action != "resume" && action != "abort") {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(action),
                     "' is not a maintenance action (pause, resume, abort)"));
  }
  return Call("POST",
              absl::StrCat("/v1/maintenance/", id, "/", std::string(action)),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::ListNodes() {
  return Call("GET", "/v1/nodes", "");
}

absl::StatusOr<nlohmann::json> ApiClient::GetNode(std::string_view name) {
  return Call("GET", "/v1/nodes/" + Escape(name), "");
}

absl::StatusOr<nlohmann::json> ApiClient::NodeAction(std::string_view name,
                                                     std::string_view action) {
  return Call(
      "POST",
      absl::StrCat("/v1/nodes/", Escape(name), "/", std::string(action)), "");
}

absl::StatusOr<nlohmann::json> ApiClient::CordonNode(std::string_view name) {
  return NodeAction(name, "cordon");
}

absl::StatusOr<nlohmann::json> ApiClient::UncordonNode(std::string_view name) {
  return NodeAction(name, "uncordon");
}

absl::StatusOr<nlohmann::json> ApiClient::DrainNode(std::string_view name) {
  return NodeAction(name, "drain");
}

absl::StatusOr<nlohmann::json> ApiClient::Chaos(const nlohmann::json& fault) {
  return Call("POST", "/v1/chaos", fault.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::ApplyService(
    const std::string& spec_text) {
  // The text as it is: the server parses YAML (JSON is YAML too) and
  // reports errors with the text's lines and columns. No idempotency key:
  // applying the same spec twice changes nothing the second time, but the
  // server keeps no keys for services, so a lost answer is not sent again.
  return Call("POST", "/v1/services", spec_text, "", "application/yaml");
}

absl::StatusOr<nlohmann::json> ApiClient::ListServices() {
  return Call("GET", "/v1/services", "");
}

absl::StatusOr<nlohmann::json> ApiClient::GetService(std::string_view name) {
  return Call("GET", "/v1/services/" + Escape(name), "");
}

absl::StatusOr<nlohmann::json> ApiClient::ScaleService(std::string_view name,
                                                       int replicas) {
  return Call("POST", absl::StrCat("/v1/services/", Escape(name), "/scale"),
              nlohmann::json{{"replicas", replicas}}.dump());
}

absl::StatusOr<nlohmann::json> ApiClient::DeleteService(std::string_view name) {
  return Call("POST", absl::StrCat("/v1/services/", Escape(name), "/delete"),
              "");
}

absl::StatusOr<nlohmann::json> ApiClient::GatewayConfig() {
  return Call("GET", "/v1/gateway/config", "");
}

absl::StatusOr<nlohmann::json> ApiClient::GatewayReport(
    const nlohmann::json& report) {
  return Call(
      "POST", "/v1/gateway/report",
      report.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

absl::StatusOr<nlohmann::json> ApiClient::ListProjects() {
  return Call("GET", "/v1/projects", "");
}

}  // namespace loom
