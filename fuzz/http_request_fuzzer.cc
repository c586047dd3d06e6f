// libFuzzer target: the raw bytes of a connection, as the server's request
// parser reads them (src/loom/http/request_parser.h): request lines,
// headers, framing (Content-Length, chunked), pipelined requests. The first
// byte picks how the bytes arrive (all at once or in pieces of 1 to 255
// bytes), since a slow client must get the same answer as a fast one.
//
// Checks, for every input:
// - the parser never crashes, hangs or reads out of bounds (ASan);
// - it reaches the same verdict, the same requests and the same error status
//   however the bytes are split;
// - a complete request took between 1 and all of the bytes offered, and its
//   body is within the limit; an error is a 4xx or 5xx with a message that
//   is valid UTF-8 (it goes into a JSON answer);
// - requests are read one after another (pipelining) without a byte read
//   twice.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "fuzz/fuzz_check.h"
#include "loom/common/utf8.h"
#include "loom/http/request_parser.h"

namespace {

using loom::http::ParserLimits;
using loom::http::RequestParser;

struct Verdict {
  std::vector<std::string> requests;  // method, target, body of each
  int error = 0;
  size_t used = 0;  // bytes taken by complete requests
};

// Reads every request of `bytes`, handing the parser `step` more bytes at a
// time (0: all at once).
Verdict ReadAll(absl::string_view bytes, size_t step) {
  ParserLimits limits;
  limits.max_body = 4096;
  limits.max_head = 2048;
  limits.max_target = 512;
  limits.max_headers = 20;
  Verdict v;
  RequestParser parser(limits);
  size_t start = 0;  // where the current request begins
  size_t have = step == 0 ? bytes.size() : std::min(step, bytes.size());
  while (start < bytes.size()) {
    const absl::string_view window = bytes.substr(start, have - start);
    const RequestParser::Status st = parser.Parse(window);
    if (st == RequestParser::Status::kError) {
      v.error = parser.error_status();
      LOOM_FUZZ_CHECK(v.error >= 400 && v.error <= 599,
                      absl::StrCat("status ", v.error));
      const std::string& m = parser.error_message();
      LOOM_FUZZ_CHECK(!m.empty(), "an error without a message");
      LOOM_FUZZ_CHECK(loom::IsValidUtf8(m), m);
      return v;
    }
    if (st == RequestParser::Status::kComplete) {
      const size_t used = parser.consumed();
      LOOM_FUZZ_CHECK(used >= 1 && used <= window.size(),
                      absl::StrCat(used, " of ", window.size()));
      const loom::http::HttpRequest& r = parser.request();
      LOOM_FUZZ_CHECK(r.body.size() <= limits.max_body, "body over the limit");
      LOOM_FUZZ_CHECK(!r.path.empty() && r.path[0] == '/', r.path);
      v.requests.push_back(absl::StrCat(r.method, " ", r.target, " ",
                                        r.body.size(), ":", r.body));
      start += used;
      v.used = start;
      parser.Reset();
      if (have < start) have = start;
      continue;
    }
    if (have == bytes.size()) return v;  // waits for more: a partial request
    have = step == 0 ? bytes.size() : std::min(have + step, bytes.size());
  }
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = data[0];
  const absl::string_view bytes(reinterpret_cast<const char*>(data) + 1,
                                size - 1);
  const Verdict whole = ReadAll(bytes, 0);
  const Verdict pieces = ReadAll(bytes, step == 0 ? 1 : step);
  LOOM_FUZZ_CHECK(whole.error == pieces.error,
                  absl::StrCat("error ", whole.error, " whole, ", pieces.error,
                               " in pieces of ", step));
  LOOM_FUZZ_CHECK(whole.requests == pieces.requests,
                  absl::StrCat(whole.requests.size(), " requests whole, ",
                               pieces.requests.size(), " in pieces"));
  LOOM_FUZZ_CHECK(whole.used == pieces.used, "different bytes used");
  return 0;
}
