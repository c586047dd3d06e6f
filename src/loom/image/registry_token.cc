#include "loom/image/registry_token.h"

#include <httplib.h>

#include <algorithm>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/image/absl_view.h"

namespace loom::image {
namespace {

constexpr size_t kMaxTokenAnswerBytes = 1 << 20;
constexpr size_t kMaxTokenBytes = 64 << 10;
// The Distribution token spec: a token lives 60 s unless `expires_in` says
// more, and never less.
constexpr absl::Duration kMinTokenLifetime = absl::Seconds(60);
// Longer lifetimes are cut to this: a token is not kept for ever.
constexpr absl::Duration kMaxTokenLifetime = absl::Hours(24);
// A token is not offered this close to its end.
constexpr absl::Duration kTokenExpirySlack = absl::Seconds(10);

bool IsChallengeTokenChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// RFC 3986 unreserved characters stay, everything else is %XX.
std::string FormEncode(std::string_view s) {
  std::string out;
  for (unsigned char c : s) {
    if (absl::ascii_isalnum(c) || c == '-' || c == '_' || c == '.' ||
        c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      absl::StrAppend(&out, "%", absl::Hex(c, absl::kZeroPad2));
    }
  }
  return out;
}

std::string CacheKey(std::string_view registry, std::string_view scope) {
  return absl::StrCat(absl::AsciiStrToLower(Av(registry)), "\n", Av(scope));
}

// "for team/train", or "" for a request of no repository (GET /v2/).
std::string ForRepository(const RegistryChallengeContext& c) {
  return c.repository.empty() ? "" : absl::StrCat(" for ", c.repository);
}

absl::Status RefusedCredentials(const RegistryChallengeContext& c,
                                std::string_view detail = "") {
  return absl::PermissionDeniedError(absl::StrCat(
      "registry ", c.registry, " refused the credentials", ForRepository(c),
      " (", c.credential->source, ")", Av(detail)));
}

absl::Status NeedsCredentialsWithheld(const RegistryChallengeContext& c,
                                      const std::string& withheld) {
  if (withheld.empty()) return NeedsRegistryCredentials(c);
  return absl::PermissionDeniedError(absl::StrCat(
      "registry ", c.registry, " needs credentials", ForRepository(c),
      ", and loom did not send them: ", withheld));
}

// A token answer's `error` (OAuth2) or registry-style `errors` code, for a
// message: codes only, never the body itself.
std::string TokenErrorCode(const std::string& body) {
  nlohmann::json j =
      nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "";
  std::string code;
  if (j.contains("error") && j["error"].is_string()) {
    code = j["error"].get<std::string>();
  } else if (j.contains("errors") && j["errors"].is_array() &&
             !j["errors"].empty() && j["errors"][0].is_object()) {
    code = j["errors"][0].value("code", "");
  }
  for (char c : code) {
    if (!IsChallengeTokenChar(c)) return "";
  }
  return code.size() > 64 ? "" : code;
}

struct TokenAnswerHttp {
  int status = 0;
  std::string body;
  bool too_big = false;
};

// One request to the realm, its body read up to kMaxTokenAnswerBytes.
absl::StatusOr<TokenAnswerHttp> SendRealmRequest(
    const RegistryChallengeContext& c, const HttpUrl& realm,
    httplib::Request req) {
  httplib::Client client(realm.Origin());
  const auto split = [](absl::Duration d) {
    const int64_t us = absl::ToInt64Microseconds(d);
    return std::pair<time_t, time_t>(us / 1000000, us % 1000000);
  };
  auto [cs, cus] = split(c.connect_timeout);
  auto [is, ius] = split(c.io_timeout);
  client.set_connection_timeout(cs, cus);
  client.set_read_timeout(is, ius);
  client.set_write_timeout(is, ius);
  client.set_follow_location(false);  // a redirect could take the secret away
  client.set_keep_alive(false);
  TokenAnswerHttp out;
  req.response_handler = [&out](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&out](const char* data, size_t n, uint64_t,
                                uint64_t) {
    if (out.body.size() + n > kMaxTokenAnswerBytes) {
      out.too_big = true;
      return false;
    }
    out.body.append(data, n);
    return true;
  };
  httplib::Result res = client.send(req);
  if (out.too_big) {
    return absl::UnavailableError(absl::StrCat(
        "the token realm ", realm.Origin(), " of registry ", c.registry,
        " answered more than ", kMaxTokenAnswerBytes, " bytes"));
  }
  if (!res) {
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the token realm ", realm.Origin(), " of registry ",
        c.registry, ": ", httplib::to_string(res.error())));
  }
  return out;
}

absl::StatusOr<ChallengeAnswer> AnswerBasic(const RegistryChallengeContext& c) {
  if (c.credential == nullptr) return NeedsRegistryCredentials(c);
  if (!c.credential->has_password()) {
    return absl::UnauthenticatedError(absl::StrCat(
        "registry ", c.registry, " wants a user name and password (Basic)",
        ForRepository(c), ", and ", c.credential->source,
        " has only an identitytoken"));
  }
  ChallengeAnswer a;
  a.authorization = absl::StrCat(
      "Basic ", absl::Base64Escape(absl::StrCat(c.credential->username, ":",
                                                c.credential->password)));
  if (a.authorization == c.refused) return RefusedCredentials(c);
  a.with_credential = true;
  return a;
}

absl::StatusOr<ChallengeAnswer> AnswerBearer(const RegistryChallengeContext& c,
                                             const AuthChallenge& challenge) {
  const auto param = [&challenge](const char* name) {
    auto it = challenge.params.find(name);
    return it == challenge.params.end() ? std::string() : it->second;
  };
  const std::string realm_text = param("realm");
  if (realm_text.empty()) {
    return absl::PermissionDeniedError(
        absl::StrCat("registry ", c.registry, " wants a Bearer token",
                     ForRepository(c), " but names no realm to get it from"));
  }
  absl::StatusOr<HttpUrl> realm = ParseHttpUrl(realm_text);
  if (!realm.ok()) {
    return absl::PermissionDeniedError(absl::StrCat("registry ", c.registry,
                                                    " names a token realm loom "
                                                    "will not use: ",
                                                    realm.status().message()));
  }
  const std::string registry_host =
      absl::AsciiStrToLower(AuthorityHost(c.registry));
  const std::string realm_host = AuthorityHost(realm->authority);
  const bool same_host = realm_host == registry_host;
  if (realm->scheme == "http") {
    if (!c.plain_http) {
      return absl::PermissionDeniedError(
          absl::StrCat("registry ", c.registry,
                       " (https) names a token realm over plain "
                       "http, ",
                       realm->Origin(), ": refused"));
    }
    if (!same_host && !IsLoopbackHost(realm_host)) {
      return absl::PermissionDeniedError(absl::StrCat(
          "registry ", c.registry,
          " names a token realm over plain http on "
          "another host, ",
          realm->Origin(),
          ": refused (an insecure registry's realm must be on its own host "
          "or a loopback address)"));
    }
  }
  const std::string scope = param("scope");
  const std::string service = param("service");
  const bool may_send =
      c.credential != nullptr && (realm->scheme == "https" || same_host);
  ChallengeAnswer a;
  a.with_credential = may_send;
  if (c.credential != nullptr && !may_send) {
    a.withheld = absl::StrCat(
        "its token realm ", realm->Origin(),
        " is on another host than the registry and not https, so loom sends "
        "it no credentials (",
        c.credential->source, ")");
  }
  if (!c.refused.empty()) c.tokens->Forget(c.registry, scope, c.refused);
  if (std::optional<std::string> cached = c.tokens->Find(c.registry, scope);
      cached.has_value() && *cached != c.refused) {
    a.authorization = *std::move(cached);
    a.reused = true;
    return a;
  }

  std::string query;
  if (!service.empty()) query = absl::StrCat("service=", FormEncode(service));
  for (absl::string_view s : absl::StrSplit(scope, ' ', absl::SkipEmpty())) {
    absl::StrAppend(&query, query.empty() ? "" : "&",
                    "scope=", FormEncode(Sv(s)));
  }
  httplib::Request req;
  if (may_send && !c.credential->identity_token.empty()) {
    // OAuth2 (the Distribution spec's oauth.md): the refresh token for an
    // access token.
    req.method = "POST";
    req.path = realm->target;
    req.body =
        absl::StrCat("grant_type=refresh_token&client_id=loom&",
                     "refresh_token=", FormEncode(c.credential->identity_token),
                     query.empty() ? "" : "&", query);
    req.headers.emplace("Content-Type", "application/x-www-form-urlencoded");
  } else {
    req.method = "GET";
    req.path = realm->target;
    if (!query.empty()) {
      absl::StrAppend(&req.path,
                      realm->target.find('?') == std::string::npos ? "?" : "&",
                      query);
    }
    if (may_send && c.credential->has_password()) {
      req.headers.emplace(
          "Authorization",
          absl::StrCat("Basic ", absl::Base64Escape(
                                     absl::StrCat(c.credential->username, ":",
                                                  c.credential->password))));
    } else {
      a.with_credential = false;
    }
  }
  absl::StatusOr<TokenAnswerHttp> http = SendRealmRequest(c, *realm, req);
  if (!http.ok()) return http.status();
  const std::string code = TokenErrorCode(http->body);
  const std::string detail =
      absl::StrCat(": the token realm ", realm->Origin(), " answered ",
                   http->status, code.empty() ? "" : " ", code);
  if (http->status == 429 || http->status >= 500) {
    return absl::UnavailableError(
        absl::StrCat("cannot get a token from registry ", c.registry,
                     ForRepository(c), detail));
  }
  if (http->status >= 400 && http->status < 500) {
    if (a.with_credential) return RefusedCredentials(c, detail);
    return NeedsCredentialsWithheld(c, a.withheld);
  }
  if (http->status < 200 || http->status >= 300) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot get a token from registry ", c.registry,
                     ForRepository(c), detail));
  }
  nlohmann::json j =
      nlohmann::json::parse(http->body, nullptr, /*allow_exceptions=*/false);
  std::string token;
  for (const char* field : {"token", "access_token"}) {
    if (j.is_object() && j.contains(field) && j[field].is_string() &&
        !j[field].get<std::string>().empty()) {
      token = j[field].get<std::string>();
      break;
    }
  }
  bool printable = !token.empty() && token.size() <= kMaxTokenBytes;
  for (char ch : token) printable = printable && ch > 0x20 && ch < 0x7f;
  if (!printable) {
    return absl::UnavailableError(absl::StrCat(
        "the token realm ", realm->Origin(), " of registry ", c.registry,
        " answered without a usable token (a \"token\" or \"access_token\" "
        "of printable characters)"));
  }
  absl::Duration lifetime = kMinTokenLifetime;
  if (j.contains("expires_in") && j["expires_in"].is_number()) {
    lifetime = std::clamp(absl::Seconds(j["expires_in"].get<double>()),
                          kMinTokenLifetime, kMaxTokenLifetime);
  }
  a.authorization = absl::StrCat("Bearer ", token);
  a.expires = c.tokens->Now() + lifetime - kTokenExpirySlack;
  c.tokens->Put(c.registry, scope, a.authorization, a.expires);
  return a;
}

}  // namespace

std::vector<AuthChallenge> ParseAuthChallenges(std::string_view s) {
  std::vector<AuthChallenge> out;
  size_t i = 0;
  const size_t n = s.size();
  const auto skip_space = [&] {
    while (i < n && (s[i] == ' ' || s[i] == '\t')) ++i;
  };
  const auto read_token = [&] {
    const size_t begin = i;
    while (i < n && IsChallengeTokenChar(s[i])) ++i;
    return s.substr(begin, i - begin);
  };
  while (i < n) {
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == ',')) ++i;
    if (i >= n) break;
    const std::string_view scheme = read_token();
    if (scheme.empty()) break;
    AuthChallenge c;
    c.scheme = absl::AsciiStrToLower(Av(scheme));
    for (;;) {
      skip_space();
      const size_t start = i;
      const std::string_view name = read_token();
      skip_space();
      if (name.empty() || i >= n || s[i] != '=') {
        i = start;  // not a parameter: the next challenge, or the end
        break;
      }
      ++i;
      skip_space();
      std::string value;
      if (i < n && s[i] == '"') {
        for (++i; i < n && s[i] != '"'; ++i) {
          if (s[i] == '\\' && i + 1 < n) ++i;
          value.push_back(s[i]);
        }
        if (i < n) ++i;  // the closing quote
      } else {
        value = std::string(read_token());
      }
      c.params[absl::AsciiStrToLower(Av(name))] = std::move(value);
      skip_space();
      if (i < n && s[i] == ',') {
        ++i;
        continue;
      }
      break;
    }
    out.push_back(std::move(c));
    skip_space();
    if (i < n && s[i] != ',' && !IsChallengeTokenChar(s[i])) break;
  }
  return out;
}

absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url) {
  HttpUrl u;
  std::string_view rest;
  for (const char* scheme : {"https", "http"}) {
    const std::string prefix = absl::StrCat(scheme, "://");
    if (url.size() >= prefix.size() &&
        absl::EqualsIgnoreCase(Av(url.substr(0, prefix.size())), prefix)) {
      u.scheme = scheme;
      rest = url.substr(prefix.size());
      break;
    }
  }
  if (u.scheme.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(url), "' is not an http:// or https:// URL"));
  }
  const size_t end = rest.find_first_of("/?#");
  const std::string_view authority = rest.substr(0, end);
  if (authority.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(url), "' has no host"));
  }
  for (char c : authority) {
    if (!(absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' ||
          c == '-' || c == '_' || c == ':' || c == '[' || c == ']')) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", Av(url),
                       "' has a host loom does not accept (user info, "
                       "spaces or other characters)"));
    }
  }
  u.authority = absl::AsciiStrToLower(Av(authority));
  std::string_view target =
      end == std::string_view::npos ? "" : rest.substr(end);
  target = target.substr(0, target.find('#'));
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", Av(url), "' has spaces or control characters"));
    }
  }
  u.target = target.empty() || target[0] != '/' ? absl::StrCat("/", Av(target))
                                                : std::string(target);
  return u;
}

std::string AuthorityHost(std::string_view authority) {
  const size_t colon = authority.rfind(':');
  const size_t bracket = authority.rfind(']');
  if (colon != std::string_view::npos &&
      (bracket == std::string_view::npos || colon > bracket)) {
    return std::string(authority.substr(0, colon));
  }
  return std::string(authority);
}

bool IsLoopbackHost(std::string_view host) {
  if (absl::EqualsIgnoreCase(Av(host), "localhost") || host == "[::1]") {
    return true;
  }
  if (!absl::StartsWith(Av(host), "127.")) return false;
  int parts = 0;
  for (absl::string_view p : absl::StrSplit(Av(host), '.')) {
    if (p.empty() || p.size() > 3) return false;
    for (char c : p) {
      if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return false;
    }
    ++parts;
  }
  return parts == 4;
}

std::optional<std::string> RegistryTokenCache::Find(
    std::string_view registry, std::string_view scope) const {
  const absl::Time now = now_();
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(CacheKey(registry, scope));
  if (it == entries_.end() || it->second.expires <= now) return std::nullopt;
  return it->second.authorization;
}

void RegistryTokenCache::Put(std::string_view registry, std::string_view scope,
                             std::string authorization, absl::Time expires) {
  const absl::Time now = now_();
  std::string key = CacheKey(registry, scope);
  absl::MutexLock lock(&mu_);
  if (entries_.size() >= kMaxEntries && !entries_.contains(key)) {
    std::erase_if(entries_,
                  [now](const auto& e) { return e.second.expires <= now; });
    if (entries_.size() >= kMaxEntries) entries_.clear();
  }
  entries_[std::move(key)] = Entry{std::move(authorization), expires};
}

void RegistryTokenCache::Forget(std::string_view registry,
                                std::string_view scope,
                                std::string_view authorization) {
  absl::MutexLock lock(&mu_);
  auto it = entries_.find(CacheKey(registry, scope));
  if (it != entries_.end() && it->second.authorization == authorization) {
    entries_.erase(it);
  }
}

absl::StatusOr<ChallengeAnswer> AnswerRegistryChallenge(
    const RegistryChallengeContext& context,
    const std::vector<std::string>& www_authenticate) {
  std::vector<AuthChallenge> challenges;
  for (const std::string& h : www_authenticate) {
    for (AuthChallenge& c : ParseAuthChallenges(h)) {
      challenges.push_back(std::move(c));
    }
  }
  for (const char* scheme : {"bearer", "basic"}) {
    for (const AuthChallenge& c : challenges) {
      if (c.scheme != scheme) continue;
      return c.scheme == "bearer" ? AnswerBearer(context, c)
                                  : AnswerBasic(context);
    }
  }
  if (challenges.empty()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "registry ", context.registry, " answered 401", ForRepository(context),
        " without a WWW-Authenticate challenge saying how to authenticate"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "registry ", context.registry, " wants ", challenges[0].scheme,
      " authentication", ForRepository(context),
      "; loom does Basic and Bearer only"));
}

absl::Status RefusedAfterAnswer(const RegistryChallengeContext& context,
                                const ChallengeAnswer& answer) {
  if (answer.with_credential) return RefusedCredentials(context);
  return NeedsCredentialsWithheld(context, answer.withheld);
}

absl::Status NeedsRegistryCredentials(const RegistryChallengeContext& context) {
  return absl::UnauthenticatedError(absl::StrCat(
      "registry ", context.registry, " needs credentials",
      ForRepository(context), ": none configured for ", context.registry));
}

}  // namespace loom::image
