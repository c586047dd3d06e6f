#include "loom/agent/agent_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/agent/api_guard.h"
#include "loom/agent/json_values.h"

namespace loom {
namespace {

bool IsWildcard(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr ==
           htonl(INADDR_ANY);
  }
  if (sa->sa_family == AF_INET6) {
    return IN6_IS_ADDR_UNSPECIFIED(
        &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr);
  }
  return false;
}

bool SameAddress(const sockaddr* a, const sockaddr* b) {
  if (a == nullptr || b == nullptr || a->sa_family != b->sa_family) {
    return false;
  }
  if (a->sa_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b)->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    return std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr,
                       &reinterpret_cast<const sockaddr_in6*>(b)->sin6_addr,
                       sizeof(in6_addr)) == 0;
  }
  return false;
}

std::string AddressText(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf,
              sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr,
              buf, sizeof(buf));
  }
  return buf;
}

}  // namespace

std::string HostPort(const std::string& host, int port) {
  if (host.find(':') != std::string::npos) {
    return absl::StrCat("[", host, "]:", port);
  }
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> NormalizeAgentServerUrl(std::string_view url) {
  std::string text = Str(
      absl::StripAsciiWhitespace(absl::string_view(url.data(), url.size())));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--server '", std::string(url), "': ", why,
                     " (expected http://HOST:PORT)"));
  };
  if (text.empty()) return bad("empty URL");
  std::string scheme = "http";
  if (size_t pos = text.find("://"); pos != std::string::npos) {
    scheme = absl::AsciiStrToLower(text.substr(0, pos));
    text = text.substr(pos + 3);
  }
  if (scheme != "http" && scheme != "https") {
    return bad(absl::StrCat("unsupported scheme '", scheme, "'"));
  }
  while (!text.empty() && text.back() == '/') text.pop_back();
  if (text.empty()) return bad("no host");
  if (text.find_first_of("/?#@ ") != std::string::npos) {
    return bad("paths, queries and user names are not supported");
  }
  std::string host = text;
  std::string port;
  if (text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return bad("unclosed '['");
    host = text.substr(0, close + 1);
    std::string rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return bad("junk after ']'");
      port = rest.substr(1);
    }
  } else if (size_t colon = text.rfind(':'); colon != std::string::npos) {
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string::npos) {
      return bad("write IPv6 addresses in brackets");
    }
  }
  if (host.empty() || host == "[]") return bad("no host");
  if (!port.empty() || text.back() == ':') {
    int p = 0;
    if (!absl::SimpleAtoi(port, &p) || p < 1 || p > 65535) {
      return bad(absl::StrCat("bad port '", port, "'"));
    }
  }
  return absl::StrCat(scheme, "://", text);
}

absl::StatusOr<ListenAddress> ParseListenAddress(std::string_view text_in) {
  const std::string text = Str(absl::StripAsciiWhitespace(
      absl::string_view(text_in.data(), text_in.size())));
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--listen '", text, "': ", why,
        " (expected HOST:PORT, e.g. 127.0.0.2:7100; port 0 picks one)"));
  };
  ListenAddress out;
  std::string port;
  if (!text.empty() && text[0] == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return bad("an IPv6 address needs the form [ADDRESS]:PORT");
    }
    out.host = text.substr(1, close - 1);
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string::npos) return bad("no port");
    out.host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (out.host.find(':') != std::string::npos) {
      return bad("write IPv6 addresses in brackets");
    }
  }
  if (out.host.empty()) return bad("no host");
  if (!absl::SimpleAtoi(port, &out.port) || out.port < 0 || out.port > 65535) {
    return bad(absl::StrCat("bad port '", port, "'"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (int rc = getaddrinfo(out.host.c_str(), nullptr, &hints, &addrs);
      rc != 0) {
    return bad(
        absl::StrCat("cannot resolve '", out.host, "': ", gai_strerror(rc)));
  }
  ifaddrs* ifs = nullptr;
  const bool have_ifs = getifaddrs(&ifs) == 0;
  bool ok = false;
  bool wildcard = false;
  std::vector<std::string> seen;
  for (addrinfo* a = addrs; a != nullptr && !ok; a = a->ai_next) {
    seen.push_back(AddressText(a->ai_addr));
    if (IsWildcard(a->ai_addr)) {
      wildcard = true;
      continue;
    }
    if (IsLoopbackAddress(a->ai_addr)) {
      ok = true;
      break;
    }
    for (ifaddrs* i = have_ifs ? ifs : nullptr; i != nullptr; i = i->ifa_next) {
      if (SameAddress(a->ai_addr, i->ifa_addr)) {
        ok = true;
        break;
      }
    }
  }
  if (have_ifs) freeifaddrs(ifs);
  freeaddrinfo(addrs);
  if (ok) return out;
  if (wildcard) {
    return bad(
        "a wildcard address cannot be registered: name the address the "
        "server should call");
  }
  return bad(absl::StrCat("'", out.host, "' (", absl::StrJoin(seen, ", "),
                          ") is neither a loopback address nor an address "
                          "of this host"));
}

}  // namespace loom
