#ifndef LOOM_COMMON_DIGEST_H_
#define LOOM_COMMON_DIGEST_H_

// Hashes and secrets shared by the server's tokens (server/auth.h) and the
// agent's check of its server's key: hex SHA-256 and HMAC-SHA-256 (OpenSSL),
// random hex (getrandom), and a comparison whose time does not depend on
// where two secrets differ.

#include <string>
#include <string_view>

namespace loom {

std::string Sha256Hex(std::string_view data);
std::string HmacSha256Hex(std::string_view key, std::string_view data);
// `bytes` random bytes from getrandom(2), as 2 * bytes hex digits.
std::string RandomHex(int bytes);
// Constant-time comparison of two strings (false at once if the lengths
// differ: lengths are not secret here).
bool SecureEquals(std::string_view a, std::string_view b);

}  // namespace loom

#endif  // LOOM_COMMON_DIGEST_H_
