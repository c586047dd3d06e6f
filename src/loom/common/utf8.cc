#include "loom/common/utf8.h"

#include <cstdint>

#include "absl/strings/str_format.h"

namespace loom {

size_t Utf8CharLength(std::string_view text, size_t i) {
  const auto lead = static_cast<unsigned char>(text[i]);
  if (lead < 0x80) return 1;
  size_t len = 0;
  uint32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
    code_point = lead & 0x1F;
  } else if ((lead & 0xF0) == 0xE0) {
    len = 3;
    code_point = lead & 0x0F;
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    code_point = lead & 0x07;
  } else {
    return 0;  // A continuation byte, 0xC0/0xC1 (overlong) or past 0xF4.
  }
  if (text.size() - i < len) return 0;
  for (size_t k = 1; k < len; ++k) {
    const auto byte = static_cast<unsigned char>(text[i + k]);
    if ((byte & 0xC0) != 0x80) return 0;
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  if (len == 3 &&
      (code_point < 0x800 || (code_point >= 0xD800 && code_point <= 0xDFFF))) {
    return 0;
  }
  if (len == 4 && (code_point < 0x10000 || code_point > 0x10FFFF)) return 0;
  return len;
}

bool IsValidUtf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t len = Utf8CharLength(text, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string QuoteCharAt(std::string_view text, size_t i) {
  const size_t len = Utf8CharLength(text, i);
  if (len == 0) {
    return absl::StrFormat("the byte 0x%02X",
                           static_cast<unsigned char>(text[i]));
  }
  std::string quoted = "'";
  quoted.append(text.substr(i, len));
  quoted.push_back('\'');
  return quoted;
}

std::string_view TruncateUtf8(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return text;
  size_t n = max_bytes;
  // Step back over continuation bytes to the start of the cut character.
  while (n > 0 && (static_cast<unsigned char>(text[n]) & 0xC0) == 0x80) --n;
  return text.substr(0, n);
}

}  // namespace loom
