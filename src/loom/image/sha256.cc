#include "loom/image/sha256.h"

#include <openssl/evp.h>

namespace loom::image {

struct Sha256::Ctx {
  EVP_MD_CTX* md = EVP_MD_CTX_new();
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {
  EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr);
}

Sha256::~Sha256() = default;

void Sha256::Update(std::string_view data) {
  EVP_DigestUpdate(ctx_->md, data.data(), data.size());
}

std::string Sha256::Digest() {
  static constexpr char kDigits[] = "0123456789abcdef";
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx_->md, md, &len);
  std::string out = "sha256:";
  for (unsigned int i = 0; i < len; ++i) {
    out += kDigits[md[i] >> 4];
    out += kDigits[md[i] & 15];
  }
  return out;
}

std::string Sha256::Of(std::string_view data) {
  Sha256 h;
  h.Update(data);
  return h.Digest();
}

}  // namespace loom::image
