#pragma once

// Debian's Abseil has its own absl::string_view, not std::string_view: the
// library's std::string_view values go to absl::StrCat and StrSplit through
// this.

#include <string_view>

#include "absl/strings/string_view.h"

namespace loom::image {

inline absl::string_view Av(std::string_view s) { return {s.data(), s.size()}; }
inline std::string_view Sv(absl::string_view s) { return {s.data(), s.size()}; }

}  // namespace loom::image
