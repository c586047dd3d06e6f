#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace loom::http {

// One HTTP/1.1 request as `RequestParser` read it off a connection. Header
// names are kept lower-case; `path` is the target before any '?', undecoded
// (routes match it segment by segment and decode what they capture).
struct HttpRequest {
  std::string method;
  std::string target;     // as sent: "/v1/jobs/7/logs?follow=1"
  std::string path;       // "/v1/jobs/7/logs"
  std::string query;      // "follow=1"
  int version_minor = 1;  // HTTP/1.0 or HTTP/1.1
  std::vector<std::pair<std::string, std::string>> headers;
  std::vector<std::pair<std::string, std::string>> params;  // decoded query
  std::string body;
  // Filled by the router: [0] the path, [1...] what the route's
  // placeholders captured, percent-decoded.
  std::vector<std::string> matches;
  std::string remote_addr;  // the peer's IP address

  bool has_header(absl::string_view name) const;
  // The first value of header `name` (any case), "" when absent.
  std::string get_header_value(absl::string_view name) const;
  bool has_param(absl::string_view name) const;
  // The first value of query parameter `name`, "" when absent.
  std::string get_param_value(absl::string_view name) const;
};

// What one call of a stream's source produced (see `HttpResponse::stream`).
struct StreamChunk {
  std::string data;   // may be empty
  bool done = false;  // the stream ends after `data`
  // When to call the source again (ignored when done).
  absl::Duration next_poll = absl::Milliseconds(500);
};
// Produces a streamed response piece by piece. Called on a stream thread,
// never twice at once for one stream, and only while the client reads what
// was sent before; it must return within a few seconds (it runs beside
// other streams). Destroyed on any thread once the stream ends or the
// client goes away.
using StreamSource = std::function<StreamChunk()>;

// What a handler answers. A plain answer has a body and a Content-Length;
// one with `stream` set is sent with chunked transfer encoding, chunk by
// chunk as the source produces them, without holding a worker thread.
struct HttpResponse {
  int status = 200;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string content_type;
  StreamSource stream;

  void set_content(std::string content, absl::string_view type);
  // Replaces any earlier value of the header.
  void set_header(absl::string_view name, absl::string_view value);
  std::string get_header_value(absl::string_view name) const;
  void set_stream(absl::string_view type, StreamSource source);
};

// "Not Found" for 404, and so on ("Unknown" for codes loom never sends).
absl::string_view StatusText(int status);

// Percent-decodes `text`; with `plus_is_space` (query strings) '+' is a
// space. Malformed escapes are kept as they are.
std::string PercentDecode(absl::string_view text, bool plus_is_space);

// The serialized head of `res`: status line, headers, Content-Length (or
// Transfer-Encoding: chunked for a stream) and `Connection: close` when
// `close`. Header values with CR or LF are dropped (no response splitting).
std::string SerializeHead(const HttpResponse& res, bool close);

}  // namespace loom::http
