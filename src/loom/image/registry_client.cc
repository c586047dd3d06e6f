#include "loom/image/registry_client.h"

#include <httplib.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/image/absl_view.h"
#include "loom/image/sha256.h"

namespace loom::image {
namespace {

constexpr char kManifestAccept[] =
    "application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.oci.image.index.v1+json, "
    "application/vnd.docker.distribution.manifest.v2+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json";
constexpr size_t kMaxManifestBytes = 4 << 20;

void SetTimeout(httplib::Client& c, absl::Duration connect, absl::Duration io) {
  const auto split = [](absl::Duration d) {
    const int64_t us = absl::ToInt64Microseconds(d);
    return std::pair<time_t, time_t>(us / 1000000, us % 1000000);
  };
  auto [cs, cus] = split(connect);
  auto [is, ius] = split(io);
  c.set_connection_timeout(cs, cus);
  c.set_read_timeout(is, ius);
  c.set_write_timeout(is, ius);
}

// The codes and messages of a registry's error body:
// {"errors": [{"code": "MANIFEST_UNKNOWN", "message": "..."}]}.
std::string RegistryErrors(std::string_view body) {
  nlohmann::json j =
      nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("errors") || !j["errors"].is_array()) {
    return "";
  }
  std::vector<std::string> parts;
  for (const auto& e : j["errors"]) {
    if (!e.is_object()) continue;
    std::string code = e.value("code", "");
    std::string message = e.value("message", "");
    parts.push_back(message.empty() ? code : absl::StrCat(code, ": ", message));
  }
  return absl::StrJoin(parts, "; ");
}

}  // namespace

RegistryClient::RegistryClient(std::string registry, RegistryOptions options)
    : registry_(std::move(registry)),
      options_(std::move(options)),
      own_tokens_(options_.tokens == nullptr
                      ? std::make_shared<RegistryTokenCache>()
                      : nullptr),
      tokens_(options_.tokens != nullptr ? options_.tokens
                                         : own_tokens_.get()) {}

namespace {

constexpr int kMaxRegistryRedirects = 5;

// `origin`: "http://host:port".
std::unique_ptr<httplib::Client> NewClient(const std::string& origin,
                                           const RegistryOptions& options) {
  auto c = std::make_unique<httplib::Client>(origin);
  SetTimeout(*c, options.connect_timeout, options.io_timeout);
  // Followed by SendFollowingRedirects: httplib would carry the
  // Authorization header to whatever host a Location names.
  c->set_follow_location(false);
  c->set_keep_alive(false);
  return c;
}

// Sends one request for `target` on a client of an origin, with `headers`.
using RegistrySend = std::function<httplib::Result(
    httplib::Client&, const std::string& target, const httplib::Headers&)>;

// Sends `path` to the registry and follows its redirects (at most
// kMaxRegistryRedirects). `authorization` goes to the registry's own origin
// only, never to a blob store it redirects to; https is never followed to
// plain http.
absl::StatusOr<httplib::Result> SendFollowingRedirects(
    const std::string& registry, const RegistryOptions& options,
    std::string_view what, const std::string& path,
    const std::string& authorization, const RegistrySend& send) {
  const std::string home =
      absl::StrCat(options.plain_http ? "http://" : "https://",
                   absl::AsciiStrToLower(registry));
  std::string origin = home;
  std::string target = path;
  for (int hop = 0;; ++hop) {
    auto c = NewClient(origin, options);
    httplib::Headers headers;
    if (!authorization.empty() && origin == home) {
      headers.emplace("Authorization", authorization);
    }
    httplib::Result res = send(*c, target, headers);
    if (!res || res->status < 300 || res->status >= 400 || res->status == 304 ||
        !res->has_header("Location")) {
      return res;
    }
    if (hop == kMaxRegistryRedirects) {
      return absl::UnavailableError(
          absl::StrCat("registry ", registry, " redirected ", Av(what),
                       " more than ", kMaxRegistryRedirects, " times"));
    }
    const std::string location = res->get_header_value("Location");
    if (absl::StartsWith(location, "/") && !absl::StartsWith(location, "//")) {
      target = location;
      continue;
    }
    absl::StatusOr<HttpUrl> next = ParseHttpUrl(location);
    if (!next.ok()) {
      return absl::InternalError(absl::StrCat(
          "registry ", registry, " redirected ", Av(what),
          " to a URL loom does not follow: ", next.status().message()));
    }
    if (next->scheme == "http" && !options.plain_http) {
      return absl::InternalError(absl::StrCat(
          "registry ", registry, " redirected ", Av(what),
          " from https to plain http (", next->Origin(), "): refused"));
    }
    origin = next->Origin();
    target = next->target;
  }
}

std::vector<std::string> WwwAuthenticate(const httplib::Response& res) {
  std::vector<std::string> out;
  auto [begin, end] = res.headers.equal_range("WWW-Authenticate");
  for (auto it = begin; it != end; ++it) out.push_back(it->second);
  return out;
}

// Sends a request for `repository` ("" for GET /v2/) with the
// authorization the registry wants: a value kept in `tokens` for its pull
// scope first, else none; on a 401, the answer to its challenge
// (AnswerRegistryChallenge), once. A 401 after that is an error
// (RefusedAfterAnswer), as is one the challenge cannot be answered for.
// Any other answer is returned as it is.
absl::StatusOr<httplib::Result> AuthorizedSend(
    const std::string& registry, const RegistryOptions& options,
    RegistryTokenCache* tokens, std::string_view repository,
    std::string_view what, const std::string& path, const RegistrySend& send) {
  const std::string scope =
      repository.empty() ? ""
                         : absl::StrCat("repository:", Av(repository), ":pull");
  std::string authorization = tokens->Find(registry, scope).value_or("");
  RegistryChallengeContext context;
  context.registry = registry;
  context.plain_http = options.plain_http;
  context.connect_timeout = options.connect_timeout;
  context.io_timeout = options.io_timeout;
  context.credential =
      options.credential.has_value() ? &*options.credential : nullptr;
  context.tokens = tokens;
  context.repository = std::string(repository);
  std::optional<ChallengeAnswer> answered;
  // A kept value refused, a kept token refused, a fresh answer refused.
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<httplib::Result> res = SendFollowingRedirects(
        registry, options, what, path, authorization, send);
    if (!res.ok() || !*res || (**res).status != 401) return res;
    if (!authorization.empty()) tokens->Forget(registry, scope, authorization);
    if (answered.has_value() && !answered->reused) {
      return RefusedAfterAnswer(context, *answered);
    }
    context.refused = authorization;
    absl::StatusOr<ChallengeAnswer> a =
        AnswerRegistryChallenge(context, WwwAuthenticate(**res));
    if (!a.ok()) return a.status();
    authorization = a->authorization;
    tokens->Put(registry, scope, authorization, a->expires);
    answered = *std::move(a);
  }
  return RefusedAfterAnswer(context, *answered);
}

// A status for a request that did not get a 2xx answer. `what` says what
// was asked for ("manifest team/x:1").
absl::Status Failure(const std::string& registry, std::string_view what,
                     const httplib::Result& res) {
  if (!res) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach registry ", registry, " for ", Av(what),
                     ": ", httplib::to_string(res.error())));
  }
  const std::string errors = RegistryErrors(res->body);
  const std::string detail =
      absl::StrCat("registry ", registry, " answered ", res->status, " for ",
                   Av(what), errors.empty() ? "" : ": ", errors);
  const bool unknown = errors.find("_UNKNOWN") != std::string::npos;
  if (res->status == 404 || unknown) return absl::NotFoundError(detail);
  if (res->status == 401 || res->status == 403) {
    return absl::PermissionDeniedError(detail);
  }
  if (res->status == 429 || res->status >= 500) {
    return absl::UnavailableError(detail);
  }
  if (res->status == 400) return absl::InvalidArgumentError(detail);
  return absl::InternalError(detail);
}

bool Ok(const httplib::Result& res) {
  return res && res->status >= 200 && res->status < 300;
}

}  // namespace

absl::Status RegistryClient::Ping() const {
  absl::StatusOr<httplib::Result> sent = AuthorizedSend(
      registry_, options_, tokens_, "", "/v2/", "/v2/",
      [](httplib::Client& c, const std::string& target,
         const httplib::Headers& headers) { return c.Get(target, headers); });
  if (!sent.ok()) return sent.status();
  const httplib::Result& res = *sent;
  if (Ok(res)) return absl::OkStatus();
  if (res && res->status == 404) {
    return absl::UnavailableError(absl::StrCat(
        "registry ", registry_, " does not speak the v2 API (GET /v2/: 404)"));
  }
  return Failure(registry_, "/v2/", res);
}

absl::StatusOr<std::string> RegistryClient::Resolve(const ImageRef& ref) const {
  const std::string what = absl::StrCat("manifest ", ref.ToString());
  const std::string path = absl::StrCat("/v2/", ref.repository, "/manifests/",
                                        ref.ManifestReference());
  const auto send = [](bool head) -> RegistrySend {
    return [head](httplib::Client& c, const std::string& target,
                  httplib::Headers headers) {
      headers.emplace("Accept", kManifestAccept);
      return head ? c.Head(target, headers) : c.Get(target, headers);
    };
  };
  absl::StatusOr<httplib::Result> sent = AuthorizedSend(
      registry_, options_, tokens_, ref.repository, what, path, send(true));
  if (!sent.ok()) return sent.status();
  httplib::Result& res = *sent;
  if (Ok(res)) {
    std::string digest = res->get_header_value("Docker-Content-Digest");
    if (IsSha256Digest(digest)) {
      if (!ref.digest.empty() && digest != ref.digest) {
        return absl::DataLossError(absl::StrCat(
            "registry ", registry_, " says ", what, " is ", digest));
      }
      return digest;
    }
  } else if (res && res->status != 405) {
    // HEAD answers have no body: a GET says what the registry's error is.
    sent = AuthorizedSend(registry_, options_, tokens_, ref.repository, what,
                          path, send(false));
    if (!sent.ok()) return sent.status();
    return Failure(registry_, what, *sent);
  } else if (!res) {
    return Failure(registry_, what, res);
  }
  absl::StatusOr<RawManifest> m =
      FetchManifest(ref.repository, ref.ManifestReference());
  if (!m.ok()) return m.status();
  return m->digest;
}

absl::StatusOr<RegistryClient::RawManifest> RegistryClient::FetchManifest(
    std::string_view repository, std::string_view reference) const {
  const std::string what =
      absl::StrCat("manifest ", Av(repository),
                   IsSha256Digest(reference) ? "@" : ":", Av(reference));
  absl::StatusOr<httplib::Result> sent = AuthorizedSend(
      registry_, options_, tokens_, repository, what,
      absl::StrCat("/v2/", Av(repository), "/manifests/", Av(reference)),
      [](httplib::Client& c, const std::string& target,
         httplib::Headers headers) {
        headers.emplace("Accept", kManifestAccept);
        return c.Get(target, headers);
      });
  if (!sent.ok()) return sent.status();
  httplib::Result& res = *sent;
  if (!Ok(res)) return Failure(registry_, what, res);
  if (res->body.size() > kMaxManifestBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " is ", res->body.size(), " bytes, more than a manifest may be"));
  }
  RawManifest m;
  m.digest = Sha256::Of(res->body);
  if (IsSha256Digest(reference) && m.digest != reference) {
    return absl::DataLossError(absl::StrCat(
        "registry ", registry_, " sent ", what, " whose sha256 is ", m.digest));
  }
  m.media_type =
      ManifestMediaType(res->body, res->get_header_value("Content-Type"));
  m.body = std::move(res->body);
  return m;
}

absl::StatusOr<Manifest> RegistryClient::FetchImageManifest(
    const ImageRef& ref) const {
  absl::StatusOr<RawManifest> raw =
      FetchManifest(ref.repository, ref.ManifestReference());
  if (!raw.ok()) return raw.status();
  if (IsIndexMediaType(raw->media_type)) {
    absl::StatusOr<Descriptor> entry =
        PickPlatform(raw->body, options_.os, options_.architecture);
    if (!entry.ok()) {
      return absl::Status(
          entry.status().code(),
          absl::StrCat(ref.ToString(), ": ", entry.status().message()));
    }
    raw = FetchManifest(ref.repository, entry->digest);
    if (!raw.ok()) return raw.status();
  }
  absl::StatusOr<Manifest> m =
      ParseManifest(raw->body, raw->media_type, raw->digest);
  if (!m.ok()) {
    return absl::Status(m.status().code(), absl::StrCat(ref.ToString(), ": ",
                                                        m.status().message()));
  }
  return m;
}

absl::Status RegistryClient::FetchBlob(std::string_view repository,
                                       const Descriptor& blob,
                                       const std::string& path,
                                       const ByteProgress& progress) const {
  const std::string what =
      absl::StrCat("blob ", Av(repository), "@", blob.digest);
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(path.c_str(), "wb"),
                                            &std::fclose);
  if (out == nullptr) {
    return absl::InternalError(
        absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  Sha256 hash;
  int64_t received = 0;
  int status = 0;
  std::string error_body;
  bool write_failed = false;
  // Each send (a 401, a redirect, then the blob) starts afresh; only a 2xx
  // answer writes to the file.
  absl::StatusOr<httplib::Result> sent = AuthorizedSend(
      registry_, options_, tokens_, repository, what,
      absl::StrCat("/v2/", Av(repository), "/blobs/", blob.digest),
      [&](httplib::Client& c, const std::string& target,
          const httplib::Headers& headers) {
        status = 0;
        error_body.clear();
        return c.Get(
            target, headers,
            [&](const httplib::Response& r) {
              status = r.status;
              return true;
            },
            [&](const char* data, size_t n) {
              if (status < 200 || status >= 300) {
                if (error_body.size() < 64 << 10) error_body.append(data, n);
                return true;
              }
              received += static_cast<int64_t>(n);
              // More than the manifest said: stop.
              if (received > blob.size) return false;
              hash.Update(std::string_view(data, n));
              if (std::fwrite(data, 1, n, out.get()) != n) {
                write_failed = true;
                return false;
              }
              if (progress) progress(received);
              return true;
            });
      });
  const bool flushed = std::fflush(out.get()) == 0 && !write_failed;
  out.reset();
  const auto fail = [&](absl::Status s) {
    std::remove(path.c_str());
    return s;
  };
  if (!flushed) {
    return fail(absl::InternalError(absl::StrCat("cannot write ", path)));
  }
  if (received > blob.size) {
    return fail(absl::DataLossError(
        absl::StrCat("registry ", registry_, " sent more than the ", blob.size,
                     " bytes of ", what)));
  }
  if (!sent.ok()) return fail(sent.status());
  httplib::Result& res = *sent;
  if (!res) return fail(Failure(registry_, what, res));
  if (status < 200 || status >= 300) {
    res->body = std::move(error_body);
    return fail(Failure(registry_, what, res));
  }
  if (received != blob.size) {
    return fail(absl::DataLossError(
        absl::StrCat("registry ", registry_, " sent ", received, " of the ",
                     blob.size, " bytes of ", what)));
  }
  if (const std::string got = hash.Digest(); got != blob.digest) {
    return fail(absl::DataLossError(absl::StrCat(
        "registry ", registry_, " sent ", what, " whose sha256 is ", got)));
  }
  return absl::OkStatus();
}

}  // namespace loom::image
