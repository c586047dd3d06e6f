#include "loom/store/etcd_client.h"

#include <httplib.h>

#include <algorithm>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace loom {
namespace {

// Idle connections kept per endpoint.
constexpr size_t kMaxIdle = 8;

absl::Status EtcdError(const nlohmann::json& answer, int http_status,
                       const std::string& endpoint) {
  int code = static_cast<int>(absl::StatusCode::kUnknown);
  std::string message;
  if (answer.is_object()) {
    for (const char* key : {"code", "grpc_code"}) {
      if (answer.contains(key) && answer[key].is_number_integer()) {
        code = answer[key].get<int>();
      }
    }
    if (answer.contains("message") && answer["message"].is_string()) {
      message = answer["message"].get<std::string>();
    } else if (answer.contains("error") && answer["error"].is_string()) {
      message = answer["error"].get<std::string>();
    }
  }
  if (code <= 0 || code > 16)
    code = static_cast<int>(absl::StatusCode::kUnknown);
  if (message.empty()) message = absl::StrCat("HTTP ", http_status);
  return absl::Status(static_cast<absl::StatusCode>(code),
                      absl::StrCat("etcd at ", endpoint, ": ", message));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseEtcdEndpoints(
    std::string_view list) {
  std::vector<std::string> out;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(list.data(), list.size()), ',',
                      absl::SkipWhitespace())) {
    std::string url(absl::StripAsciiWhitespace(part));
    if (!absl::StartsWith(url, "http://")) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", url, "': expected http://HOST:PORT"));
    }
    absl::string_view hostport = absl::string_view(url).substr(7);
    const size_t colon = hostport.rfind(':');
    int port = 0;
    if (colon == absl::string_view::npos || colon == 0 ||
        !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port <= 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("etcd endpoint '", url, "': expected http://HOST:PORT"));
    }
    while (!url.empty() && url.back() == '/') url.pop_back();
    out.push_back(std::move(url));
  }
  if (out.empty()) {
    return absl::InvalidArgumentError("no etcd endpoints given");
  }
  return out;
}

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(
    EtcdClientOptions options) {
  if (options.endpoints.empty()) {
    return absl::InvalidArgumentError("no etcd endpoints given");
  }
  std::string joined;
  for (const std::string& e : options.endpoints) {
    absl::StrAppend(&joined, joined.empty() ? "" : ",", e);
  }
  absl::StatusOr<std::vector<std::string>> checked = ParseEtcdEndpoints(joined);
  if (!checked.ok()) return checked.status();
  options.endpoints = *std::move(checked);
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(options)));
}

EtcdClient::EtcdClient(EtcdClientOptions options)
    : options_(std::move(options)) {
  idle_.resize(options_.endpoints.size());
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::CurrentEndpoint() const {
  absl::MutexLock lock(&mu_);
  return options_.endpoints[current_];
}

std::unique_ptr<httplib::Client> EtcdClient::TakeConnection(size_t endpoint) {
  {
    absl::MutexLock lock(&mu_);
    auto& idle = idle_[endpoint];
    if (!idle.empty()) {
      std::unique_ptr<httplib::Client> c = std::move(idle.back());
      idle.pop_back();
      return c;
    }
  }
  auto c = std::make_unique<httplib::Client>(options_.endpoints[endpoint]);
  c->set_keep_alive(true);
  c->set_tcp_nodelay(true);
  const int64_t ms =
      std::max<int64_t>(1, absl::ToInt64Milliseconds(options_.timeout));
  c->set_connection_timeout(
      std::chrono::milliseconds(std::min<int64_t>(ms, 1000)));
  c->set_read_timeout(std::chrono::milliseconds(ms));
  c->set_write_timeout(std::chrono::milliseconds(ms));
  return c;
}

void EtcdClient::ReturnConnection(size_t endpoint,
                                  std::unique_ptr<httplib::Client> c) {
  absl::MutexLock lock(&mu_);
  if (idle_[endpoint].size() < kMaxIdle) {
    idle_[endpoint].push_back(std::move(c));
  }
}

absl::StatusOr<nlohmann::json> EtcdClient::Call(std::string_view path,
                                                const nlohmann::json& body) {
  const std::string payload = body.dump();
  const std::string p(path);
  size_t start;
  {
    absl::MutexLock lock(&mu_);
    start = current_;
  }
  const size_t n = options_.endpoints.size();
  std::string errors;
  for (size_t i = 0; i < n; ++i) {
    const size_t e = (start + i) % n;
    std::unique_ptr<httplib::Client> c = TakeConnection(e);
    httplib::Result r = c->Post(p, payload, "application/json");
    if (!r) {
      const httplib::Error err = r.error();
      absl::StrAppend(&errors, errors.empty() ? "" : "; ",
                      options_.endpoints[e], ": ", httplib::to_string(err));
      if (err == httplib::Error::Connection) continue;  // not sent: next one
      return absl::UnavailableError(
          absl::StrCat("etcd call ", p, " failed: ", errors));
    }
    ReturnConnection(e, std::move(c));
    {
      absl::MutexLock lock(&mu_);
      current_ = e;
    }
    nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
    if (r->status != 200)
      return EtcdError(answer, r->status, options_.endpoints[e]);
    if (answer.is_discarded() || !answer.is_object()) {
      return absl::UnavailableError(
          absl::StrCat("etcd at ", options_.endpoints[e], " answered ", p,
                       " with something that is not a JSON object"));
    }
    return answer;
  }
  return absl::UnavailableError(
      absl::StrCat("no etcd endpoint reachable (", errors, ")"));
}

absl::Status EtcdClient::Stream(
    std::string_view path, const nlohmann::json& body, absl::Time deadline,
    const std::function<bool(const nlohmann::json&)>& on_message) {
  std::string endpoint = CurrentEndpoint();
  httplib::Client c(endpoint);
  c.set_connection_timeout(std::chrono::seconds(1));
  const absl::Duration left =
      std::max(deadline - absl::Now(), absl::Milliseconds(1));
  c.set_read_timeout(absl::ToChronoMilliseconds(left));
  httplib::Request req;
  req.method = "POST";
  req.path = std::string(path);
  req.body = body.dump();
  req.set_header("Content-Type", "application/json");
  std::string buffer;
  bool stopped = false;
  absl::Status bad;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      if (absl::StripAsciiWhitespace(line).empty()) continue;
      nlohmann::json m = nlohmann::json::parse(line, nullptr, false);
      if (m.is_discarded()) {
        bad = absl::UnavailableError(absl::StrCat(
            "etcd at ", endpoint, ": a stream message is not JSON"));
        return false;
      }
      if (m.contains("error")) {
        bad = EtcdError(m["error"], 200, endpoint);
        return false;
      }
      if (!on_message(m)) {
        stopped = true;
        return false;
      }
    }
    if (absl::Now() >= deadline) return false;
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  (void)c.send(req, res, err);
  if (stopped) return absl::OkStatus();
  if (!bad.ok()) return bad;
  if (err == httplib::Error::Success && res.status != 200) {
    nlohmann::json answer = nlohmann::json::parse(res.body, nullptr, false);
    return EtcdError(answer, res.status, endpoint);
  }
  if (absl::Now() >= deadline || err == httplib::Error::Read ||
      err == httplib::Error::Canceled) {
    return absl::DeadlineExceededError(
        absl::StrCat("etcd stream ", req.path, " at ", endpoint,
                     ": no answer before the deadline"));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd stream ", req.path, " at ", endpoint, " ended: ",
                   err == httplib::Error::Success ? std::string("end of stream")
                                                  : httplib::to_string(err)));
}

std::string EtcdClient::Encode(std::string_view bytes) {
  return absl::Base64Escape(absl::string_view(bytes.data(), bytes.size()));
}

absl::StatusOr<std::string> EtcdClient::Decode(const nlohmann::json& parent,
                                               const char* field) {
  auto it = parent.find(field);
  if (it == parent.end() || it->is_null()) return std::string();
  std::string out;
  if (!it->is_string() || !absl::Base64Unescape(it->get<std::string>(), &out)) {
    return absl::DataLossError(
        absl::StrCat("etcd answer: field '", field, "' is not base64"));
  }
  return out;
}

int64_t EtcdClient::Int(const nlohmann::json& parent, const char* field) {
  auto it = parent.find(field);
  if (it == parent.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  int64_t v = 0;
  if (it->is_string() && absl::SimpleAtoi(it->get<std::string>(), &v)) {
    return v;
  }
  return 0;
}

}  // namespace loom
