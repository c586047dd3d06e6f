#include "loom/server/image_resolver.h"

#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "loom/image/registry_client.h"

namespace loom {
namespace {

// The host of "host[:port]" ("[::1]:5000" gives "[::1]"), lower-cased.
std::string RegistryHost(const std::string& registry) {
  std::string host = registry;
  const size_t colon = host.rfind(':');
  const size_t bracket = host.rfind(']');
  if (colon != std::string::npos &&
      (bracket == std::string::npos || colon > bracket)) {
    host.resize(colon);
  }
  return absl::AsciiStrToLower(host);
}

bool HasPort(const std::string& registry) {
  return RegistryHost(registry).size() != registry.size();
}

}  // namespace

bool RegistryImageResolver::IsInsecure(const std::string& registry) const {
  const std::string host = RegistryHost(registry);
  for (const std::string& entry : options_.insecure_registries) {
    if (RegistryHost(entry) != host) continue;
    if (!HasPort(entry) ||
        absl::AsciiStrToLower(entry) == absl::AsciiStrToLower(registry)) {
      return true;
    }
  }
  return false;
}

absl::StatusOr<std::string> RegistryImageResolver::Resolve(
    const image::ImageRef& ref) {
  image::RegistryOptions o;
  o.plain_http = IsInsecure(ref.registry);
  o.connect_timeout = options_.connect_timeout;
  o.io_timeout = options_.io_timeout;
  if (const image::RegistryCredential* c =
          options_.credentials.For(ref.registry);
      c != nullptr) {
    o.credential = *c;
  }
  o.tokens = &tokens_;
  absl::StatusOr<std::string> digest =
      image::RegistryClient(ref.registry, o).Resolve(ref);
  if (absl::IsUnavailable(digest.status()) && options_.log) {
    options_.log(absl::StrCat("cannot resolve ", ref.ToString(), ": ",
                              digest.status().message()));
  }
  return digest;
}

absl::Status CheckInsecureRegistry(const std::string& value) {
  absl::StatusOr<image::ImageRef> ref =
      image::ParseImageRef(absl::StrCat(value, "/x"));
  if (!ref.ok() || ref->registry != value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", value,
        "' is not a registry HOST[:PORT] as an image reference starts with "
        "(e.g. localhost:5000 or registry.example.com)"));
  }
  return absl::OkStatus();
}

}  // namespace loom
