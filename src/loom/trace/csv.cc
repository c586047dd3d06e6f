#include "loom/trace/csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loom::csv {

// How much of a bad value an error message quotes.
constexpr size_t kMaxQuotedBytes = 64;

// Quotes `text` for an error message: C-escaped (so NULs and control bytes
// stay readable) and cut to `kMaxQuotedBytes`.
std::string Quote(std::string_view text) {
  if (text.size() <= kMaxQuotedBytes) {
    return absl::StrCat("'", absl::CHexEscape(Av(text)), "'");
  }
  return absl::StrCat("'",
                      absl::CHexEscape(Av(text.substr(0, kMaxQuotedBytes))),
                      "...' (", text.size(), " bytes)");
}

namespace {

bool IsSpace(char c) { return c == ' ' || c == '\t'; }

}  // namespace

std::string_view TrimSpace(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsSpace(c) || c == '\r'; });
}

// Splits one line (without its line end) into fields, following RFC 4180
// except that a quoted field cannot span lines. Unquoted fields are views into
// `line`; quoted ones are unescaped into `scratch`, whose capacity is reserved
// up front so that the views stay valid. Returns "" on success, else what is
// wrong with the line.
std::string SplitCsvLine(std::string_view line,
                         std::vector<std::string_view>* fields,
                         std::string* scratch) {
  fields->clear();
  scratch->clear();
  scratch->reserve(line.size());
  const size_t n = line.size();
  size_t i = 0;
  while (true) {
    size_t j = i;
    while (j < n && IsSpace(line[j])) ++j;
    if (j < n && line[j] == '"') {
      const size_t begin = scratch->size();
      ++j;
      bool closed = false;
      while (j < n) {
        const char c = line[j];
        if (c == '"') {
          if (j + 1 < n && line[j + 1] == '"') {
            scratch->push_back('"');
            j += 2;
            continue;
          }
          closed = true;
          ++j;
          break;
        }
        scratch->push_back(c);
        ++j;
      }
      if (!closed) {
        return absl::StrCat("field ", fields->size() + 1,
                            ": unterminated quoted field");
      }
      while (j < n && IsSpace(line[j])) ++j;
      fields->emplace_back(scratch->data() + begin, scratch->size() - begin);
      if (j == n) return "";
      if (line[j] != ',') {
        return absl::StrCat("field ", fields->size(),
                            ": text after the closing quote");
      }
      i = j + 1;
    } else {
      const size_t comma = line.find(',', i);
      if (comma == std::string_view::npos) {
        fields->push_back(line.substr(i));
        return "";
      }
      fields->push_back(line.substr(i, comma - i));
      i = comma + 1;
    }
  }
}

bool ParseNumber(absl::string_view column, std::string_view cell, double* out,
                 std::string* error) {
  const std::string_view text = TrimSpace(cell);
  if (text.empty()) {
    *error = absl::StrCat(column, ": empty");
    return false;
  }
  double value = 0;
  const char* const end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end) {
    *error = absl::StrCat(column, ": not a number: ", Quote(cell));
    return false;
  }
  if (!std::isfinite(value)) {
    *error = absl::StrCat(column, ": not a finite number: ", Quote(cell));
    return false;
  }
  *out = value;
  return true;
}

}  // namespace loom::csv
