#include "loom/http/transport.h"

#include <errno.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom::http {
namespace {

class PlainTransport : public Transport {
 public:
  explicit PlainTransport(int fd) : fd_(fd) {}
  ~PlainTransport() override { ::close(fd_); }
  Io Handshake() override { return Io::kOk; }
  Io Read(char* buf, size_t cap, size_t* n) override {
    while (true) {
      const ssize_t r = ::recv(fd_, buf, cap, 0);
      if (r > 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      if (r == 0) return Io::kEof;
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kAgain : Io::kError;
    }
  }
  Io Write(const char* buf, size_t len, size_t* n) override {
    while (true) {
      const ssize_t r = ::send(fd_, buf, len, MSG_NOSIGNAL);
      if (r >= 0) {
        *n = static_cast<size_t>(r);
        return Io::kOk;
      }
      if (errno == EINTR) continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? Io::kAgain : Io::kError;
    }
  }
  void ShutdownWrite() override { ::shutdown(fd_, SHUT_WR); }
  int fd() const override { return fd_; }

 private:
  const int fd_;
};

class TlsTransport : public Transport {
 public:
  TlsTransport(SSL* ssl, int fd) : ssl_(ssl), fd_(fd) {}
  ~TlsTransport() override {
    SSL_free(ssl_);
    ::close(fd_);
  }
  Io Handshake() override {
    if (done_) return Io::kOk;
    ERR_clear_error();
    const int r = SSL_do_handshake(ssl_);
    if (r == 1) {
      done_ = true;
      return Io::kOk;
    }
    return Map(r);
  }
  Io Read(char* buf, size_t cap, size_t* n) override {
    ERR_clear_error();
    const int r =
        SSL_read(ssl_, buf, static_cast<int>(std::min<size_t>(cap, 1 << 30)));
    if (r > 0) {
      *n = static_cast<size_t>(r);
      return Io::kOk;
    }
    return Map(r);
  }
  Io Write(const char* buf, size_t len, size_t* n) override {
    ERR_clear_error();
    const int r =
        SSL_write(ssl_, buf, static_cast<int>(std::min<size_t>(len, 1 << 30)));
    if (r > 0) {
      *n = static_cast<size_t>(r);
      return Io::kOk;
    }
    return Map(r);
  }
  void ShutdownWrite() override {
    ERR_clear_error();
    SSL_shutdown(ssl_);
    ::shutdown(fd_, SHUT_WR);
  }
  int fd() const override { return fd_; }

 private:
  Io Map(int r) {
    switch (SSL_get_error(ssl_, r)) {
      case SSL_ERROR_WANT_READ:
      case SSL_ERROR_WANT_WRITE:
        return Io::kAgain;
      case SSL_ERROR_ZERO_RETURN:
        return Io::kEof;
      case SSL_ERROR_SYSCALL:
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Io::kAgain;
        return r == 0 ? Io::kEof : Io::kError;
      default:
        return Io::kError;
    }
  }
  SSL* const ssl_;
  const int fd_;
  bool done_ = false;
};

}  // namespace

std::unique_ptr<Transport> MakePlainTransport(int fd) {
  return std::make_unique<PlainTransport>(fd);
}

absl::StatusOr<std::unique_ptr<TlsContext>> TlsContext::Create(
    const std::string& cert_file, const std::string& key_file) {
  SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
  auto refuse = [&](absl::string_view what) {
    SSL_CTX_free(ctx);
    return absl::InvalidArgumentError(
        absl::StrCat("cannot use the TLS certificate ", cert_file, " and key ",
                     key_file, " (", what, ")"));
  };
  if (ctx == nullptr) return refuse("no TLS context");
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_mode(
      ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert_file.c_str()) != 1) {
    return refuse("missing, unreadable or not a PEM certificate");
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key_file.c_str(), SSL_FILETYPE_PEM) !=
      1) {
    return refuse("missing, unreadable or not a PEM private key");
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return refuse("the key does not belong to the certificate");
  }
  return std::unique_ptr<TlsContext>(new TlsContext(ctx));
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

std::unique_ptr<Transport> TlsContext::Wrap(int fd) const {
  SSL* ssl = SSL_new(ctx_);
  if (ssl == nullptr || SSL_set_fd(ssl, fd) != 1) {
    if (ssl != nullptr) SSL_free(ssl);
    ::close(fd);
    return nullptr;
  }
  SSL_set_accept_state(ssl);
  return std::make_unique<TlsTransport>(ssl, fd);
}

}  // namespace loom::http
