#ifndef LOOM_COMMON_UTF8_H_
#define LOOM_COMMON_UTF8_H_

// UTF-8 checks shared by everything that quotes user bytes back to a person
// or into JSON, Prometheus text or SVG: the length of one character, the
// same test over a whole string, quoting one character, and cutting a
// string without splitting a character.

#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

// Length in bytes (1 to 4) of the valid UTF-8 character that starts at
// `text[i]`, or 0 when none does: a stray continuation byte, a truncated
// sequence, an overlong form, a UTF-16 surrogate or a code point past
// U+10FFFF. ASCII bytes, control characters included, are length 1.
// Requires `i < text.size()`.
size_t Utf8CharLength(std::string_view text, size_t i);

// True when all of `text` is valid UTF-8.
bool IsValidUtf8(std::string_view text);

// The first character of `text` at `i` quoted for an error message: `'é'`,
// or `the byte 0xC3` when no valid character starts there.
std::string QuoteCharAt(std::string_view text, size_t i);

// `text` cut to at most `max_bytes` without splitting a character.
std::string_view TruncateUtf8(std::string_view text, size_t max_bytes);

}  // namespace loom

#endif  // LOOM_COMMON_UTF8_H_
