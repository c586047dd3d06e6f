#include "loom/image/registry_auth.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/image/absl_view.h"
#include "loom/image/image_ref.h"

namespace loom::image {
namespace {

constexpr size_t kMaxCredentialsFileBytes = 1 << 20;

// `auths["KEY"]` as errors name an entry.
std::string AuthsEntryName(const std::string& key) {
  return absl::StrCat("auths[", nlohmann::json(key).dump(), "]");
}

// "line L, column C" of byte `offset` of `text`, for a JSON error that must
// not quote the text (it holds secrets).
std::string CredentialsTextPosition(std::string_view text, size_t offset) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i < offset && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return absl::StrCat("line ", line, ", column ", column);
}

// A config.json key as the registry it names: scheme and path dropped, the
// host lower-cased. Empty when it names no registry an image reference can.
std::string CredentialsKeyRegistry(std::string_view key) {
  std::string k = absl::AsciiStrToLower(Av(key));
  for (const char* scheme : {"https://", "http://"}) {
    if (absl::StartsWith(k, scheme)) {
      k.erase(0, std::strlen(scheme));
      break;
    }
  }
  if (const size_t slash = k.find('/'); slash != std::string::npos) {
    k.resize(slash);
  }
  absl::StatusOr<ImageRef> ref = ParseImageRef(absl::StrCat(k, "/x"));
  if (!ref.ok() || ref->registry != k) return "";
  return k;
}

absl::StatusOr<std::string> CredentialsStringField(const nlohmann::json& entry,
                                                   const char* name,
                                                   const std::string& where) {
  if (!entry.contains(name)) return std::string();
  if (!entry[name].is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ".", name, ": expected a string"));
  }
  return entry[name].get<std::string>();
}

absl::StatusOr<RegistryCredential> ParseCredentialsEntry(
    const nlohmann::json& entry, const std::string& where) {
  if (!entry.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": expected an object"));
  }
  RegistryCredential c;
  absl::StatusOr<std::string> auth =
      CredentialsStringField(entry, "auth", where);
  absl::StatusOr<std::string> username =
      CredentialsStringField(entry, "username", where);
  absl::StatusOr<std::string> password =
      CredentialsStringField(entry, "password", where);
  absl::StatusOr<std::string> identity =
      CredentialsStringField(entry, "identitytoken", where);
  for (const auto* s : {&auth, &username, &password, &identity}) {
    if (!s->ok()) return s->status();
  }
  c.identity_token = *identity;
  if (!auth->empty()) {
    std::string decoded;
    if (!absl::Base64Unescape(*auth, &decoded)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ".auth: not base64 (it should be base64 of USER:PASSWORD)"));
    }
    const size_t colon = decoded.find(':');
    if (colon == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(where,
                       ".auth: its base64 decodes to no USER:PASSWORD (there "
                       "is no ':')"));
    }
    c.username = decoded.substr(0, colon);
    c.password = decoded.substr(colon + 1);
    if ((!username->empty() && *username != c.username) ||
        (!password->empty() && *password != c.password)) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": auth and username/password name different credentials"));
    }
  } else {
    c.username = *username;
    c.password = *password;
  }
  if (c.username.empty() && !c.password.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": a password without a user name"));
  }
  if (!c.username.empty() && c.password.empty() && c.identity_token.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": user name ", nlohmann::json(c.username).dump(),
                     " has no password (nor an identitytoken)"));
  }
  if (c.username.empty() && c.identity_token.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        where,
        ": no credentials (auth, username and password, or identitytoken); "
        "loom runs no credential helpers (credsStore, credHelpers), so the "
        "secret must be in the file"));
  }
  return c;
}

std::string FileModeOctal(mode_t mode) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode & 07777));
  return buf;
}

}  // namespace

absl::StatusOr<RegistryCredentials> RegistryCredentials::Parse(
    std::string_view json, const std::string& file) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json);
  } catch (const nlohmann::json::parse_error& e) {
    // e.what() quotes what it last read, which may be a password.
    return absl::InvalidArgumentError(absl::StrCat(
        file, ": not valid JSON at ",
        CredentialsTextPosition(json, e.byte == 0 ? 0 : e.byte - 1)));
  }
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(file, ": expected a JSON object with \"auths\""));
  }
  if (!j.contains("auths") || !j["auths"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(
        file,
        ": no \"auths\" object (expected Docker's config.json: {\"auths\": "
        "{\"HOST:PORT\": {\"auth\": \"<base64 USER:PASSWORD>\"}}})"));
  }
  RegistryCredentials out;
  std::map<std::string, std::string> key_of;  // registry -> the key naming it
  for (const auto& [key, entry] : j["auths"].items()) {
    const std::string where = absl::StrCat(file, ": ", AuthsEntryName(key));
    const std::string registry = CredentialsKeyRegistry(key);
    if (registry.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where,
          ": not a registry HOST[:PORT] as an image reference starts with "
          "(e.g. registry.example.com:5000)"));
    }
    if (auto [it, fresh] = key_of.emplace(registry, key); !fresh) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": the same registry as ", AuthsEntryName(it->second)));
    }
    absl::StatusOr<RegistryCredential> c = ParseCredentialsEntry(entry, where);
    if (!c.ok()) return c.status();
    c->source = absl::StrCat(file, " ", AuthsEntryName(key));
    out.by_registry_[registry] = *std::move(c);
  }
  return out;
}

absl::StatusOr<RegistryCredentials> RegistryCredentials::Load(
    const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return absl::ErrnoToStatus(
        err, absl::StrCat("cannot read the registry credentials file ", path));
  }
  struct stat st;
  std::string text;
  absl::Status status = absl::OkStatus();
  if (::fstat(fd, &st) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", path));
  } else if (!S_ISREG(st.st_mode)) {
    status = absl::FailedPreconditionError(
        absl::StrCat(path, " is not a regular file"));
  } else if ((st.st_mode & 077) != 0) {
    status = absl::FailedPreconditionError(absl::StrCat(
        path, " has mode ", FileModeOctal(st.st_mode),
        ": group or others may read or change it, and it holds registry "
        "passwords; `chmod 600 ",
        path,
        "` (and, if others may have read it, change the passwords it "
        "holds)"));
  } else if (st.st_size > static_cast<off_t>(kMaxCredentialsFileBytes)) {
    status = absl::InvalidArgumentError(
        absl::StrCat(path, " is ", st.st_size,
                     " bytes, more than a credentials file may be"));
  } else {
    char buf[8192];
    for (;;) {
      const ssize_t n = ::read(fd, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        status = absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", path));
        break;
      }
      if (n == 0) break;
      text.append(buf, static_cast<size_t>(n));
      if (text.size() > kMaxCredentialsFileBytes) {
        status = absl::InvalidArgumentError(absl::StrCat(
            path, " is more bytes than a credentials file may be"));
        break;
      }
    }
  }
  ::close(fd);
  if (!status.ok()) return status;
  return Parse(text, path);
}

const RegistryCredential* RegistryCredentials::For(
    std::string_view registry) const {
  auto it = by_registry_.find(absl::AsciiStrToLower(Av(registry)));
  return it == by_registry_.end() ? nullptr : &it->second;
}

std::vector<std::string> RegistryCredentials::Registries() const {
  std::vector<std::string> out;
  for (const auto& [registry, c] : by_registry_) out.push_back(registry);
  return out;
}

}  // namespace loom::image
