#include "loom/gateway/haproxy_config.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/gateway/access_log.h"

namespace loom::gateway {
namespace {

bool IsLower(char c) { return c >= 'a' && c <= 'z'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsAlnum(char c) {
  return IsLower(c) || IsDigit(c) || (c >= 'A' && c <= 'Z');
}

// Milliseconds, as HAProxy reads a bare number for a time.
std::string Ms(absl::Duration d) {
  return std::to_string(absl::ToInt64Milliseconds(d));
}

absl::Status Invalid(std::string_view what, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat(std::string(what), ": ", std::string(why)));
}

// A path HAProxy's config parser reads as one word and a kernel accepts as
// a unix socket address.
absl::Status ValidateSocketPath(std::string_view field, std::string_view path,
                                bool optional) {
  if (path.empty()) {
    return optional ? absl::OkStatus() : Invalid(field, "is empty");
  }
  if (path.front() != '/') {
    return Invalid(field, absl::StrCat("'", std::string(path),
                                       "' is not an absolute path"));
  }
  if (path.size() > 107) {
    return Invalid(field, absl::StrCat("'", std::string(path),
                                       "' is longer than a unix socket "
                                       "address allows (107 bytes)"));
  }
  for (char c : path) {
    if (static_cast<unsigned char>(c) <= ' ' || c == '"' || c == '\'' ||
        c == '\\' || c == '#' || c == 0x7f) {
      return Invalid(field, absl::StrCat("'", std::string(path),
                                         "' has a space, quote, '#' or "
                                         "control character"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateBindHost(std::string_view where, std::string_view host) {
  const std::string text(host);
  unsigned char buf[16];
  if (inet_pton(AF_INET, text.c_str(), buf) == 1 ||
      inet_pton(AF_INET6, text.c_str(), buf) == 1) {
    return absl::OkStatus();
  }
  return Invalid(where, absl::StrCat("bind_host '", text,
                                     "' is not an IPv4 or IPv6 address"));
}

absl::Status PositiveDuration(std::string_view where, std::string_view field,
                              absl::Duration d) {
  if (d < absl::Milliseconds(1)) {
    return Invalid(
        where, absl::StrCat(std::string(field), " must be at least 1ms, not ",
                            absl::FormatDuration(d)));
  }
  return absl::OkStatus();
}

absl::Status ValidateServerOptions(std::string_view where,
                                   const ServerOptions& o) {
  if (o.health_check) {
    if (auto s = PositiveDuration(where, "check_interval", o.check_interval);
        !s.ok()) {
      return s;
    }
    if (o.rise < 1 || o.fall < 1) {
      return Invalid(where, "health check rise and fall must be at least 1");
    }
  }
  if (o.maxconn < 0) return Invalid(where, "server maxconn must not be < 0");
  return absl::OkStatus();
}

absl::Status ValidateService(const ServiceFrontend& s) {
  if (auto st = ValidateServiceName(s.name); !st.ok()) return st;
  const std::string where = absl::StrCat("service ", s.name);
  if (auto st = ValidateBindHost(where, s.bind_host); !st.ok()) return st;
  if (s.port < 1 || s.port > 65535) {
    return Invalid(where, absl::StrCat("port ", s.port, " is not 1..65535"));
  }
  for (auto [field, d] : {std::pair{"connect_timeout", s.connect_timeout},
                          {"client_timeout", s.client_timeout},
                          {"server_timeout", s.server_timeout},
                          {"queue_timeout", s.queue_timeout}}) {
    if (auto st = PositiveDuration(where, field, d); !st.ok()) return st;
  }
  if (auto st = ValidateServerOptions(where, s.server_options); !st.ok()) {
    return st;
  }
  std::set<std::string> seeds;
  for (const SeedServer& seed : s.seed_servers) {
    if (auto st = ValidateServerName(seed.name); !st.ok()) {
      return Invalid(where, std::string(st.message()));
    }
    if (auto a = ParseServerAddress(seed.address); !a.ok()) {
      return Invalid(where, std::string(a.status().message()));
    }
    if (!seeds.insert(seed.name).second) {
      return Invalid(where,
                     absl::StrCat("server '", seed.name, "' is listed twice"));
    }
  }
  return absl::OkStatus();
}

std::string BindAddress(const ServiceFrontend& s) {
  const bool v6 = s.bind_host.find(':') != std::string::npos;
  return v6 ? absl::StrCat("[", s.bind_host, "]:", s.port)
            : absl::StrCat(s.bind_host, ":", s.port);
}

void RenderGlobalAndDefaults(const HaproxyConfig& c, std::string* out) {
  absl::StrAppend(out,
                  "# Written by loom gateway: do not edit, it is rewritten.\n"
                  "global\n"
                  "    stats socket ",
                  c.stats_socket,
                  " mode 600 level admin expose-fd listeners\n"
                  "    stats timeout 30s\n"
                  "    hard-stop-after ",
                  Ms(c.hard_stop_after), "\n");
  if (c.maxconn > 0) absl::StrAppend(out, "    maxconn ", c.maxconn, "\n");
  if (c.nbthread > 0) absl::StrAppend(out, "    nbthread ", c.nbthread, "\n");
  if (!c.log_socket.empty()) {
    absl::StrAppend(out, "    log ", c.log_socket,
                    " len 2048 format raw local0 info\n");
  }
  absl::StrAppend(out,
                  "\ndefaults\n"
                  "    mode http\n",
                  c.log_socket.empty() ? "" : "    log global\n",
                  "    log-format \"", std::string(kAccessLogFormat),
                  "\"\n"
                  "    option dontlognull\n"
                  "    option http-keep-alive\n"
                  "    option redispatch 1\n"
                  "    retries ",
                  c.retries, "\n    timeout http-request ",
                  Ms(c.http_request_timeout), "\n    timeout http-keep-alive ",
                  Ms(c.keep_alive_timeout), "\n");
}

void RenderService(const ServiceFrontend& s, bool with_seeds,
                   std::string* out) {
  const std::string be = BackendName(s.name);
  absl::StrAppend(out, "\nfrontend ", FrontendName(s.name), "\n    bind ",
                  BindAddress(s), "\n    timeout client ", Ms(s.client_timeout),
                  "\n    default_backend ", be, "\n");
  absl::StrAppend(out, "\nbackend ", be, "\n    balance ",
                  std::string(BalanceName(s.balance)), "\n    timeout connect ",
                  Ms(s.connect_timeout), "\n    timeout server ",
                  Ms(s.server_timeout), "\n    timeout queue ",
                  Ms(s.queue_timeout), "\n");
  if (!with_seeds) return;
  std::vector<SeedServer> seeds = s.seed_servers;
  std::sort(
      seeds.begin(), seeds.end(),
      [](const SeedServer& a, const SeedServer& b) { return a.name < b.name; });
  const std::string keywords = ServerKeywords(s.server_options);
  for (const SeedServer& seed : seeds) {
    absl::StrAppend(out, "    server ", seed.name, " ",
                    FormatServerAddress(*ParseServerAddress(seed.address)),
                    keywords.empty() ? "" : " ", keywords, "\n");
  }
}

absl::StatusOr<std::string> Render(const HaproxyConfig& config,
                                   bool with_seeds) {
  if (auto s = ValidateConfig(config); !s.ok()) return s;
  std::string out;
  RenderGlobalAndDefaults(config, &out);
  std::vector<const ServiceFrontend*> services;
  for (const ServiceFrontend& s : config.services) services.push_back(&s);
  std::sort(services.begin(), services.end(),
            [](const ServiceFrontend* a, const ServiceFrontend* b) {
              return a->name < b->name;
            });
  for (const ServiceFrontend* s : services) {
    RenderService(*s, with_seeds, &out);
  }
  return out;
}

}  // namespace

std::string_view BalanceName(Balance balance) {
  switch (balance) {
    case Balance::kLeastConn:
      return "leastconn";
    case Balance::kRoundRobin:
      return "roundrobin";
    case Balance::kRandom:
      return "random";
  }
  return "leastconn";
}

absl::StatusOr<Balance> ParseBalance(std::string_view text) {
  for (Balance b :
       {Balance::kLeastConn, Balance::kRoundRobin, Balance::kRandom}) {
    if (text == BalanceName(b)) return b;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("balance '", std::string(text),
                   "' is not one of leastconn, roundrobin, random"));
}

std::string ServerKeywords(const ServerOptions& o) {
  std::string out;
  auto add = [&out](std::string_view word) {
    if (!out.empty()) out += ' ';
    out += word;
  };
  if (o.health_check) {
    add(absl::StrCat("check inter ", Ms(o.check_interval), " rise ", o.rise,
                     " fall ", o.fall));
    if (o.mark_down_on_connect_error) {
      add("observe layer4 error-limit 1 on-error mark-down");
    }
  }
  if (o.maxconn > 0) add(absl::StrCat("maxconn ", o.maxconn));
  return out;
}

absl::Status ValidateServiceName(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 63 && IsLower(name[0]) &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return IsLower(c) || IsDigit(c) || c == '-';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "service name '", std::string(name),
      "' must be a lower-case letter, then up to 62 lower-case letters, "
      "digits or '-'"));
}

absl::Status ValidateServerName(std::string_view name) {
  const bool ok = !name.empty() && name.size() <= 64 && IsAlnum(name[0]) &&
                  std::all_of(name.begin(), name.end(), [](char c) {
                    return IsAlnum(c) || c == '.' || c == '_' || c == '-';
                  });
  if (ok) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "server name '", std::string(name),
      "' must be a letter or digit, then up to 63 letters, digits, '.', '_' "
      "or '-'"));
}

absl::StatusOr<ServerAddress> ParseServerAddress(std::string_view text) {
  auto bad = [&](std::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server address '", std::string(text), "': ", std::string(why)));
  };
  ServerAddress out;
  std::string_view port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() ||
        text[close + 1] != ':') {
      return bad("want [IPv6]:port");
    }
    out.host = std::string(text.substr(1, close - 1));
    out.ipv6 = true;
    port = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("want host:port");
    out.host = std::string(text.substr(0, colon));
    port = text.substr(colon + 1);
  }
  unsigned char buf[16];
  if (inet_pton(out.ipv6 ? AF_INET6 : AF_INET, out.host.c_str(), buf) != 1) {
    return bad(out.ipv6 ? "not an IPv6 address"
                        : "not an IPv4 address (IPv6 goes in brackets; "
                          "HAProxy does not resolve names of servers added "
                          "at run time)");
  }
  const char* end = port.data() + port.size();
  auto [ptr, ec] = std::from_chars(port.data(), end, out.port);
  if (port.empty() || ec != std::errc() || ptr != end || out.port < 1 ||
      out.port > 65535) {
    return bad("port must be 1..65535");
  }
  return out;
}

std::string FormatServerAddress(const ServerAddress& a) {
  return a.ipv6 ? absl::StrCat("[", a.host, "]:", a.port)
                : absl::StrCat(a.host, ":", a.port);
}

std::string FrontendName(std::string_view service) {
  return absl::StrCat("fe_", std::string(service));
}
std::string BackendName(std::string_view service) {
  return absl::StrCat("be_", std::string(service));
}
std::string ServiceOfBackend(std::string_view backend) {
  if (backend.size() < 4 || backend.substr(0, 3) != "be_") return "";
  const std::string_view service = backend.substr(3);
  return ValidateServiceName(service).ok() ? std::string(service) : "";
}

absl::Status ValidateConfig(const HaproxyConfig& c) {
  if (auto s = ValidateSocketPath("stats_socket", c.stats_socket, false);
      !s.ok()) {
    return s;
  }
  if (auto s = ValidateSocketPath("log_socket", c.log_socket, true); !s.ok()) {
    return s;
  }
  if (c.maxconn < 0) return Invalid("maxconn", "must not be < 0");
  if (c.retries < 0) return Invalid("retries", "must not be < 0");
  if (c.nbthread < 0) return Invalid("nbthread", "must not be < 0");
  for (auto [field, d] : {std::pair{"hard_stop_after", c.hard_stop_after},
                          {"http_request_timeout", c.http_request_timeout},
                          {"keep_alive_timeout", c.keep_alive_timeout}}) {
    if (auto s = PositiveDuration("config", field, d); !s.ok()) return s;
  }
  std::set<std::string> names;
  std::set<std::string> binds;
  for (const ServiceFrontend& s : c.services) {
    if (auto st = ValidateService(s); !st.ok()) return st;
    if (!names.insert(s.name).second) {
      return Invalid(absl::StrCat("service ", s.name), "is listed twice");
    }
    if (!binds.insert(BindAddress(s)).second) {
      return Invalid(absl::StrCat("service ", s.name),
                     absl::StrCat("bind address ", BindAddress(s),
                                  " is taken by another service"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> RenderHaproxyConfig(const HaproxyConfig& config) {
  return Render(config, /*with_seeds=*/true);
}

absl::StatusOr<std::string> ConfigShape(const HaproxyConfig& config) {
  return Render(config, /*with_seeds=*/false);
}

}  // namespace loom::gateway
