#pragma once

// SHA-256 over data that arrives in pieces (a blob streamed from a
// registry), as an OCI digest "sha256:<hex>". OpenSSL's EVP interface.

#include <memory>
#include <string>
#include <string_view>

namespace loom::image {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void Update(std::string_view data);
  // "sha256:<64 lowercase hex>" of everything updated so far. Once only.
  std::string Digest();

  // The digest of `data` at once.
  static std::string Of(std::string_view data);

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

}  // namespace loom::image
