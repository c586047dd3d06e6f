#include "loom/cli/reply_fields.h"

#include "absl/strings/str_cat.h"

namespace loom::cli {

const Json* Field(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<int64_t> Int(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr) return std::nullopt;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_number_float()) return static_cast<int64_t>(v->get<double>());
  return std::nullopt;
}

std::optional<double> Num(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

std::string Str(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_boolean()) return v->get<bool>() ? "true" : "false";
  if (v->is_number()) return v->dump();
  return "";
}

std::string Cell(const Json& j, const char* key) {
  std::string s = Str(j, key);
  return s.empty() ? "-" : s;
}

std::string Cell(std::optional<int64_t> v) {
  return v.has_value() ? absl::StrCat(*v) : "-";
}

std::optional<absl::Time> TimeField(const Json& j, const char* key) {
  const Json* v = Field(j, key);
  if (v == nullptr || !v->is_string()) return std::nullopt;
  absl::Time t;
  std::string err;
  if (!absl::ParseTime(absl::RFC3339_full, v->get<std::string>(), &t, &err)) {
    return std::nullopt;
  }
  return t;
}

const Json& Items(const Json& j, const char* key) {
  static const Json kEmpty = Json::array();
  if (j.is_array()) return j;
  const Json* v = Field(j, key);
  return v != nullptr && v->is_array() ? *v : kEmpty;
}

}  // namespace loom::cli
