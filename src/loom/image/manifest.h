#pragma once

// OCI image manifests and indexes (and Docker's schema 2 manifest and
// manifest list, which have the same shape): what a registry serves for an
// image, parsed into what the store needs (docs/images.md).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::image {

inline constexpr std::string_view kOciManifest =
    "application/vnd.oci.image.manifest.v1+json";
inline constexpr std::string_view kOciIndex =
    "application/vnd.oci.image.index.v1+json";
inline constexpr std::string_view kDockerManifest =
    "application/vnd.docker.distribution.manifest.v2+json";
inline constexpr std::string_view kDockerManifestList =
    "application/vnd.docker.distribution.manifest.list.v2+json";

// A content descriptor: what a manifest says about a blob or a manifest.
struct Descriptor {
  std::string media_type;
  std::string digest;  // sha256:<hex>
  int64_t size = 0;
  // Platform, for the entries of an index.
  std::string os;
  std::string architecture;
  std::string variant;
};

// An image manifest: its config and layers, bottom layer first.
struct Manifest {
  std::string digest;  // of the manifest's own bytes
  std::string media_type;
  Descriptor config;
  std::vector<Descriptor> layers;

  int64_t LayerBytes() const;
};

// Whether `media_type` names an index (OCI index, Docker manifest list).
bool IsIndexMediaType(std::string_view media_type);
// Whether `media_type` is a layer loom can unpack: a tar, optionally gzip or
// zstd compressed (OCI and Docker layer types; not foreign layers).
bool IsUnpackableLayer(std::string_view media_type);

// Parses an image manifest. `media_type` is the registry's Content-Type
// (the body's own mediaType wins when it has one). InvalidArgument when it is
// not an image manifest, when a digest is not sha256, or when a layer's type
// cannot be unpacked.
[[nodiscard]] absl::StatusOr<Manifest> ParseManifest(
    std::string_view body, std::string_view media_type, std::string digest);

// The entry of an index for `os`/`architecture` (the first that matches;
// an empty variant matches any). NotFound naming the platforms there are.
[[nodiscard]] absl::StatusOr<Descriptor> PickPlatform(
    std::string_view index_body, std::string_view os,
    std::string_view architecture);

// The media type of a manifest body: its mediaType field, else `fallback`.
std::string ManifestMediaType(std::string_view body, std::string_view fallback);

}  // namespace loom::image
