#pragma once

// An image reference as a job names it (docs/images.md):
// `HOST[:PORT]/PATH[:TAG][@sha256:HEX]`, in the grammar of the Distribution
// project's reference package, except that loom has no default registry: the
// first component must be a registry host (it contains '.' or ':', or is
// `localhost`, as Docker decides), else the reference is rejected.

#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace loom::image {

struct ImageRef {
  std::string registry;    // "host:5000"; the host is kept as written
  std::string repository;  // "team/train"
  std::string tag;         // "1.4"; "latest" when neither tag nor digest given
  std::string digest;      // "sha256:<64 hex>", or empty

  // `registry/repository[:tag][@digest]`; parsing it gives this reference.
  std::string ToString() const;
  // `registry/repository`.
  std::string Name() const;
  // This reference pinned to `digest` (the tag is kept, for display).
  ImageRef WithDigest(std::string digest) const;
  // What a registry's manifest URL takes: the digest when there is one,
  // else the tag.
  const std::string& ManifestReference() const {
    return digest.empty() ? tag : digest;
  }

  friend bool operator==(const ImageRef&, const ImageRef&) = default;
};

// Parses `text`. InvalidArgument naming the part at fault (registry host,
// repository path component, tag, digest) and what it should be.
[[nodiscard]] absl::StatusOr<ImageRef> ParseImageRef(std::string_view text);

// Whether `digest` is `sha256:` and 64 lowercase hex digits (the only digest
// loom accepts).
bool IsSha256Digest(std::string_view digest);

// The 64 hex digits of a digest that IsSha256Digest accepts.
inline std::string_view DigestHex(std::string_view digest) {
  return digest.substr(digest.find(':') + 1);
}

}  // namespace loom::image
