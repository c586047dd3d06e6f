#include "loom/core/labels.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

constexpr size_t kMaxKeyLength = 128;

}  // namespace

bool IsValidLabelKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxKeyLength ||
      !absl::ascii_isalnum(static_cast<unsigned char>(key[0]))) {
    return false;
  }
  return std::all_of(key.begin(), key.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' ||
           c == '_' || c == '.' || c == '/';
  });
}

bool MatchesSelector(const std::map<std::string, std::string>& selector,
                     const std::map<std::string, std::string>& labels) {
  for (const auto& [key, value] : selector) {
    auto it = labels.find(key);
    if (it == labels.end()) return false;
    if (!value.empty() && it->second != value) return false;
  }
  return true;
}

std::string FormatSelector(const std::map<std::string, std::string>& selector) {
  std::string out = "{";
  for (const auto& [key, value] : selector) {
    if (out.size() > 1) out += ", ";
    out += key;
    if (!value.empty()) absl::StrAppend(&out, ": ", value);
  }
  out += "}";
  return out;
}

absl::StatusOr<std::pair<std::string, std::string>> ParseConstraint(
    std::string_view text) {
  const size_t eq = text.find('=');
  std::string key(text.substr(0, eq));
  std::string value = eq == std::string_view::npos
                          ? std::string()
                          : std::string(text.substr(eq + 1));
  if (!IsValidLabelKey(key)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--constraint: '", std::string(text),
        "': write KEY=VALUE or KEY, where KEY is a label name (letters, "
        "digits, '-', '_', '.', '/', starting with a letter or digit)"));
  }
  if (eq != std::string_view::npos && value.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--constraint: '", std::string(text),
                     "' has no value (write KEY alone for any value)"));
  }
  return std::make_pair(std::move(key), std::move(value));
}

std::vector<std::string> StackDrift(
    const std::map<std::string, std::string>& declared,
    const std::map<std::string, std::string>& reported) {
  std::vector<std::string> out;
  for (const auto& [key, want] : declared) {
    auto it = reported.find(key);
    if (it == reported.end() || it->second.empty()) {
      out.push_back(absl::StrCat(key, " not reported (pool wants ", want, ")"));
    } else if (it->second != want) {
      out.push_back(
          absl::StrCat(key, " ", it->second, " (pool wants ", want, ")"));
    }
  }
  return out;
}

}  // namespace loom
