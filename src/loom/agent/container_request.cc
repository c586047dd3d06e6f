// The `container` object of a launch body (launch_request.h).

#include <set>

#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxMounts = 64;
constexpr size_t kMaxPath = 4096;

bool AbsolutePath(const json& v) {
  if (!v.is_string()) return false;
  const std::string& s = v.get_ref<const std::string&>();
  return !s.empty() && s[0] == '/' && s.size() <= kMaxPath &&
         s.find('\0') == std::string::npos;
}

}  // namespace

absl::StatusOr<ContainerRequest> ParseContainerRequest(const json& body,
                                                       std::string* field) {
  if (!body.is_object()) {
    return FieldError(
        field, "container",
        absl::StrCat("must be an object, got ", body.type_name()));
  }
  ContainerRequest c;
  auto string_field = [&](const char* key, bool required,
                          std::string* out) -> absl::Status {
    auto it = body.find(key);
    if (it == body.end() || it->is_null()) {
      if (!required) return absl::OkStatus();
      return FieldError(field, absl::StrCat("container.", key), "is required");
    }
    if (!it->is_string() ||
        it->get_ref<const std::string&>().find('\0') != std::string::npos ||
        it->get_ref<const std::string&>().size() > kMaxPath) {
      return FieldError(field, absl::StrCat("container.", key),
                        "must be a string");
    }
    *out = it->get<std::string>();
    return absl::OkStatus();
  };
  if (absl::Status s = string_field("image", true, &c.image); !s.ok()) return s;
  if (absl::Status s = string_field("image_ref", false, &c.image_ref);
      !s.ok()) {
    return s;
  }
  if (c.image_ref.empty()) c.image_ref = c.image;
  if (absl::Status s = string_field("workdir", false, &c.workdir); !s.ok()) {
    return s;
  }
  if (!c.workdir.empty() && c.workdir[0] != '/') {
    return FieldError(field, "container.workdir",
                      "must be an absolute path in the container");
  }
  if (auto it = body.find("entrypoint"); it != body.end() && !it->is_null()) {
    if (!it->is_array()) {
      return FieldError(field, "container.entrypoint",
                        "must be a list of strings");
    }
    for (size_t i = 0; i < it->size(); ++i) {
      const json& a = (*it)[i];
      if (!a.is_string() ||
          a.get_ref<const std::string&>().find('\0') != std::string::npos) {
        return FieldError(field, absl::StrCat("container.entrypoint[", i, "]"),
                          "must be a string without NUL bytes");
      }
      c.entrypoint.push_back(a.get<std::string>());
    }
  }
  if (auto it = body.find("no_entrypoint");
      it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return FieldError(field, "container.no_entrypoint",
                        "must be true or false");
    }
    c.no_entrypoint = it->get<bool>();
  }
  if (auto it = body.find("writable"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) {
      return FieldError(field, "container.writable", "must be true or false");
    }
    c.writable = it->get<bool>();
  }
  if (auto it = body.find("shm_size"); it != body.end() && !it->is_null()) {
    std::optional<int64_t> n = AsInt(*it);
    if (!n || *n < 0) {
      return FieldError(field, "container.shm_size",
                        "must be a size in bytes (0: the default)");
    }
    c.shm_size_bytes = *n;
  }
  if (auto it = body.find("mounts"); it != body.end() && !it->is_null()) {
    if (!it->is_array() || it->size() > kMaxMounts) {
      return FieldError(field, "container.mounts",
                        absl::StrCat("must be a list of at most ", kMaxMounts,
                                     " {source, destination, readonly}"));
    }
    std::set<std::string> destinations;
    for (size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      const std::string at = absl::StrCat("container.mounts[", i, "]");
      if (!m.is_object()) {
        return FieldError(field, at, "must be {source, destination, readonly}");
      }
      ContainerBind b;
      for (const char* key : {"source", "destination"}) {
        auto v = m.find(key);
        if (v == m.end() || !AbsolutePath(*v)) {
          return FieldError(field, absl::StrCat(at, ".", key),
                            "must be an absolute path");
        }
        (std::string(key) == "source" ? b.source : b.destination) =
            v->get<std::string>();
      }
      if (b.destination == "/") {
        return FieldError(field, absl::StrCat(at, ".destination"),
                          "cannot be the container's root");
      }
      if (auto v = m.find("readonly"); v != m.end() && !v->is_null()) {
        if (!v->is_boolean()) {
          return FieldError(field, absl::StrCat(at, ".readonly"),
                            "must be true or false");
        }
        b.readonly = v->get<bool>();
      }
      if (!destinations.insert(b.destination).second) {
        return FieldError(field, absl::StrCat(at, ".destination"),
                          absl::StrCat(b.destination, " is mounted twice"));
      }
      c.mounts.push_back(std::move(b));
    }
  }
  return c;
}

}  // namespace loom
