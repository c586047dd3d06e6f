#include "loom/http/http_message.h"

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace loom::http {
namespace {

template <typename Pairs>
const std::string* FindValue(const Pairs& pairs, absl::string_view name,
                             bool any_case) {
  for (const auto& [k, v] : pairs) {
    if (any_case ? absl::EqualsIgnoreCase(k, name) : k == name) return &v;
  }
  return nullptr;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool HttpRequest::has_header(absl::string_view name) const {
  return FindValue(headers, name, true) != nullptr;
}

std::string HttpRequest::get_header_value(absl::string_view name) const {
  const std::string* v = FindValue(headers, name, true);
  return v != nullptr ? *v : std::string();
}

bool HttpRequest::has_param(absl::string_view name) const {
  return FindValue(params, name, false) != nullptr;
}

std::string HttpRequest::get_param_value(absl::string_view name) const {
  const std::string* v = FindValue(params, name, false);
  return v != nullptr ? *v : std::string();
}

void HttpResponse::set_content(std::string content, absl::string_view type) {
  body = std::move(content);
  content_type = std::string(type);
}

void HttpResponse::set_header(absl::string_view name, absl::string_view value) {
  for (auto& [k, v] : headers) {
    if (absl::EqualsIgnoreCase(k, name)) {
      v = std::string(value);
      return;
    }
  }
  headers.emplace_back(std::string(name), std::string(value));
}

std::string HttpResponse::get_header_value(absl::string_view name) const {
  const std::string* v = FindValue(headers, name, true);
  return v != nullptr ? *v : std::string();
}

void HttpResponse::set_stream(absl::string_view type, StreamSource source) {
  content_type = std::string(type);
  stream = std::move(source);
}

absl::string_view StatusText(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 204:
      return "No Content";
    case 307:
      return "Temporary Redirect";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 409:
      return "Conflict";
    case 411:
      return "Length Required";
    case 413:
      return "Content Too Large";
    case 414:
      return "URI Too Long";
    case 417:
      return "Expectation Failed";
    case 422:
      return "Unprocessable Content";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

std::string PercentDecode(absl::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      const int hi = HexValue(text[i + 1]), lo = HexValue(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_is_space && c == '+' ? ' ' : c);
  }
  return out;
}

std::string SerializeHead(const HttpResponse& res, bool close) {
  std::string head = absl::StrCat("HTTP/1.1 ", res.status, " ",
                                  StatusText(res.status), "\r\n");
  auto safe = [](absl::string_view s) {
    return s.find_first_of("\r\n") == absl::string_view::npos;
  };
  if (!res.content_type.empty() && safe(res.content_type)) {
    absl::StrAppend(&head, "Content-Type: ", res.content_type, "\r\n");
  }
  for (const auto& [k, v] : res.headers) {
    if (!safe(k) || !safe(v) || k.empty()) continue;
    if (absl::EqualsIgnoreCase(k, "content-length") ||
        absl::EqualsIgnoreCase(k, "transfer-encoding") ||
        absl::EqualsIgnoreCase(k, "connection")) {
      continue;  // framing is the server's
    }
    absl::StrAppend(&head, k, ": ", v, "\r\n");
  }
  if (res.stream) {
    absl::StrAppend(&head, "Transfer-Encoding: chunked\r\n");
  } else {
    absl::StrAppend(&head, "Content-Length: ", res.body.size(), "\r\n");
  }
  if (close) absl::StrAppend(&head, "Connection: close\r\n");
  absl::StrAppend(&head, "\r\n");
  return head;
}

}  // namespace loom::http
