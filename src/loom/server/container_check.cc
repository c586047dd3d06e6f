#include "loom/server/container_check.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "loom/image/image_ref.h"

namespace loom {

absl::Status CheckContainer(const Cluster& cluster, const JobSpec& spec) {
  if (!spec.container.has_value()) return absl::OkStatus();
  const ContainerSpec& c = *spec.container;
  absl::StatusOr<image::ImageRef> ref = image::ParseImageRef(c.image);
  if (!ref.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("container.image: '", c.image,
                     "' is not an image reference: ", ref.status().message()));
  }
  // Before any connection: an operator's list keeps the server from
  // speaking to whatever host and port a reference names.
  if (absl::Status st = CheckContainerRegistry(
          ref->registry, cluster.containers.allowed_registries);
      !st.ok()) {
    return st;
  }
  return CheckContainerMounts(c, cluster.containers.allowed_mounts);
}

absl::Status ResolveContainer(const Cluster& cluster, ImageResolver* resolver,
                              JobSpec* spec) {
  if (!spec->container.has_value()) return absl::OkStatus();
  if (absl::Status st = CheckContainer(cluster, *spec); !st.ok()) return st;
  ContainerSpec& c = *spec->container;
  if (resolver == nullptr) {
    return absl::FailedPreconditionError(
        "container.image: this server cannot resolve images (it was started "
        "without a registry resolver)");
  }
  // Checked by CheckContainer.
  const image::ImageRef ref = *image::ParseImageRef(c.image);
  absl::StatusOr<std::string> digest = resolver->Resolve(ref);
  if (!digest.ok()) {
    const std::string why(digest.status().message());
    switch (digest.status().code()) {
      case absl::StatusCode::kNotFound:
        return absl::InvalidArgumentError(
            absl::StrCat("container.image: '", c.image, "' not found: ", why));
      case absl::StatusCode::kUnavailable:
        // One text whatever kept it: refused, timed out, reset, not HTTP,
        // failing. A user must not learn which ports of a host are open
        // (the resolver logs the detail for the operator).
        return absl::UnavailableError(absl::StrCat(
            "container.image: the registry ", ref.registry,
            " cannot be reached, so '", c.image,
            "' cannot be resolved to a digest (nothing was stored; retry "
            "later)"));
      case absl::StatusCode::kUnauthenticated:
      case absl::StatusCode::kPermissionDenied:
        // The registry is up; its credentials (the operator's
        // --registry-auth) or the user's image are at fault.
        return absl::InvalidArgumentError(
            absl::StrCat("container.image: cannot read '", c.image,
                         "' from its registry: ", why));
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("container.image: '", c.image, "': ", why));
    }
  }
  if (!image::IsSha256Digest(*digest)) {
    return absl::InvalidArgumentError(
        absl::StrCat("container.image: the registry ", ref.registry,
                     " answered '", *digest, "', which is not a digest"));
  }
  c.image_digest = *std::move(digest);
  return absl::OkStatus();
}

nlohmann::json ContainerLaunchJson(const ContainerSpec& spec) {
  std::string pinned = spec.image;
  if (absl::StatusOr<image::ImageRef> ref = image::ParseImageRef(spec.image);
      ref.ok() && !spec.image_digest.empty()) {
    pinned = absl::StrCat(ref->Name(), "@", spec.image_digest);
  }
  nlohmann::json mounts = nlohmann::json::array();
  for (const ContainerMount& m : spec.mounts) {
    mounts.push_back({{"source", m.source},
                      {"destination", m.destination},
                      {"readonly", m.readonly}});
  }
  nlohmann::json j = {
      {"image", pinned},
      {"image_ref", spec.image},
      {"mounts", std::move(mounts)},
      {"workdir", spec.workdir},
      {"entrypoint", spec.entrypoint.value_or(std::vector<std::string>{})},
      {"writable", spec.writable},
      {"shm_size", spec.shm_size_bytes}};
  if (spec.entrypoint.has_value() && spec.entrypoint->empty()) {
    j["no_entrypoint"] = true;
  }
  return j;
}

}  // namespace loom
