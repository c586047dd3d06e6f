#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "loom/http/http_message.h"

namespace loom::http {

struct ParserLimits {
  size_t max_head = 64 << 10;  // request line and headers
  size_t max_headers = 100;
  size_t max_target = 8 << 10;
  size_t max_body = 1 << 20;  // after chunked decoding
};

// Reads one HTTP/1.1 request from the bytes of a connection, strictly: what
// two readers could frame differently is refused, so that a request can
// never be read as the body of another or the other way round (request
// smuggling, RFC 9112 section 6.3). Refused with 400: a bare CR, a folded
// header line, whitespace before a header's colon, a Content-Length that
// is not a plain decimal number, two that differ, Content-Length together
// with Transfer-Encoding, a malformed chunk; 501 a transfer coding other
// than `chunked`; 505 a version other than HTTP/1.0 and 1.1; 413 a body
// over the limit (known from Content-Length before it is read); 431 a head
// over the limit; 414 a target over the limit.
//
// Incremental: call `Parse` with the bytes received so far for this
// request (the same prefix, growing) until it returns kComplete or kError.
// Work is linear in the bytes: nothing is scanned twice. Pure: no I/O, so
// it can be fuzzed (fuzz/http_request_fuzzer.cc). Not thread-safe.
class RequestParser {
 public:
  enum class Status { kIncomplete, kComplete, kError };

  explicit RequestParser(ParserLimits limits = {}) : limits_(limits) {}

  Status Parse(absl::string_view buffer);

  // The head has been read (and was valid): `request()` has method, target,
  // headers; the body may still be coming.
  bool head_complete() const { return state_ > State::kHead; }
  // The client sent `Expect: 100-continue` and waits for a 100 before it
  // sends the body.
  bool expects_continue() const { return expect_continue_; }
  // Whether the client asked to close after this request (or is HTTP/1.0
  // without keep-alive).
  bool wants_close() const { return close_; }
  // After kComplete: how many bytes of the buffer the request took (what
  // follows is the next request on the connection).
  size_t consumed() const { return consumed_; }
  // After kError: the HTTP status to answer and why.
  int error_status() const { return error_status_; }
  const std::string& error_message() const { return error_; }

  HttpRequest& request() { return request_; }

  // Ready for the next request on the connection.
  void Reset();

 private:
  enum class State { kHead, kBody, kChunkSize, kChunkData, kTrailers, kDone };
  Status Fail(int status, std::string message);
  Status ParseHead(absl::string_view head);
  Status ParseChunks(absl::string_view buffer);

  ParserLimits limits_;
  State state_ = State::kHead;
  HttpRequest request_;
  size_t scanned_ = 0;     // kHead: bytes searched for the end of the head
  size_t body_start_ = 0;  // offset of the body in the buffer
  size_t cursor_ = 0;      // chunked: where parsing goes on
  uint64_t content_length_ = 0;
  uint64_t chunk_left_ = 0;
  bool chunked_ = false;
  bool expect_continue_ = false;
  bool close_ = false;
  size_t consumed_ = 0;
  int error_status_ = 0;
  std::string error_;
};

}  // namespace loom::http
