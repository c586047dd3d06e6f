#include "loom/image/manifest.h"

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/image/absl_view.h"
#include "loom/image/image_ref.h"

namespace loom::image {
namespace {

using nlohmann::json;

absl::StatusOr<json> ParseJson(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("manifest is not a JSON object");
  }
  return j;
}

std::string StringField(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

absl::StatusOr<Descriptor> ParseDescriptor(const json& j,
                                           std::string_view what) {
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(what), " is not an object"));
  }
  Descriptor d;
  d.media_type = StringField(j, "mediaType");
  d.digest = StringField(j, "digest");
  if (!IsSha256Digest(d.digest)) {
    return absl::InvalidArgumentError(absl::StrCat(
        Av(what), ": digest \"", d.digest, "\" is not a sha256 digest"));
  }
  auto size = j.find("size");
  if (size == j.end() || !size->is_number_integer() ||
      size->get<int64_t>() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(Av(what), ": no size (a non-negative integer)"));
  }
  d.size = size->get<int64_t>();
  if (auto p = j.find("platform"); p != j.end() && p->is_object()) {
    d.os = StringField(*p, "os");
    d.architecture = StringField(*p, "architecture");
    d.variant = StringField(*p, "variant");
  }
  return d;
}

}  // namespace

int64_t Manifest::LayerBytes() const {
  int64_t total = 0;
  for (const Descriptor& layer : layers) total += layer.size;
  return total;
}

bool IsIndexMediaType(std::string_view media_type) {
  return media_type == kOciIndex || media_type == kDockerManifestList;
}

bool IsUnpackableLayer(std::string_view media_type) {
  return media_type == "application/vnd.oci.image.layer.v1.tar" ||
         media_type == "application/vnd.oci.image.layer.v1.tar+gzip" ||
         media_type == "application/vnd.oci.image.layer.v1.tar+zstd" ||
         media_type == "application/vnd.docker.image.rootfs.diff.tar.gzip";
}

std::string ManifestMediaType(std::string_view body,
                              std::string_view fallback) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    std::string own = StringField(j, "mediaType");
    if (!own.empty()) return own;
  }
  // Content-Type may carry parameters ("...+json; charset=utf-8").
  return std::string(fallback.substr(0, fallback.find(';')));
}

absl::StatusOr<Manifest> ParseManifest(std::string_view body,
                                       std::string_view media_type,
                                       std::string digest) {
  absl::StatusOr<json> j = ParseJson(body);
  if (!j.ok()) return j.status();
  Manifest m;
  m.digest = std::move(digest);
  m.media_type = ManifestMediaType(body, media_type);
  if (m.media_type != kOciManifest && m.media_type != kDockerManifest) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest type \"", m.media_type,
                     "\" is not an OCI or Docker schema 2 image manifest"));
  }
  auto config = j->find("config");
  if (config == j->end()) {
    return absl::InvalidArgumentError("manifest has no config");
  }
  absl::StatusOr<Descriptor> c = ParseDescriptor(*config, "manifest config");
  if (!c.ok()) return c.status();
  m.config = *std::move(c);
  auto layers = j->find("layers");
  if (layers == j->end() || !layers->is_array()) {
    return absl::InvalidArgumentError("manifest has no layers array");
  }
  for (size_t i = 0; i < layers->size(); ++i) {
    absl::StatusOr<Descriptor> d =
        ParseDescriptor((*layers)[i], absl::StrCat("layer ", i));
    if (!d.ok()) return d.status();
    if (!IsUnpackableLayer(d->media_type)) {
      return absl::InvalidArgumentError(
          absl::StrCat("layer ", i, " (", d->digest, ") has media type \"",
                       d->media_type, "\", which loom does not unpack"));
    }
    m.layers.push_back(*std::move(d));
  }
  return m;
}

absl::StatusOr<Descriptor> PickPlatform(std::string_view index_body,
                                        std::string_view os,
                                        std::string_view architecture) {
  absl::StatusOr<json> j = ParseJson(index_body);
  if (!j.ok()) return j.status();
  auto manifests = j->find("manifests");
  if (manifests == j->end() || !manifests->is_array()) {
    return absl::InvalidArgumentError("index has no manifests array");
  }
  std::vector<std::string> seen;
  for (size_t i = 0; i < manifests->size(); ++i) {
    absl::StatusOr<Descriptor> d =
        ParseDescriptor((*manifests)[i], absl::StrCat("index entry ", i));
    if (!d.ok()) return d.status();
    if (d->os == os && d->architecture == architecture) return *std::move(d);
    seen.push_back(absl::StrCat(d->os, "/", d->architecture,
                                d->variant.empty() ? "" : "/", d->variant));
  }
  return absl::NotFoundError(absl::StrCat(
      "the image has no ", Av(os), "/", Av(architecture), " manifest (it has: ",
      seen.empty() ? "none" : absl::StrJoin(seen, ", "), ")"));
}

}  // namespace loom::image
