#include "loom/common/digest.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/random.h>

namespace loom {
namespace {

std::string Hex(const unsigned char* data, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[data[i] >> 4];
    out[2 * i + 1] = kDigits[data[i] & 15];
  }
  return out;
}

// SHA-256 fetched once: OpenSSL 3 looks an implicit EVP_sha256() up in its
// provider tables on every use, which cost more than hashing a token.
const EVP_MD* Sha256() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  return md != nullptr ? md : EVP_sha256();
}

}  // namespace

std::string Sha256Hex(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, Sha256(), nullptr);
  return Hex(md, len);
}

std::string HmacSha256Hex(std::string_view key, std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(Sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), md,
       &len);
  return Hex(md, len);
}

std::string RandomHex(int bytes) {
  std::string buf(bytes, '\0');
  size_t got = 0;
  while (got < buf.size()) {
    const ssize_t n = getrandom(buf.data() + got, buf.size() - got, 0);
    if (n <= 0) continue;  // EINTR; getrandom blocks only before boot entropy
    got += static_cast<size_t>(n);
  }
  return Hex(reinterpret_cast<const unsigned char*>(buf.data()), buf.size());
}

bool SecureEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace loom
