#pragma once

// Resolving a job's image reference to the digest it names now, at submit
// (docs/images.md): the one registry request the server makes for a job, so
// that every task of a gang and every restart runs the same bits.

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/image/image_ref.h"
#include "loom/image/registry_auth.h"
#include "loom/image/registry_token.h"

namespace loom {

// Says what digest a reference names. Implementations are thread-safe:
// route handlers call them concurrently, without any controller lock.
class ImageResolver {
 public:
  virtual ~ImageResolver() = default;

  // The digest ("sha256:<64 hex>") `ref` names now; a `ref` with a digest
  // is checked to exist. Errors as `image::RegistryClient::Resolve`'s:
  // NotFound (unknown repository, tag or digest), Unavailable (the registry
  // cannot be reached or is failing), Unauthenticated (the registry wants
  // credentials and there are none for it), PermissionDenied (it refused
  // the credentials, or the access), DataLoss (it answered with another
  // digest), others for answers loom cannot use. May block for a network
  // round trip, or two when a token must be fetched first.
  [[nodiscard]] virtual absl::StatusOr<std::string> Resolve(
      const image::ImageRef& ref) = 0;
};

struct RegistryImageResolverOptions {
  // Registries spoken to over plain http (`--insecure-registry`):
  // "host:port" matches that registry only, "host" that host on any port.
  // Every other registry is spoken to over https.
  std::vector<std::string> insecure_registries;
  absl::Duration connect_timeout = absl::Seconds(5);
  // Per read or write; a submit waits at most about this long for an
  // answer.
  absl::Duration io_timeout = absl::Seconds(10);
  // The operator's registry credentials (`--registry-auth`,
  // image/registry_auth.h): what each registry is asked with. Never from a
  // job spec.
  image::RegistryCredentials credentials;
  // Gets a line for the operator for each resolve a registry could not
  // answer (Unavailable), with the detail the user is not told (refused,
  // timed out, ...). Empty: not logged. Called from the resolving thread.
  std::function<void(const std::string&)> log;
};

// Resolves over each reference's registry's Distribution API
// (`image::RegistryClient::Resolve`: one HEAD request), with the
// credentials `options.credentials` has for the registry; the tokens a
// registry hands out are kept for the next submissions until they expire.
class RegistryImageResolver : public ImageResolver {
 public:
  explicit RegistryImageResolver(RegistryImageResolverOptions options)
      : options_(std::move(options)) {}

  absl::StatusOr<std::string> Resolve(const image::ImageRef& ref) override;

  // Whether `registry` ("host[:port]", as an ImageRef has it) is one of
  // `options.insecure_registries`.
  bool IsInsecure(const std::string& registry) const;

 private:
  const RegistryImageResolverOptions options_;  // constant after construction
  image::RegistryTokenCache tokens_;            // thread-safe
};

// Checks an `--insecure-registry` value: "host" or "host:port" as the first
// component of an image reference has it. InvalidArgument saying why not.
absl::Status CheckInsecureRegistry(const std::string& value);

}  // namespace loom
