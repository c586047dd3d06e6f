#pragma once

// Reading the server's JSON replies leniently (docs/api.md): a missing or
// null field is "not given", never an exception. The verbs and their
// formatters read every reply through these.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom::cli {

using Json = nlohmann::json;

// The field `key` of the object `j`, or null when `j` is not an object or
// the field is missing or null.
const Json* Field(const Json& j, const char* key);

// A number field as an integer (a float is truncated); nullopt when it is
// not a number.
std::optional<int64_t> Int(const Json& j, const char* key);

// A number field; nullopt when it is not a number.
std::optional<double> Num(const Json& j, const char* key);

// A field as text ("" when absent); numbers and booleans are written out.
std::string Str(const Json& j, const char* key);

// `Str`, with "-" for nothing (table cells are never empty).
std::string Cell(const Json& j, const char* key);

// The number, or "-".
std::string Cell(std::optional<int64_t> v);

// An RFC 3339 time field; nullopt when it is absent or unreadable.
std::optional<absl::Time> TimeField(const Json& j, const char* key);

// The list under `key` of an answer, or the answer itself when it is a
// list; an empty list when neither. The reference lives as long as `j`.
const Json& Items(const Json& j, const char* key);

}  // namespace loom::cli
