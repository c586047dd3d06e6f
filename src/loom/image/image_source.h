#pragma once

// Where an ImageStore gets an image's manifest and blobs: a registry
// (RegistryImageSource, registry_source.h) or, in tests, a fake.

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "loom/image/image_ref.h"
#include "loom/image/manifest.h"
#include "loom/image/registry_client.h"

namespace loom::image {

class ImageSource {
 public:
  virtual ~ImageSource() = default;

  // The image manifest for this node's platform of `ref` (which has a
  // digest: of that manifest or of an index holding it).
  [[nodiscard]] virtual absl::StatusOr<Manifest> FetchManifest(
      const ImageRef& ref) = 0;

  // Writes the blob to `path`, verified against blob.digest and blob.size
  // (DataLoss otherwise, `path` then absent). Called from several threads
  // at once, for different blobs.
  [[nodiscard]] virtual absl::Status FetchBlob(
      const ImageRef& ref, const Descriptor& blob, const std::string& path,
      const ByteProgress& progress) = 0;
};

}  // namespace loom::image
