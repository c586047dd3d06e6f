#include "loom/http/request_parser.h"

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::http {
namespace {

// RFC 9110 token characters (method and header names).
bool IsTokenChar(char c) {
  if (absl::ascii_isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken(absl::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (!IsTokenChar(c)) return false;
  }
  return true;
}

// A field value may hold visible characters, spaces, tabs and obs-text; no
// control characters (NUL, CR, LF, ...).
bool IsFieldValue(absl::string_view s) {
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\t') || u == 0x7f) return false;
  }
  return true;
}

// Quotes what a client sent for an error message: at most 60 bytes,
// printable ASCII, anything else escaped as \xNN (so always valid UTF-8).
std::string Shown(absl::string_view s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u < 0x20 || u >= 0x7f) {
      absl::StrAppend(&out, "\\x", absl::Hex(u, absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return absl::StrCat("'", out, "'");
}

bool ParseDecimal(absl::string_view s, uint64_t* out) {
  if (s.empty() || s.size() > 19) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

}  // namespace

void RequestParser::Reset() {
  state_ = State::kHead;
  request_ = HttpRequest();
  scanned_ = body_start_ = cursor_ = consumed_ = 0;
  content_length_ = chunk_left_ = 0;
  chunked_ = expect_continue_ = close_ = false;
  error_status_ = 0;
  error_.clear();
}

RequestParser::Status RequestParser::Fail(int status, std::string message) {
  error_status_ = status;
  error_ = std::move(message);
  close_ = true;
  return Status::kError;
}

RequestParser::Status RequestParser::Parse(absl::string_view buffer) {
  if (error_status_ != 0) return Status::kError;
  if (state_ == State::kDone) return Status::kComplete;
  if (state_ == State::kHead) {
    // Empty lines before a request are ignored (RFC 9112 section 2.2).
    size_t start = 0;
    while (start < buffer.size() &&
           (buffer[start] == '\r' || buffer[start] == '\n')) {
      ++start;
    }
    if (start > 0 && scanned_ < start) scanned_ = start;
    size_t end = absl::string_view::npos;
    size_t body = 0;
    for (size_t i = scanned_; i < buffer.size(); ++i) {
      if (buffer[i] != '\n') continue;
      // "\n\n" or "\r\n\r\n" (a line ending is CRLF or LF; a bare CR is
      // refused by ParseHead).
      if (i >= 1 && buffer[i - 1] == '\n') {
        end = i - 1;
        body = i + 1;
        break;
      }
      if (i >= 2 && buffer[i - 1] == '\r' && buffer[i - 2] == '\n') {
        end = i - 2;
        body = i + 1;
        break;
      }
    }
    if (end == absl::string_view::npos) {
      scanned_ = buffer.size() > 2 ? buffer.size() - 2 : scanned_;
      if (buffer.size() - start > limits_.max_head) {
        return Fail(431, absl::StrCat("the request head is over ",
                                      limits_.max_head, " bytes"));
      }
      return Status::kIncomplete;
    }
    if (end - start > limits_.max_head) {
      return Fail(431, absl::StrCat("the request head is over ",
                                    limits_.max_head, " bytes"));
    }
    if (Status st = ParseHead(buffer.substr(start, end - start));
        st == Status::kError) {
      return st;
    }
    body_start_ = cursor_ = body;
    state_ = chunked_ ? State::kChunkSize : State::kBody;
  }
  if (state_ == State::kBody) {
    if (buffer.size() - body_start_ < content_length_) {
      return Status::kIncomplete;
    }
    request_.body = std::string(buffer.substr(body_start_, content_length_));
    consumed_ = body_start_ + content_length_;
    state_ = State::kDone;
    return Status::kComplete;
  }
  return ParseChunks(buffer);
}

RequestParser::Status RequestParser::ParseHead(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, '\n');
  for (absl::string_view& line : lines) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find('\r') != absl::string_view::npos) {
      return Fail(400, "a bare CR in the request head");
    }
  }
  // Request line: METHOD SP TARGET SP HTTP/1.x
  std::vector<absl::string_view> parts = absl::StrSplit(lines[0], ' ');
  if (parts.size() != 3) {
    return Fail(400, absl::StrCat("malformed request line ", Shown(lines[0])));
  }
  if (!IsToken(parts[0])) {
    return Fail(400, absl::StrCat("malformed method ", Shown(parts[0])));
  }
  request_.method = std::string(parts[0]);
  const absl::string_view target = parts[1];
  if (target.size() > limits_.max_target) {
    return Fail(414, absl::StrCat("the request target is over ",
                                  limits_.max_target, " bytes"));
  }
  if (target.empty() || target[0] != '/') {
    return Fail(400, absl::StrCat("the request target ", Shown(target),
                                  " is not a path starting with '/'"));
  }
  for (char c : target) {
    const unsigned char u = static_cast<unsigned char>(c);
    if (u <= 0x20 || u >= 0x7f) {
      return Fail(400,
                  "the request target holds a control, space or "
                  "non-ASCII byte (percent-encode it)");
    }
  }
  if (parts[2] == "HTTP/1.1") {
    request_.version_minor = 1;
  } else if (parts[2] == "HTTP/1.0") {
    request_.version_minor = 0;
  } else if (absl::StartsWith(parts[2], "HTTP/")) {
    return Fail(505, absl::StrCat("HTTP version ", Shown(parts[2]),
                                  " is not supported (1.0 and 1.1 are)"));
  } else {
    return Fail(400, absl::StrCat("malformed request line ", Shown(lines[0])));
  }
  request_.target = std::string(target);
  const size_t q = target.find('?');
  request_.path = std::string(target.substr(0, q));
  if (q != absl::string_view::npos) {
    request_.query = std::string(target.substr(q + 1));
    for (absl::string_view kv :
         absl::StrSplit(request_.query, '&', absl::SkipEmpty())) {
      const size_t eq = kv.find('=');
      request_.params.emplace_back(
          PercentDecode(kv.substr(0, eq), true),
          eq == absl::string_view::npos
              ? std::string()
              : PercentDecode(kv.substr(eq + 1), true));
    }
  }

  if (lines.size() - 1 > limits_.max_headers) {
    return Fail(
        431, absl::StrCat("more than ", limits_.max_headers, " header lines"));
  }
  bool have_length = false, have_te = false, have_host = false;
  bool keep_alive = false, close = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    absl::string_view line = lines[i];
    if (!line.empty() && (line[0] == ' ' || line[0] == '\t')) {
      return Fail(400,
                  "a folded header line (obsolete line folding is not "
                  "accepted)");
    }
    const size_t colon = line.find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return Fail(400, absl::StrCat("malformed header line ", Shown(line)));
    }
    const absl::string_view name = line.substr(0, colon);
    if (!IsToken(name)) {
      return Fail(400, absl::StrCat("malformed header name ", Shown(name)));
    }
    absl::string_view value =
        absl::StripAsciiWhitespace(line.substr(colon + 1));
    if (!IsFieldValue(value)) {
      return Fail(400, absl::StrCat("header ", name,
                                    ": a control character in its value"));
    }
    std::string lower = absl::AsciiStrToLower(name);
    if (lower == "content-length") {
      uint64_t n = 0;
      if (!ParseDecimal(value, &n)) {
        return Fail(400, absl::StrCat("Content-Length: ", Shown(value),
                                      " is not a decimal byte count"));
      }
      if (have_length && n != content_length_) {
        return Fail(400, "two Content-Length headers that differ");
      }
      have_length = true;
      content_length_ = n;
    } else if (lower == "transfer-encoding") {
      if (have_te) return Fail(400, "two Transfer-Encoding headers");
      have_te = true;
      if (!absl::EqualsIgnoreCase(value, "chunked")) {
        return Fail(501, absl::StrCat("Transfer-Encoding ", Shown(value),
                                      " is not supported (only chunked)"));
      }
      chunked_ = true;
    } else if (lower == "host") {
      if (have_host) return Fail(400, "two Host headers");
      have_host = true;
    } else if (lower == "connection") {
      for (absl::string_view t : absl::StrSplit(value, ',')) {
        t = absl::StripAsciiWhitespace(t);
        if (absl::EqualsIgnoreCase(t, "close")) close = true;
        if (absl::EqualsIgnoreCase(t, "keep-alive")) keep_alive = true;
      }
    } else if (lower == "expect") {
      if (!absl::EqualsIgnoreCase(value, "100-continue")) {
        return Fail(417, absl::StrCat("Expect: ", Shown(value),
                                      " is not supported (only 100-continue)"));
      }
      expect_continue_ = request_.version_minor == 1;
    }
    request_.headers.emplace_back(std::move(lower), std::string(value));
  }
  if (have_length && have_te) {
    return Fail(400, "both Content-Length and Transfer-Encoding");
  }
  if (chunked_ && request_.version_minor == 0) {
    return Fail(400, "Transfer-Encoding in an HTTP/1.0 request");
  }
  if (content_length_ > limits_.max_body) {
    return Fail(413, absl::StrCat("the request body is ", content_length_,
                                  " bytes; at most ", limits_.max_body,
                                  " are accepted"));
  }
  close_ = close || (request_.version_minor == 0 && !keep_alive);
  if (!chunked_ && content_length_ == 0) expect_continue_ = false;
  return Status::kIncomplete;
}

RequestParser::Status RequestParser::ParseChunks(absl::string_view buffer) {
  while (true) {
    if (state_ == State::kChunkData) {
      const size_t have = buffer.size() - cursor_;
      const size_t take =
          static_cast<size_t>(std::min<uint64_t>(chunk_left_, have));
      request_.body.append(buffer.data() + cursor_, take);
      cursor_ += take;
      chunk_left_ -= take;
      if (chunk_left_ > 0) return Status::kIncomplete;
      // The chunk's CRLF.
      if (buffer.size() - cursor_ < 2) return Status::kIncomplete;
      if (buffer.substr(cursor_, 2) != "\r\n") {
        return Fail(400, "a chunk is not followed by CRLF");
      }
      cursor_ += 2;
      state_ = State::kChunkSize;
      continue;
    }
    // kChunkSize and kTrailers read lines.
    const size_t eol = buffer.find('\n', cursor_);
    if (eol == absl::string_view::npos) {
      if (buffer.size() - cursor_ > 4096) {
        return Fail(400, "a chunk-size or trailer line over 4096 bytes");
      }
      return Status::kIncomplete;
    }
    absl::string_view line = buffer.substr(cursor_, eol - cursor_);
    if (line.empty() || line.back() != '\r') {
      return Fail(400, "a chunk-size or trailer line not ended by CRLF");
    }
    line.remove_suffix(1);
    if (line.find('\r') != absl::string_view::npos) {
      return Fail(400, "a bare CR in a chunk-size or trailer line");
    }
    cursor_ = eol + 1;
    if (state_ == State::kTrailers) {
      if (line.empty()) {
        consumed_ = cursor_;
        state_ = State::kDone;
        return Status::kComplete;
      }
      if (cursor_ - body_start_ > limits_.max_body + limits_.max_head) {
        return Fail(431, "trailers over the head limit");
      }
      const size_t colon = line.find(':');
      if (colon == absl::string_view::npos || !IsToken(line.substr(0, colon))) {
        return Fail(400, absl::StrCat("malformed trailer ", Shown(line)));
      }
      continue;  // trailers are read and dropped
    }
    // chunk-size [; extensions]
    absl::string_view size = line.substr(0, line.find(';'));
    size = absl::StripTrailingAsciiWhitespace(size);
    if (size.empty() || size.size() > 15) {
      return Fail(400, absl::StrCat("malformed chunk size ", Shown(line)));
    }
    uint64_t n = 0;
    for (char c : size) {
      int d = -1;
      if (c >= '0' && c <= '9') d = c - '0';
      if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
      if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
      if (d < 0) {
        return Fail(400, absl::StrCat("malformed chunk size ", Shown(line)));
      }
      n = n * 16 + static_cast<uint64_t>(d);
    }
    if (n == 0) {
      state_ = State::kTrailers;
      continue;
    }
    if (request_.body.size() + n > limits_.max_body) {
      return Fail(413, absl::StrCat("the request body is over ",
                                    limits_.max_body, " bytes"));
    }
    chunk_left_ = n;
    state_ = State::kChunkData;
  }
}

}  // namespace loom::http
