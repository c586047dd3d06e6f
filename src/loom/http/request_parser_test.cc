#include "loom/http/request_parser.h"

#include <string>

#include "gtest/gtest.h"

namespace loom::http {
namespace {

struct Parsed {
  RequestParser::Status status = RequestParser::Status::kIncomplete;
  int error = 0;
  std::string message;
  HttpRequest request;
  size_t consumed = 0;
};

// Feeds `bytes` one byte at a time (the worst case of a slow client), so
// every test also checks that the parser is incremental.
Parsed ParseBytewise(const std::string& bytes, ParserLimits limits = {}) {
  RequestParser p(limits);
  Parsed out;
  for (size_t i = 1; i <= bytes.size(); ++i) {
    out.status = p.Parse(absl::string_view(bytes).substr(0, i));
    if (out.status != RequestParser::Status::kIncomplete) break;
  }
  out.error = p.error_status();
  out.message = p.error_message();
  out.consumed = p.consumed();
  if (out.status == RequestParser::Status::kComplete) out.request = p.request();
  return out;
}

Parsed ParseAll(const std::string& bytes, ParserLimits limits = {}) {
  RequestParser p(limits);
  Parsed out;
  out.status = p.Parse(bytes);
  out.error = p.error_status();
  out.message = p.error_message();
  out.consumed = p.consumed();
  if (out.status == RequestParser::Status::kComplete) out.request = p.request();
  return out;
}

TEST(RequestParser, ReadsARequestWithABody) {
  const std::string r =
      "POST /v1/jobs?dry=1&name=a%20b+c HTTP/1.1\r\nHost: x\r\n"
      "Content-Length: 5\r\nAuthorization: Bearer t\r\n\r\nhello";
  for (const Parsed& p : {ParseBytewise(r), ParseAll(r)}) {
    ASSERT_EQ(p.status, RequestParser::Status::kComplete) << p.message;
    EXPECT_EQ(p.request.method, "POST");
    EXPECT_EQ(p.request.path, "/v1/jobs");
    EXPECT_EQ(p.request.get_param_value("name"), "a b c");
    EXPECT_EQ(p.request.get_header_value("authorization"), "Bearer t");
    EXPECT_EQ(p.request.get_header_value("AUTHORIZATION"), "Bearer t");
    EXPECT_EQ(p.request.body, "hello");
    EXPECT_EQ(p.consumed, r.size());
  }
}

TEST(RequestParser, StopsAtTheEndOfOneRequest) {
  const std::string one = "GET /a HTTP/1.1\r\n\r\n";
  const Parsed p = ParseAll(one + "GET /b HTTP/1.1\r\n\r\n");
  ASSERT_EQ(p.status, RequestParser::Status::kComplete);
  EXPECT_EQ(p.request.path, "/a");
  EXPECT_EQ(p.consumed, one.size());  // the next request is left as it is
}

TEST(RequestParser, DecodesChunkedBodies) {
  const std::string r =
      "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\n";
  const Parsed p = ParseBytewise(r);
  ASSERT_EQ(p.status, RequestParser::Status::kComplete) << p.message;
  EXPECT_EQ(p.request.body, "hello world");
  EXPECT_EQ(p.consumed, r.size());
}

TEST(RequestParser, RefusesAmbiguousFraming) {
  struct Case {
    const char* name;
    std::string bytes;
    int status;
  };
  const Case cases[] = {
      {"two different lengths",
       "POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n",
       400},
      {"length and chunked",
       "POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: "
       "chunked\r\n\r\n",
       400},
      {"unknown coding",
       "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n", 501},
      {"chunked then gzip",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501},
      {"negative length", "POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400},
      {"length with a plus", "POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\n",
       400},
      {"length list", "POST / HTTP/1.1\r\nContent-Length: 5, 5\r\n\r\n", 400},
      {"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400},
      {"folded header", "GET / HTTP/1.1\r\nX-A: 1\r\n 2\r\n\r\n", 400},
      {"bare CR", "GET / HTTP/1.1\r\nX-A: 1\r2\r\n\r\n", 400},
      {"NUL in a value",
       std::string("GET / HTTP/1.1\r\nX-A: 1\0 2\r\n\r\n", 29), 400},
      {"two hosts", "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400},
      {"HTTP/2", "GET / HTTP/2.0\r\n\r\n", 505},
      {"not HTTP", "GET / FTP/1.0\r\n\r\n", 400},
      {"absolute form", "GET http://x/ HTTP/1.1\r\n\r\n", 400},
      {"double space", "GET  / HTTP/1.1\r\n\r\n", 400},
      {"space in target", "GET /a b HTTP/1.1\r\n\r\n", 400},
      {"chunked in 1.0",
       "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400},
      {"bad chunk size",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400},
      {"chunk without CRLF",
       "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n", 400},
      {"Expect other", "POST / HTTP/1.1\r\nExpect: 200-ok\r\n\r\n", 417},
  };
  for (const Case& c : cases) {
    const Parsed p = ParseBytewise(c.bytes);
    EXPECT_EQ(p.status, RequestParser::Status::kError) << c.name;
    EXPECT_EQ(p.error, c.status) << c.name << ": " << p.message;
    EXPECT_FALSE(p.message.empty()) << c.name;
  }
}

TEST(RequestParser, EnforcesItsLimits) {
  ParserLimits limits;
  limits.max_body = 10;
  limits.max_head = 100;
  // Known too large from its Content-Length, before any body is read.
  Parsed p = ParseAll("POST / HTTP/1.1\r\nContent-Length: 11\r\n\r\n", limits);
  EXPECT_EQ(p.error, 413);
  p = ParseBytewise(
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n"
      "8\r\n12345678\r\n0\r\n\r\n",
      limits);
  EXPECT_EQ(p.error, 413);
  p = ParseBytewise("GET / HTTP/1.1\r\nX: " + std::string(200, 'a'), limits);
  EXPECT_EQ(p.error, 431);  // before the head has ended
  p = ParseAll("GET /" + std::string(9000, 'a') + " HTTP/1.1\r\n\r\n");
  EXPECT_EQ(p.error, 414);
  std::string many = "GET / HTTP/1.1\r\n";
  for (int i = 0; i < 101; ++i) many += "X-A: 1\r\n";
  p = ParseAll(many + "\r\n");
  EXPECT_EQ(p.error, 431);
}

TEST(RequestParser, KnowsWhenTheClientCloses) {
  RequestParser p;
  ASSERT_EQ(p.Parse("GET / HTTP/1.0\r\n\r\n"),
            RequestParser::Status::kComplete);
  EXPECT_TRUE(p.wants_close());
  p.Reset();
  ASSERT_EQ(p.Parse("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"),
            RequestParser::Status::kComplete);
  EXPECT_FALSE(p.wants_close());
  p.Reset();
  ASSERT_EQ(p.Parse("GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
            RequestParser::Status::kComplete);
  EXPECT_TRUE(p.wants_close());
}

TEST(RequestParser, SaysWhenTheClientWaitsFor100Continue) {
  RequestParser p;
  EXPECT_EQ(p.Parse("POST / HTTP/1.1\r\nContent-Length: 3\r\n"
                    "Expect: 100-continue\r\n\r\n"),
            RequestParser::Status::kIncomplete);
  EXPECT_TRUE(p.head_complete());
  EXPECT_TRUE(p.expects_continue());
}

TEST(RequestParser, AcceptsBareLineFeedsAndLeadingEmptyLines) {
  const Parsed p = ParseBytewise("\r\n\nGET /x HTTP/1.1\nHost: a\n\n");
  ASSERT_EQ(p.status, RequestParser::Status::kComplete) << p.message;
  EXPECT_EQ(p.request.path, "/x");
  EXPECT_EQ(p.request.get_header_value("host"), "a");
}

}  // namespace
}  // namespace loom::http
