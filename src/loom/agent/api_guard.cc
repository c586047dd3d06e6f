#include "loom/agent/api_guard.h"

#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "loom/common/dataset_token.h"
#include "loom/common/digest.h"

namespace loom {

bool IsLoopbackAddress(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    return (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) ||
           (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) &&
            in6->sin6_addr.s6_addr[12] == 127);
  }
  return false;
}

bool ApiGuard::SetKey(std::string_view node, std::string_view key) {
  const std::string digest = Sha256Hex(key);
  absl::MutexLock lock(&mu_);
  auto it = by_node_.find(node);
  if (it != by_node_.end()) {
    if (it->second == digest) return false;
    if (--digests_[it->second] <= 0) digests_.erase(it->second);
    it->second = digest;
  } else {
    by_node_.emplace(std::string(node), digest);
  }
  ++digests_[digest];
  return true;
}

bool ApiGuard::HasKey() const {
  absl::MutexLock lock(&mu_);
  return !digests_.empty();
}

std::string ApiGuard::Describe() const {
  return insecure_ ? "--insecure: until a server key is known, the agent API "
                     "serves anyone who can reach it"
                   : "the agent API answers 503 until this agent has "
                     "registered and knows its server's key";
}

ApiVerdict ApiGuard::Check(std::string_view authorization) const {
  std::string_view presented;
  if (absl::StartsWithIgnoreCase(
          absl::string_view(authorization.data(), authorization.size()),
          "Bearer ")) {
    presented = authorization.substr(7);
  }
  const std::string digest = Sha256Hex(presented);
  ApiVerdict v;
  {
    absl::MutexLock lock(&mu_);
    if (digests_.empty()) {
      if (insecure_) {
        v.allowed = true;
        return v;
      }
      v.status = 503;
      v.code = "unavailable";
      v.message =
          can_register_
              ? "this agent does not know its loom server's key yet (it has "
                "not registered): until it does, it runs nothing"
              : "this agent has no join token and no credential, so it "
                "cannot register and learn its loom server's key: until it "
                "does, it runs nothing (start it with --join-token-file; "
                "--insecure serves anyone, on loopback addresses only; "
                "docs/security.md)";
      return v;
    }
    if (!presented.empty() && digests_.contains(digest)) {
      v.allowed = true;
      return v;
    }
  }
  v.status = 401;
  v.code = "unauthenticated";
  v.message =
      "only this agent's loom server may call it (missing or wrong server "
      "key)";
  return v;
}

ApiVerdict ApiGuard::CheckDatasetPeer(std::string_view node,
                                      std::string_view version,
                                      std::string_view authorization) const {
  std::string_view presented;
  if (absl::StartsWithIgnoreCase(
          absl::string_view(authorization.data(), authorization.size()),
          "Bearer ")) {
    presented = authorization.substr(7);
  }
  ApiVerdict v;
  std::string digest;
  bool no_key = false;
  {
    absl::MutexLock lock(&mu_);
    no_key = digests_.empty();
    auto it = by_node_.find(node);
    if (it != by_node_.end()) digest = it->second;
  }
  if (no_key) return Check(authorization);
  if (!digest.empty() && !presented.empty() &&
      SecureEquals(presented, DatasetPeerTokenFromDigest(digest, version))) {
    v.allowed = true;
    return v;
  }
  v.status = 401;
  v.code = "unauthenticated";
  v.message =
      "a dataset is served to the nodes of the jobs that read it (missing or "
      "wrong dataset token)";
  return v;
}

bool IsLoopbackHost(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* addrs = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &addrs) != 0) return false;
  bool all = addrs != nullptr;
  for (addrinfo* a = addrs; a != nullptr; a = a->ai_next) {
    if (!IsLoopbackAddress(a->ai_addr)) all = false;
  }
  freeaddrinfo(addrs);
  return all;
}

absl::Status CheckInsecureListen(bool insecure, const std::string& host) {
  if (!insecure || IsLoopbackHost(host)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--insecure: refused on --listen address '", host,
      "', which is not a loopback address: an agent without its server's key "
      "would run tasks for anyone who can reach it. Join with "
      "--join-token-file instead (docs/security.md)"));
}

}  // namespace loom
