#pragma once

// Registry credentials from the operator's file (docs/images.md, "Registry
// credentials"), never from a job spec: Docker's `config.json` format, as
// `docker login`, `podman login` and `skopeo login` write it:
//
//   {"auths": {"registry.example.com:5000": {"auth": "<base64 user:password>"},
//              "other.example.com": {"username": "u", "password": "p"},
//              "azure.example.com": {"auth": "<base64 user:>",
//                                    "identitytoken": "<refresh token>"}}}
//
// A key is `HOST[:PORT]` as an image reference starts with, optionally with
// `http://` or `https://` before it and a path after it (Docker's
// `https://index.docker.io/v1/`); it matches that registry exactly (the host
// without regard to case). Other top-level keys (`credsStore`,
// `credHelpers`, ...) are ignored: loom runs no credential helpers.

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::image {

// One registry's credentials. Secret: never log, print or put in a
// message anything but `source`.
struct RegistryCredential {
  std::string username;
  std::string password;
  // An OAuth2 refresh token (`identitytoken`), traded at a Bearer realm for
  // an access token; `username` may come with it, `password` is then empty.
  std::string identity_token;
  // Where the credential came from, for messages: `FILE auths["KEY"]`.
  std::string source;

  // Whether it can answer a Basic challenge (or go to a realm as Basic).
  bool has_password() const { return !username.empty() && !password.empty(); }
};

class RegistryCredentials {
 public:
  RegistryCredentials() = default;

  // Parses a config.json text. `file` names it in errors, which are
  // InvalidArgument and name the key at fault (`FILE: auths["KEY"].auth:
  // not base64`); they never quote a secret.
  [[nodiscard]] static absl::StatusOr<RegistryCredentials> Parse(
      std::string_view json, const std::string& file);

  // Reads and parses `path`. FailedPrecondition, with the `chmod` that fixes
  // it, when the file is not a regular file or group or others may read or
  // write it (as ssh refuses a private key); NotFound when it does not
  // exist.
  [[nodiscard]] static absl::StatusOr<RegistryCredentials> Load(
      const std::string& path);

  // The credential for `registry` ("host[:port]", as an ImageRef has it),
  // or null when the file has none.
  const RegistryCredential* For(std::string_view registry) const;

  // The registries the file has credentials for, sorted: names only, for
  // the log.
  std::vector<std::string> Registries() const;

  bool empty() const { return by_registry_.empty(); }

 private:
  std::map<std::string, RegistryCredential> by_registry_;  // lower-cased key
};

}  // namespace loom::image
