#include "loom/core/job_name.h"

#include <algorithm>

#include "absl/strings/ascii.h"

namespace loom {

bool IsValidJobName(std::string_view name) {
  if (name.empty() || name.size() > kMaxJobNameLength ||
      !absl::ascii_islower(static_cast<unsigned char>(name[0]))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_islower(static_cast<unsigned char>(c)) ||
           absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-';
  });
}

std::string JobNameFromPath(std::string_view path) {
  while (!path.empty() && path.back() == '/') path.remove_suffix(1);
  if (const size_t slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  std::string name;
  for (char raw : path) {
    const char c = absl::ascii_tolower(static_cast<unsigned char>(raw));
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) {
      name += c;
    } else if (!name.empty() && name.back() != '-') {
      name += '-';
    }
  }
  while (!name.empty() && name.back() == '-') name.pop_back();
  if (name.empty()) return "job";
  if (name[0] < 'a' || name[0] > 'z') name = "job-" + name;
  if (name.size() > kMaxJobNameLength) name.resize(kMaxJobNameLength);
  while (name.back() == '-') name.pop_back();
  return name;
}

}  // namespace loom
