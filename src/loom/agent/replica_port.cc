#include "loom/agent/replica_port.h"

#include <sys/socket.h>
#include <unistd.h>

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loom/agent/http_probe.h"

namespace loom {

absl::StatusOr<PortRange> ParsePortRange(std::string_view text) {
  const std::vector<std::string> parts = absl::StrSplit(std::string(text), '-');
  PortRange r;
  const bool ok =
      (parts.size() == 1 || parts.size() == 2) &&
      absl::SimpleAtoi(parts[0], &r.first) &&
      absl::SimpleAtoi(parts.size() == 2 ? parts[1] : parts[0], &r.last) &&
      r.first >= 1 && r.first <= r.last && r.last <= 65535;
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", std::string(text),
                     "' must be a port range FIRST-LAST (1 to 65535, FIRST "
                     "<= LAST), e.g. 20000-29999"));
  }
  return r;
}

bool PortBindable(const std::string& host, int port) {
  absl::StatusOr<TcpAddress> address = ResolveTcpAddress(host, port);
  if (!address.ok()) return false;
  const int fd = ::socket(address->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  // As a server binds: connections of an earlier task in TIME_WAIT do not
  // make the port taken, a socket listening on it does.
  const int on = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
  const bool bound =
      ::bind(fd, reinterpret_cast<const sockaddr*>(&address->addr),
             address->len) == 0;
  ::close(fd);
  return bound;
}

ReplicaPortPool::ReplicaPortPool(std::string host, PortRange range)
    : host_(std::move(host)), range_(range), next_(range.first) {}

absl::StatusOr<int> ReplicaPortPool::Allocate(const std::string& owner) {
  absl::MutexLock lock(&mu_);
  const int size = range_.last - range_.first + 1;
  int busy = 0;
  for (int i = 0; i < size; ++i) {
    const int port = next_;
    next_ = next_ >= range_.last ? range_.first : next_ + 1;
    if (held_.contains(port)) continue;
    if (!PortBindable(host_, port)) {
      ++busy;
      continue;
    }
    held_[port] = owner;
    return port;
  }
  return absl::UnavailableError(
      absl::StrCat("no free port in ", range_.first, "-", range_.last, " on ",
                   host_, " (", held_.size(), " held by tasks of this agent, ",
                   busy, " in use by others); see --service-ports"));
}

bool ReplicaPortPool::Hold(int port, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto [it, added] = held_.emplace(port, owner);
  return added || it->second == owner;
}

void ReplicaPortPool::Release(int port, const std::string& owner) {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(port);
  if (it != held_.end() && it->second == owner) held_.erase(it);
}

std::string ReplicaPortPool::Holder(int port) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(port);
  return it == held_.end() ? "" : it->second;
}

size_t ReplicaPortPool::held() const {
  absl::MutexLock lock(&mu_);
  return held_.size();
}

std::string PortOwner(const std::string& node, const std::string& task_id) {
  return absl::StrCat(node, "/", task_id);
}

namespace {

class ReplicaPortStep : public LaunchStep {
 public:
  std::string_view name() const override { return "port"; }
  void Apply(const LaunchContext& ctx, const TaskProcess&, int,
             TaskSpec& spec) const override {
    if (ctx.port == 0) return;
    spec.env["PORT"] = absl::StrCat(ctx.port);
    spec.env["LOOM_PORT"] = absl::StrCat(ctx.port);
    spec.env["LOOM_HOST"] = ctx.port_host;
  }
};

}  // namespace

std::unique_ptr<const LaunchStep> MakeReplicaPortStep() {
  return std::make_unique<ReplicaPortStep>();
}

}  // namespace loom
