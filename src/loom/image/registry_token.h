#pragma once

// How a registry wants its requests authorized (docs/images.md, "Registry
// credentials"): the `WWW-Authenticate` challenges of its 401 answers, the
// Distribution token flow (a Bearer token from the challenge's realm), and
// the cache of `Authorization` values shared by a process's clients.
//
// Where credentials go: to the registry itself (Basic), and to a Bearer
// realm that is https, or on the registry's own host. A realm over plain
// http is accepted only for a registry spoken to over plain http (an
// operator's insecure registry), and only on the registry's host or a
// loopback address; a realm on another host over plain http gets an
// anonymous token request.

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "loom/image/registry_auth.h"

namespace loom::image {

// One challenge of a `WWW-Authenticate` header (RFC 7235).
struct AuthChallenge {
  std::string scheme;                         // lower-cased: "basic", "bearer"
  std::map<std::string, std::string> params;  // keys lower-cased
};

// The challenges of one header value: `Bearer realm="...",service="..."`,
// several separated by commas. Malformed parts end the parse; what was
// parsed before them is returned.
std::vector<AuthChallenge> ParseAuthChallenges(std::string_view header);

// An http(s) URL split as a client needs it.
struct HttpUrl {
  std::string scheme;     // "http" or "https"
  std::string authority;  // "host[:port]", lower-cased
  std::string target;     // "/path?query" ("/" when the URL has no path)

  std::string Origin() const { return scheme + "://" + authority; }
};

// InvalidArgument unless `url` is `http://` or `https://`, a host (no user
// info), then an optional path and query (a fragment is dropped).
absl::StatusOr<HttpUrl> ParseHttpUrl(std::string_view url);

// The host of "host[:port]" ("[::1]:5000" gives "[::1]").
std::string AuthorityHost(std::string_view authority);

// Whether `host` (as AuthorityHost gives it) is `localhost`, 127.0.0.0/8 or
// [::1].
bool IsLoopbackHost(std::string_view host);

// `Authorization` values for (registry, scope), kept until they expire: a
// Bearer token until shortly before its `expires_in`, the Basic value until
// the registry refuses it. Thread-safe. Bounded: past `kMaxEntries` the
// expired entries go, then all of them.
class RegistryTokenCache {
 public:
  static constexpr size_t kMaxEntries = 1024;

  explicit RegistryTokenCache(std::function<absl::Time()> now =
                                  [] { return absl::Now(); })
      : now_(std::move(now)) {}

  // The value kept for `registry` and `scope` that has not expired.
  std::optional<std::string> Find(std::string_view registry,
                                  std::string_view scope) const;
  void Put(std::string_view registry, std::string_view scope,
           std::string authorization, absl::Time expires);
  // Drops the entry for `registry` and `scope` if it holds `authorization`
  // (the registry refused it).
  void Forget(std::string_view registry, std::string_view scope,
              std::string_view authorization);
  absl::Time Now() const { return now_(); }

 private:
  struct Entry {
    std::string authorization;
    absl::Time expires;
  };
  const std::function<absl::Time()> now_;
  mutable absl::Mutex mu_;
  std::map<std::string, Entry> entries_ ABSL_GUARDED_BY(mu_);
};

// What the client knows when a registry answers 401.
struct RegistryChallengeContext {
  std::string registry;  // "host[:port]"
  bool plain_http = false;
  absl::Duration connect_timeout = absl::Seconds(5);
  absl::Duration io_timeout = absl::Seconds(60);
  const RegistryCredential* credential = nullptr;  // null: none configured
  RegistryTokenCache* tokens = nullptr;            // not null
  std::string repository;  // for messages; "" for GET /v2/
  // The Authorization value the refused request carried ("" for none): a
  // cached token that is refused is not offered again.
  std::string refused;
};

// How the refused request is to be sent again.
struct ChallengeAnswer {
  std::string authorization;  // "Basic ..." or "Bearer ..."
  absl::Time expires = absl::InfiniteFuture();
  bool with_credential = false;  // the credential went to the registry/realm
  bool reused = false;           // a token from the cache, not fetched now
  // Set when a credential is configured but was not sent: why not.
  std::string withheld;
};

// Answers the 401's challenges (`www_authenticate`: its header values):
// Basic with the credential's user and password; Bearer with a token from
// the realm, asked for with `service` and `scope`, with the credential as
// Basic (or its identitytoken as an OAuth2 refresh token) when the realm
// may have it, anonymously otherwise. The token is put in `tokens` under
// the challenge's scope. Errors: Unauthenticated "registry R needs
// credentials for REPO: none configured for R"; PermissionDenied "registry
// R refused the credentials for REPO" (the realm said 401 or 403);
// Unavailable when the realm cannot be reached or fails; PermissionDenied
// for a challenge or realm loom will not answer. Messages never hold a
// secret.
absl::StatusOr<ChallengeAnswer> AnswerRegistryChallenge(
    const RegistryChallengeContext& context,
    const std::vector<std::string>& www_authenticate);

// The errors for a request refused again after `answer`: "refused the
// credentials", "needs credentials ... not sent: why", or "needs
// credentials: none configured".
absl::Status RefusedAfterAnswer(const RegistryChallengeContext& context,
                                const ChallengeAnswer& answer);

// "registry R needs credentials for REPO: none configured for R"
// (Unauthenticated).
absl::Status NeedsRegistryCredentials(const RegistryChallengeContext& context);

}  // namespace loom::image
