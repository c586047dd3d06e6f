#pragma once

// How the verbs write what they print: aligned tables, times ("3m ago",
// "12m05s"), and the structured output of `-o json` and `-o yaml`.

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace loom {

// JSON as a YAML document (yaml-cpp emitter); strings that YAML would read
// as another type are quoted.
std::string JsonToYaml(const nlohmann::json& j);

// "45s ago", "12m ago", "3h ago", "2d ago".
std::string FormatAgo(absl::Time t, absl::Time now);

// A run time: "45s", "12m05s", "3h04m", "2d03h".
std::string FormatElapsed(absl::Duration d);

// Lays out rows under a header, each column as wide as its widest cell, two
// spaces apart; the last column is not padded.
std::string FormatTable(const std::vector<std::string>& header,
                        const std::vector<std::vector<std::string>>& rows);

// The same rows as CSV (RFC 4180): the header line, then one line per row;
// a field that holds a comma, a double quote, CR or LF is quoted, its
// quotes doubled. Lines end in "\n".
std::string FormatCsv(const std::vector<std::string>& header,
                      const std::vector<std::vector<std::string>>& rows);

namespace cli {

// "2026-11-29 19:40:00 UTC".
std::string FormatUtc(absl::Time t);

// Appends each non-empty line of `text` to `out`, led by `indent` and cut to
// `width` characters (the indent included), each ending in '\n'.
void AppendLines(std::string* out, absl::string_view text,
                 absl::string_view indent = "",
                 size_t width = std::string::npos);

// Prints `j` to `out` as the -o value `output` asks: "json" (indented by 2)
// or "yaml". Returns false, printing nothing, for any other value (a table
// verb's own format).
bool PrintStructured(absl::string_view output, const nlohmann::json& j,
                     std::ostream& out);

}  // namespace cli
}  // namespace loom
