#pragma once

// A client of one registry's Distribution API (the Docker Registry HTTP API
// v2, which OCI's distribution spec standardises): resolve a tag to its
// digest, fetch a manifest by digest (verified), pick this node's platform
// from an index, and stream a blob to a file while hashing it
// (docs/images.md). A registry that answers 401 gets what its challenge
// asks for (registry_token.h): Basic with the operator's credentials for it,
// or a Bearer token from its realm; tokens are kept in a RegistryTokenCache
// for the next requests. Redirects are followed by this client, and carry
// the Authorization header only back to the registry itself.
//
// Errors: NotFound for an unknown repository, tag, manifest or blob (404, or
// the registry's MANIFEST_UNKNOWN, NAME_UNKNOWN, BLOB_UNKNOWN codes);
// Unavailable when the registry cannot be reached or answers 5xx/429;
// DataLoss when content does not match its digest or size; InvalidArgument
// when a manifest is not one loom can run; Unauthenticated "registry R needs
// credentials for REPO: none configured for R" when it wants credentials
// and has none, PermissionDenied "registry R refused the credentials for
// REPO (FILE ...)" when it refuses them, and for a 403. Messages name the
// registry and what was asked for, never a secret.
//
// Thread-safe: each request uses its own connection.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/image/image_ref.h"
#include "loom/image/manifest.h"
#include "loom/image/registry_auth.h"
#include "loom/image/registry_token.h"

namespace loom::image {

struct RegistryOptions {
  // Plain http instead of https: for a registry on loopback in tests, or one
  // the operator lists as insecure. The wiring decides; this client does not.
  bool plain_http = false;
  absl::Duration connect_timeout = absl::Seconds(5);
  // Per read or write on the connection, not for a whole blob.
  absl::Duration io_timeout = absl::Seconds(60);
  // The platform picked from an index.
  std::string os = "linux";
  std::string architecture = "amd64";
  // The operator's credentials for this registry (registry_auth.h); unset:
  // anonymous requests only.
  std::optional<RegistryCredential> credential;
  // Authorization values (tokens, the Basic value) shared between clients
  // and kept until they expire; not owned, must outlive the client. Null:
  // the client keeps its own, for its lifetime.
  RegistryTokenCache* tokens = nullptr;
};

// Bytes of the current blob received so far.
using ByteProgress = std::function<void(int64_t bytes)>;

class RegistryClient {
 public:
  // `registry` is an ImageRef's registry: "host[:port]".
  explicit RegistryClient(std::string registry, RegistryOptions options = {});

  // GET /v2/: the registry speaks the v2 API.
  [[nodiscard]] absl::Status Ping() const;

  // The digest of what `ref` names now (a manifest, or an index when the
  // image is multi-platform): one HEAD request, its Docker-Content-Digest
  // (a GET and the body's sha256 when the registry sends none). A ref that
  // has a digest is checked against the registry by the same request.
  [[nodiscard]] absl::StatusOr<std::string> Resolve(const ImageRef& ref) const;

  struct RawManifest {
    std::string body;
    std::string media_type;
    std::string digest;  // sha256 of body
  };
  // GET /v2/<repository>/manifests/<reference>. When `reference` is a
  // digest the body must hash to it (DataLoss otherwise).
  [[nodiscard]] absl::StatusOr<RawManifest> FetchManifest(
      std::string_view repository, std::string_view reference) const;

  // The image manifest `ref` names (its digest when it has one, else its
  // tag), through the index entry for options.os/architecture when it names
  // an index. The result's digest is the platform manifest's.
  [[nodiscard]] absl::StatusOr<Manifest> FetchImageManifest(
      const ImageRef& ref) const;

  // GET /v2/<repository>/blobs/<digest> into `path` (created or truncated),
  // hashing as it goes; DataLoss, and `path` removed, unless the bytes match
  // blob.digest and blob.size. `progress` (may be empty) gets the running
  // byte count.
  [[nodiscard]] absl::Status FetchBlob(std::string_view repository,
                                       const Descriptor& blob,
                                       const std::string& path,
                                       const ByteProgress& progress) const;

  const std::string& registry() const { return registry_; }

 private:
  // Constant after construction.
  const std::string registry_;
  const RegistryOptions options_;
  const std::shared_ptr<RegistryTokenCache> own_tokens_;  // when none given
  RegistryTokenCache* const tokens_;  // options_.tokens or own_tokens_
};

}  // namespace loom::image
