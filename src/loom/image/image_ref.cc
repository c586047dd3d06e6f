#include "loom/image/image_ref.h"

#include <cctype>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/image/absl_view.h"

namespace loom::image {
namespace {

constexpr size_t kMaxNameLength = 255;
constexpr size_t kMaxTagLength = 128;

bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}
bool IsAlnum(char c) { return IsLowerAlnum(c) || (c >= 'A' && c <= 'Z'); }
bool IsWordChar(char c) { return IsAlnum(c) || c == '_'; }

absl::Status Bad(std::string_view text, std::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("image reference \"", Av(text), "\": ", Av(why)));
}

// domain-component: [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
bool IsDomainComponent(std::string_view s) {
  if (s.empty() || !IsAlnum(s.front()) || !IsAlnum(s.back())) return false;
  for (char c : s) {
    if (!IsAlnum(c) && c != '-') return false;
  }
  return true;
}

bool IsPort(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

// host [':' port]; host is a domain name (IPv4 addresses are one) or
// "[IPv6]".
bool IsRegistry(std::string_view s) {
  if (s.starts_with("[")) {
    const size_t close = s.find(']');
    if (close == std::string_view::npos || close == 1) return false;
    for (char c : s.substr(1, close - 1)) {
      if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' &&
          c != '.') {
        return false;
      }
    }
    const std::string_view rest = s.substr(close + 1);
    return rest.empty() || (rest.front() == ':' && IsPort(rest.substr(1)));
  }
  std::string_view host = s;
  if (const size_t colon = s.find(':'); colon != std::string_view::npos) {
    if (!IsPort(s.substr(colon + 1))) return false;
    host = s.substr(0, colon);
  }
  for (absl::string_view part : absl::StrSplit(Av(host), '.')) {
    if (!IsDomainComponent(Sv(part))) return false;
  }
  return true;
}

// path-component: [a-z0-9]+ (([_.] | "__" | "-"+) [a-z0-9]+)*
bool IsPathComponent(std::string_view s) {
  size_t i = 0;
  const auto alnum_run = [&] {
    const size_t start = i;
    while (i < s.size() && IsLowerAlnum(s[i])) ++i;
    return i > start;
  };
  if (!alnum_run()) return false;
  while (i < s.size()) {
    if (s[i] == '.') {
      ++i;
    } else if (s[i] == '_') {
      ++i;
      if (i < s.size() && s[i] == '_') ++i;
    } else if (s[i] == '-') {
      while (i < s.size() && s[i] == '-') ++i;
    } else {
      return false;
    }
    if (!alnum_run()) return false;
  }
  return true;
}

bool IsTag(std::string_view s) {
  if (s.empty() || s.size() > kMaxTagLength || !IsWordChar(s.front())) {
    return false;
  }
  for (char c : s) {
    if (!IsWordChar(c) && c != '.' && c != '-') return false;
  }
  return true;
}

}  // namespace

bool IsSha256Digest(std::string_view digest) {
  constexpr std::string_view kPrefix = "sha256:";
  if (digest.size() != kPrefix.size() + 64 || !digest.starts_with(kPrefix)) {
    return false;
  }
  for (char c : digest.substr(kPrefix.size())) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::StatusOr<ImageRef> ParseImageRef(std::string_view text) {
  if (text.empty()) return Bad(text, "empty");
  ImageRef ref;
  std::string_view rest = text;
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view digest = rest.substr(at + 1);
    if (!IsSha256Digest(digest)) {
      return Bad(text, absl::StrCat("digest \"", Av(digest),
                                    "\" is not sha256: and 64 lowercase hex "
                                    "digits"));
    }
    ref.digest = std::string(digest);
    rest = rest.substr(0, at);
  }
  // A tag follows the last ':' after the last '/' (a ':' before it is the
  // registry's port).
  const size_t slash = rest.rfind('/');
  const size_t colon = rest.rfind(':');
  if (colon != std::string_view::npos &&
      (slash == std::string_view::npos || colon > slash)) {
    const std::string_view tag = rest.substr(colon + 1);
    if (!IsTag(tag)) {
      return Bad(text, absl::StrCat("tag \"", Av(tag),
                                    "\" must be 1 to 128 of [A-Za-z0-9_.-], "
                                    "not starting with '.' or '-'"));
    }
    ref.tag = std::string(tag);
    rest = rest.substr(0, colon);
  }
  const size_t first_slash = rest.find('/');
  const std::string_view first = rest.substr(0, first_slash);
  const bool names_host = first.find_first_of(".:") != std::string_view::npos ||
                          first == "localhost" || first.starts_with("[");
  if (first_slash == std::string_view::npos || !names_host) {
    return Bad(text,
               "no registry host: loom has no default registry, so a "
               "reference starts with HOST[:PORT]/ (a host contains '.' or "
               "':', or is localhost), as in registry.example:5000/team/"
               "train:1.4");
  }
  if (!IsRegistry(first)) {
    return Bad(text, absl::StrCat("registry host \"", Av(first),
                                  "\" is not HOST[:PORT] (letters, digits, "
                                  "'-' and '.', port digits)"));
  }
  ref.registry = std::string(first);
  const std::string_view path = rest.substr(first_slash + 1);
  if (path.empty()) return Bad(text, "no repository after the registry host");
  for (absl::string_view part : absl::StrSplit(Av(path), '/')) {
    if (!IsPathComponent(Sv(part))) {
      return Bad(text, absl::StrCat("repository path component \"", part,
                                    "\" must be lowercase letters and digits, "
                                    "separated by '.', '_', '__' or dashes"));
    }
  }
  if (rest.size() > kMaxNameLength) {
    return Bad(text, absl::StrCat("name is longer than ", kMaxNameLength,
                                  " characters"));
  }
  ref.repository = std::string(path);
  if (ref.tag.empty() && ref.digest.empty()) ref.tag = "latest";
  return ref;
}

std::string ImageRef::Name() const {
  return absl::StrCat(registry, "/", repository);
}

std::string ImageRef::ToString() const {
  std::string out = Name();
  if (!tag.empty()) absl::StrAppend(&out, ":", tag);
  if (!digest.empty()) absl::StrAppend(&out, "@", digest);
  return out;
}

ImageRef ImageRef::WithDigest(std::string new_digest) const {
  ImageRef out = *this;
  out.digest = std::move(new_digest);
  return out;
}

}  // namespace loom::image
