#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

typedef struct ssl_ctx_st SSL_CTX;

namespace loom::http {

// The byte stream of one accepted connection on a non-blocking socket:
// plain TCP, or TLS over it. Calls never block; kAgain means "wait for the
// socket to be readable or writable, then call again". Not thread-safe (one
// event loop owns a connection). Owns the socket: the destructor closes it.
class Transport {
 public:
  enum class Io { kOk, kAgain, kEof, kError };
  virtual ~Transport() = default;
  // TLS: advances the handshake (kOk once done). Plain: kOk.
  virtual Io Handshake() = 0;
  // Reads up to `cap` bytes into `buf`; `*n` is how many on kOk.
  virtual Io Read(char* buf, size_t cap, size_t* n) = 0;
  // Writes up to `len` bytes; `*n` is how many on kOk (may be fewer).
  virtual Io Write(const char* buf, size_t len, size_t* n) = 0;
  // No more writes (TLS close_notify, then the socket's write side).
  virtual void ShutdownWrite() = 0;
  virtual int fd() const = 0;
};

std::unique_ptr<Transport> MakePlainTransport(int fd);

// The server side of TLS: one context for every connection of a listener.
class TlsContext {
 public:
  // Loads a PEM certificate (chain) and its private key; InvalidArgument
  // naming the files when they are missing, unreadable, or not a pair.
  static absl::StatusOr<std::unique_ptr<TlsContext>> Create(
      const std::string& cert_file, const std::string& key_file);
  ~TlsContext();
  std::unique_ptr<Transport> Wrap(int fd) const;

 private:
  explicit TlsContext(SSL_CTX* ctx) : ctx_(ctx) {}
  SSL_CTX* ctx_;
};

}  // namespace loom::http
