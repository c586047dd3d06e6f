#pragma once

// How the agent's parts write JSON and read numbers out of it, the same way
// everywhere: invalid UTF-8 is replaced, not thrown on; a number is a whole
// number that fits an `int64_t` or nothing.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace loom {

inline std::string Dump(const nlohmann::json& j, int indent = -1) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

// A whole number that fits `int64_t`; nullopt for anything else (floats,
// strings, numbers too large).
inline std::optional<int64_t> AsInt(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  return std::nullopt;
}

// Debian's Abseil has its own `string_view`: a status message as a string.
inline std::string Str(absl::string_view s) {
  return std::string(s.data(), s.size());
}

}  // namespace loom
