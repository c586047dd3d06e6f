#pragma once

// CSV helpers shared by the trace reader (trace.h) and the node-list reader
// (node_list.h). Pure functions; safe to call from several threads.

#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"

namespace loom::csv {

inline constexpr std::string_view kUtf8Bom = "\xEF\xBB\xBF";

// Debian's Abseil is built with its own `absl::string_view`, which does not
// convert from `std::string_view`; this bridges the two.
inline absl::string_view Av(std::string_view s) {
  return absl::string_view(s.data(), s.size());
}

// Quotes `text` for an error message: C-escaped (so NULs and control bytes
// stay readable) and cut to 64 bytes.
std::string Quote(std::string_view text);

// `s` without leading and trailing spaces and tabs.
std::string_view TrimSpace(std::string_view s);

// Whether `s` holds only spaces, tabs and carriage returns.
bool IsBlank(std::string_view s);

// Splits one line (without its line end) into fields, following RFC 4180
// except that a quoted field cannot span lines. Unquoted fields are views into
// `line`; quoted ones are unescaped into `scratch`, whose capacity is reserved
// up front so that the views stay valid. Returns "" on success, else what is
// wrong with the line.
std::string SplitCsvLine(std::string_view line,
                         std::vector<std::string_view>* fields,
                         std::string* scratch);

// Parses a finite number (spaces around it allowed). On failure sets
// `*error` to `<column>: <reason>` and returns false.
bool ParseNumber(absl::string_view column, std::string_view cell, double* out,
                 std::string* error);

}  // namespace loom::csv
