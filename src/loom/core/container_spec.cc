#include "loom/core/container_spec.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "loom/core/container_spec_yaml.h"
#include "yaml-cpp/yaml.h"

namespace loom {
namespace {

constexpr size_t kMaxEntrypointArgs = 4096;
constexpr int64_t kMaxShmSize = int64_t{1} << 50;  // 1 PiB
// The directories the runtime sets up in every container itself.
constexpr std::string_view kRuntimeDirs[] = {"/proc", "/sys", "/dev"};

absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }

}  // namespace

absl::StatusOr<std::string> NormalizeAbsolutePath(std::string_view path) {
  if (path.empty()) return absl::InvalidArgumentError("must not be empty");
  if (path.find('\0') != std::string_view::npos) {
    return absl::InvalidArgumentError("must not contain NUL characters");
  }
  if (path[0] != '/') {
    return absl::InvalidArgumentError(
        absl::StrCat("must be an absolute path, got '", Av(path), "'"));
  }
  if (path.size() > kMaxPathLength) {
    return absl::InvalidArgumentError(
        absl::StrCat("is longer than ", kMaxPathLength, " bytes"));
  }
  std::string out;
  for (absl::string_view part : absl::StrSplit(Av(path), '/')) {
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat("must not contain '..', got '", Av(path), "'"));
    }
    absl::StrAppend(&out, "/", part);
  }
  return out.empty() ? std::string("/") : out;
}

bool PathIsUnder(std::string_view path, std::string_view dir) {
  if (dir == "/") return !path.empty() && path[0] == '/';
  if (path.size() < dir.size() || path.substr(0, dir.size()) != dir) {
    return false;
  }
  return path.size() == dir.size() || path[dir.size()] == '/';
}

absl::StatusOr<ContainerMount> ParseContainerMount(std::string_view text) {
  const std::vector<std::string> parts = absl::StrSplit(Av(text), ':');
  if (parts.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", Av(text),
                     "' is not a mount (write SRC:DST, SRC:DST:ro or "
                     "SRC:DST:rw)"));
  }
  if (parts.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", Av(text),
        "' has more than three ':'-separated parts (SRC:DST[:ro]); paths "
        "with ':' cannot be mounted"));
  }
  ContainerMount m;
  if (parts.size() == 3) {
    if (parts[2] == "ro") {
      m.readonly = true;
    } else if (parts[2] != "rw") {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown mount option '", parts[2], "' (write ro or rw)"));
    }
  }
  for (auto [name, in, out] :
       {std::make_tuple("source", &parts[0], &m.source),
        std::make_tuple("destination", &parts[1], &m.destination)}) {
    absl::StatusOr<std::string> p = NormalizeAbsolutePath(*in);
    if (!p.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " ", p.status().message()));
    }
    // Mount lists and options are split at ',' (pyxis' --container-mounts,
    // mount(8) and runc's option strings), and a control character ends a
    // line of a log or an fstab: such a path would be read as another one.
    for (const char c : *p) {
      const auto u = static_cast<unsigned char>(c);
      if (c == ',' || u < 0x20 || u == 0x7f) {
        return absl::InvalidArgumentError(absl::StrCat(
            name, " '", absl::CHexEscape(*p), "' has ",
            c == ',' ? "a ','" : "a control character",
            ": paths with one cannot be mounted (mount options are split "
            "at ',')"));
      }
    }
    *out = *std::move(p);
  }
  if (m.destination == "/") {
    return absl::InvalidArgumentError(
        "destination must not be '/': that is the image's root filesystem");
  }
  for (std::string_view dir : kRuntimeDirs) {
    if (PathIsUnder(m.destination, dir)) {
      return absl::InvalidArgumentError(
          absl::StrCat("destination '", m.destination, "' is under ", Av(dir),
                       ", which the runtime sets up itself"));
    }
  }
  return m;
}

std::string ContainerMountText(const ContainerMount& mount) {
  return absl::StrCat(mount.source, ":", mount.destination,
                      mount.readonly ? ":ro" : "");
}

bool IsSha256DigestText(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (digest.size() != kPrefix.size() + 64 ||
      digest.substr(0, kPrefix.size()) != kPrefix) {
    return false;
  }
  return std::all_of(digest.begin() + kPrefix.size(), digest.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
           (c >= 'a' && c <= 'f');
  });
}

absl::Status CheckContainerMounts(const ContainerSpec& spec,
                                  const std::vector<std::string>& allowed) {
  for (size_t i = 0; i < spec.mounts.size(); ++i) {
    const std::string& source = spec.mounts[i].source;
    const std::string path = absl::StrCat("container.mounts[", i, "]");
    if (allowed.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": '", source,
          "' cannot be mounted: the cluster allows no host directories to be "
          "mounted (its cluster spec lists none under "
          "containers.allowed_mounts)"));
    }
    const bool ok = std::any_of(
        allowed.begin(), allowed.end(),
        [&](const std::string& d) { return PathIsUnder(source, d); });
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": '", source,
                       "' is not under a directory the cluster allows to be "
                       "mounted (",
                       absl::StrJoin(allowed, ", "), ")"));
    }
  }
  return absl::OkStatus();
}

bool IsRegistryHostPort(std::string_view registry) {
  std::string_view rest;  // ":port" or ""
  if (registry.starts_with("[")) {
    const size_t close = registry.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : registry.substr(1, close - 1)) {
      if (!absl::ascii_isxdigit(static_cast<unsigned char>(c)) && c != ':' &&
          c != '.') {
        return false;
      }
    }
    rest = registry.substr(close + 1);
  } else {
    const size_t colon = registry.find(':');
    const std::string_view host = registry.substr(0, colon);
    if (colon != std::string_view::npos) rest = registry.substr(colon);
    if (host.empty()) return false;
    for (absl::string_view part : absl::StrSplit(Av(host), '.')) {
      if (part.empty() || part.front() == '-' || part.back() == '-') {
        return false;
      }
      for (char c : part) {
        if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-') {
          return false;
        }
      }
    }
  }
  if (rest.empty()) return true;
  const std::string_view port = rest.substr(1);
  if (rest.front() != ':' || port.empty() || port.size() > 5 ||
      !std::all_of(port.begin(), port.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      })) {
    return false;
  }
  const int n = std::stoi(std::string(port));
  return n >= 1 && n <= 65535;
}

absl::Status CheckContainerRegistry(std::string_view registry,
                                    const std::vector<std::string>& allowed) {
  if (allowed.empty()) return absl::OkStatus();
  const std::string want = absl::AsciiStrToLower(Av(registry));
  if (std::find(allowed.begin(), allowed.end(), want) != allowed.end()) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("container.image: registry '", Av(registry),
                   "' is not one this cluster takes images from "
                   "(containers.allowed_registries: ",
                   absl::StrJoin(allowed, ", "), ")"));
}

namespace internal {
namespace {

using yaml::ChildPath;
using yaml::ElementPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;

// A scalar as text without NUL characters.
absl::StatusOr<std::string> ReadText(const yaml::Reader& r,
                                     const YAML::Node& node,
                                     absl::string_view path) {
  if (!node.IsScalar()) {
    return r.Error(node, path,
                   absl::StrCat("must be a string, got ", KindOf(node)));
  }
  std::string s = yaml::ScalarText(node);
  if (s.find('\0') != std::string::npos) {
    return r.Error(node, path, "must not contain NUL characters");
  }
  return s;
}

// `ReadMap`, refusing fields without a value, as the job spec does.
absl::StatusOr<MapNode> ReadFields(
    const yaml::Reader& r, const YAML::Node& node, std::string path,
    std::initializer_list<absl::string_view> allowed) {
  absl::StatusOr<MapNode> map = r.ReadMap(node, std::move(path), allowed);
  if (!map.ok()) return map.status();
  for (const Field& f : map->fields) {
    if (f.value.IsNull()) {
      return r.Error(f.key_node, ChildPath(map->path, f.key),
                     "has no value (write \"\" for an empty string)");
    }
  }
  return map;
}

// A list item's mark, or the list's when the item has none.
YAML::Mark ItemMark(const YAML::Node& item, const YAML::Node& list) {
  return item.Mark().line >= 0 ? item.Mark() : list.Mark();
}

absl::Status ParseImage(const yaml::Reader& r, const Field& f,
                        absl::string_view path, ContainerSpec* spec) {
  absl::StatusOr<std::string> image = ReadText(r, f.value, path);
  if (!image.ok()) return image.status();
  if (image->empty()) return r.Error(f.value, path, "must not be empty");
  if (image->size() > kMaxImageRefLength) {
    return r.Error(
        f.value, path,
        absl::StrCat("is longer than ", kMaxImageRefLength, " characters"));
  }
  for (char c : *image) {
    const auto u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return r.Error(f.value, path,
                     absl::StrCat("'", *image,
                                  "' is not an image reference (printable "
                                  "ASCII without spaces, e.g. "
                                  "registry.example.com:5000/team/train:1.4)"));
    }
  }
  spec->image = *std::move(image);
  return absl::OkStatus();
}

absl::Status ParseMounts(const yaml::Reader& r, const Field& f,
                         absl::string_view path, ContainerSpec* spec) {
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(f.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  if (items->size() > kMaxContainerMounts) {
    return r.Error(f.value, path,
                   absl::StrCat("has ", items->size(), " mounts; at most ",
                                kMaxContainerMounts, " are allowed"));
  }
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    if (item.IsNull()) {
      return r.Error(ItemMark(item, f.value), item_path,
                     "has no value (write SRC:DST or SRC:DST:ro)");
    }
    if (!item.IsScalar()) {
      return r.Error(
          item, item_path,
          absl::StrCat("must be a string SRC:DST[:ro], got ", KindOf(item)));
    }
    absl::StatusOr<std::string> text = ReadText(r, item, item_path);
    if (!text.ok()) return text.status();
    absl::StatusOr<ContainerMount> m = ParseContainerMount(*text);
    if (!m.ok()) return r.Error(item, item_path, m.status().message());
    for (size_t k = 0; k < spec->mounts.size(); ++k) {
      if (spec->mounts[k].destination == m->destination) {
        return r.Error(
            item, item_path,
            absl::StrCat("destination '", m->destination,
                         "' is already mounted by ", ElementPath(path, k)));
      }
    }
    spec->mounts.push_back(*std::move(m));
  }
  return absl::OkStatus();
}

absl::Status ParseEntrypoint(const yaml::Reader& r, const Field& f,
                             absl::string_view path, ContainerSpec* spec) {
  if (!f.value.IsSequence()) {
    return r.Error(f.value, path,
                   absl::StrCat("must be a list of strings ([] for none), "
                                "got ",
                                KindOf(f.value)));
  }
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(f.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  if (items->size() > kMaxEntrypointArgs) {
    return r.Error(f.value, path,
                   absl::StrCat("has ", items->size(), " arguments; at most ",
                                kMaxEntrypointArgs, " are allowed"));
  }
  std::vector<std::string> argv;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    if (item.IsNull()) {
      return r.Error(ItemMark(item, f.value), item_path,
                     "has no value (write \"\" for an empty argument)");
    }
    absl::StatusOr<std::string> arg = ReadText(r, item, item_path);
    if (!arg.ok()) return arg.status();
    if (i == 0 && arg->empty()) {
      return r.Error(item, item_path, "must not be empty (it is the program)");
    }
    argv.push_back(*std::move(arg));
  }
  spec->entrypoint = std::move(argv);
  return absl::OkStatus();
}

// `containers.allowed_registries`: host[:port] entries, lower-cased, each
// once.
absl::StatusOr<std::vector<std::string>> ParseAllowedRegistries(
    const yaml::Reader& r, const Field& f, const std::string& path) {
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(f.value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  std::vector<std::string> out;
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    if (item.IsNull()) {
      return r.Error(ItemMark(item, f.value), item_path,
                     "has no value (write a registry host[:port])");
    }
    absl::StatusOr<std::string> text = ReadText(r, item, item_path);
    if (!text.ok()) return text.status();
    if (!IsRegistryHostPort(*text)) {
      return r.Error(item, item_path,
                     absl::StrCat("'", *text,
                                  "' is not a registry host[:port] as an "
                                  "image reference starts with (e.g. "
                                  "registry.example.com:5000)"));
    }
    std::string registry = absl::AsciiStrToLower(*text);
    for (size_t k = 0; k < out.size(); ++k) {
      if (out[k] == registry) {
        return r.Error(item, item_path,
                       absl::StrCat("'", *text, "' is already listed as ",
                                    ElementPath(path, k)));
      }
    }
    out.push_back(std::move(registry));
  }
  return out;
}

}  // namespace

absl::StatusOr<ContainerSpec> ParseContainerField(const yaml::Reader& r,
                                                  const Field& field) {
  absl::StatusOr<MapNode> map =
      ReadFields(r, field.value, field.key,
                 {"image", "image_digest", "mounts", "workdir", "entrypoint",
                  "writable", "shm_size"});
  if (!map.ok()) return map.status();
  ContainerSpec spec;
  absl::StatusOr<const Field*> image = r.Require(*map, "image");
  if (!image.ok()) return image.status();
  if (absl::Status st =
          ParseImage(r, **image, ChildPath(map->path, "image"), &spec);
      !st.ok()) {
    return st;
  }
  if (const Field* f = map->Find("image_digest"); f != nullptr) {
    const std::string path = ChildPath(map->path, "image_digest");
    absl::StatusOr<std::string> digest = ReadText(r, f->value, path);
    if (!digest.ok()) return digest.status();
    if (!IsSha256DigestText(*digest)) {
      return r.Error(f->value, path,
                     absl::StrCat("'", *digest,
                                  "' is not a digest (sha256: and 64 "
                                  "lower-case hex digits); the server sets "
                                  "this field at submit"));
    }
    spec.image_digest = *std::move(digest);
  }
  if (const Field* f = map->Find("mounts"); f != nullptr) {
    if (absl::Status st =
            ParseMounts(r, *f, ChildPath(map->path, "mounts"), &spec);
        !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("workdir"); f != nullptr) {
    const std::string path = ChildPath(map->path, "workdir");
    absl::StatusOr<std::string> text = ReadText(r, f->value, path);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::string> dir = NormalizeAbsolutePath(*text);
    if (!dir.ok()) return r.Error(f->value, path, dir.status().message());
    spec.workdir = *std::move(dir);
  }
  if (const Field* f = map->Find("entrypoint"); f != nullptr) {
    if (absl::Status st =
            ParseEntrypoint(r, *f, ChildPath(map->path, "entrypoint"), &spec);
        !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("writable"); f != nullptr) {
    absl::StatusOr<bool> b =
        r.ReadBool(f->value, ChildPath(map->path, "writable"));
    if (!b.ok()) return b.status();
    spec.writable = *b;
  }
  if (const Field* f = map->Find("shm_size"); f != nullptr) {
    const std::string path = ChildPath(map->path, "shm_size");
    absl::StatusOr<int64_t> bytes = r.ReadBytes(f->value, path, 0);
    if (!bytes.ok()) return bytes.status();
    if (*bytes > kMaxShmSize) {
      return r.Error(
          f->value, path,
          absl::StrCat("must be at most 1Pi, got ", f->value.Scalar()));
    }
    spec.shm_size_bytes = *bytes;
  }
  return spec;
}

nlohmann::ordered_json ContainerSpecJson(const ContainerSpec& spec) {
  using Json = nlohmann::ordered_json;
  Json j;
  j["image"] = spec.image;
  if (!spec.image_digest.empty()) j["image_digest"] = spec.image_digest;
  Json mounts = Json::array();
  for (const ContainerMount& m : spec.mounts) {
    mounts.push_back(ContainerMountText(m));
  }
  j["mounts"] = std::move(mounts);
  if (!spec.workdir.empty()) j["workdir"] = spec.workdir;
  if (spec.entrypoint.has_value()) j["entrypoint"] = *spec.entrypoint;
  j["writable"] = spec.writable;
  j["shm_size"] = yaml::FormatBytesExact(spec.shm_size_bytes);
  return j;
}

absl::StatusOr<ContainerPolicy> ParseContainerPolicy(const yaml::Reader& r,
                                                     const Field& field) {
  absl::StatusOr<MapNode> map = r.ReadMap(
      field.value, field.key, {"allowed_mounts", "allowed_registries"});
  if (!map.ok()) return map.status();
  ContainerPolicy policy;
  if (const Field* f = map->Find("allowed_registries"); f != nullptr) {
    absl::StatusOr<std::vector<std::string>> registries =
        ParseAllowedRegistries(r, *f,
                               ChildPath(map->path, "allowed_registries"));
    if (!registries.ok()) return registries.status();
    policy.allowed_registries = *std::move(registries);
  }
  const Field* f = map->Find("allowed_mounts");
  if (f == nullptr) return policy;
  const std::string path = ChildPath(map->path, "allowed_mounts");
  absl::StatusOr<std::vector<YAML::Node>> items =
      r.ReadList(f->value, path, /*allow_empty=*/true);
  if (!items.ok()) return items.status();
  for (size_t i = 0; i < items->size(); ++i) {
    const YAML::Node& item = (*items)[i];
    const std::string item_path = ElementPath(path, i);
    if (item.IsNull()) {
      return r.Error(ItemMark(item, f->value), item_path,
                     "has no value (write an absolute host directory)");
    }
    absl::StatusOr<std::string> text = ReadText(r, item, item_path);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::string> dir = NormalizeAbsolutePath(*text);
    if (!dir.ok()) return r.Error(item, item_path, dir.status().message());
    if (*dir == "/") {
      return r.Error(item, item_path,
                     "must not be '/': it would let jobs mount every host "
                     "path; list the directories jobs may use");
    }
    for (size_t k = 0; k < policy.allowed_mounts.size(); ++k) {
      if (policy.allowed_mounts[k] == *dir) {
        return r.Error(item, item_path,
                       absl::StrCat("'", *dir, "' is already listed as ",
                                    ElementPath(path, k)));
      }
    }
    policy.allowed_mounts.push_back(*std::move(dir));
  }
  return policy;
}

}  // namespace internal
}  // namespace loom
