#pragma once

// An ImageSource that pulls from the registry each reference names, over the
// Distribution API (registry_client.h).

#include <functional>
#include <string>

#include "loom/image/image_source.h"
#include "loom/image/registry_client.h"

namespace loom::image {

class RegistryImageSource : public ImageSource {
 public:
  // `options_for` gives the options for a registry ("host:port"): plain
  // http for the ones the operator lists as insecure, the operator's
  // credentials for it, and the token cache the pulls share.
  explicit RegistryImageSource(
      std::function<RegistryOptions(const std::string& registry)> options_for)
      : options_for_(std::move(options_for)) {}

  absl::StatusOr<Manifest> FetchManifest(const ImageRef& ref) override {
    return Client(ref).FetchImageManifest(ref);
  }
  absl::Status FetchBlob(const ImageRef& ref, const Descriptor& blob,
                         const std::string& path,
                         const ByteProgress& progress) override {
    return Client(ref).FetchBlob(ref.repository, blob, path, progress);
  }

 private:
  RegistryClient Client(const ImageRef& ref) const {
    return RegistryClient(ref.registry, options_for_(ref.registry));
  }

  const std::function<RegistryOptions(const std::string&)> options_for_;
};

}  // namespace loom::image
