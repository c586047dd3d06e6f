#include "loom/store/testing/etcd_process.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"

extern char** environ;

namespace loom::testing {
namespace {

// A port that was free a moment ago (the kernel's pick for port 0).
absl::StatusOr<int> FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::InternalError("socket() failed");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return absl::InternalError("cannot find a free port");
  }
  const int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

}  // namespace

absl::StatusOr<EtcdProcess> EtcdProcess::Start(const std::string& dir,
                                               int members) {
  const char* env = std::getenv("LOOM_ETCD");
  const std::string binary = env != nullptr ? env : "/usr/bin/etcd";
  if (access(binary.c_str(), X_OK) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(binary,
                     " not found: scripts/setup.sh --test installs "
                     "etcd-server"));
  }
  std::vector<int> client_ports, peer_ports;
  for (int i = 0; i < members; ++i) {
    absl::StatusOr<int> c = FreePort();
    absl::StatusOr<int> p = FreePort();
    if (!c.ok()) return c.status();
    if (!p.ok()) return p.status();
    client_ports.push_back(*c);
    peer_ports.push_back(*p);
  }
  std::vector<std::string> initial;
  for (int i = 0; i < members; ++i) {
    initial.push_back(
        absl::StrCat("m", i, "=http://127.0.0.1:", peer_ports[i]));
  }
  const std::string cluster = absl::StrJoin(initial, ",");
  EtcdProcess out;
  for (int i = 0; i < members; ++i) {
    const std::string data = absl::StrCat(dir, "/etcd-m", i);
    std::filesystem::create_directories(data);
    const std::string client =
        absl::StrCat("http://127.0.0.1:", client_ports[i]);
    const std::string peer = absl::StrCat("http://127.0.0.1:", peer_ports[i]);
    std::vector<std::string> args = {binary,
                                     "--name",
                                     absl::StrCat("m", i),
                                     "--data-dir",
                                     data,
                                     "--listen-client-urls",
                                     client,
                                     "--advertise-client-urls",
                                     client,
                                     "--listen-peer-urls",
                                     peer,
                                     "--initial-advertise-peer-urls",
                                     peer,
                                     "--initial-cluster",
                                     cluster,
                                     "--initial-cluster-token",
                                     absl::StrCat("loom-test-", getpid()),
                                     "--initial-cluster-state",
                                     "new",
                                     "--heartbeat-interval",
                                     "50",
                                     "--election-timeout",
                                     "500",
                                     "--max-txn-ops",
                                     "100000",
                                     "--max-request-bytes",
                                     "33554432",
                                     "--logger",
                                     "zap",
                                     "--log-level",
                                     "warn"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    const std::string log = data + ".log";
    posix_spawn_file_actions_addopen(&fa, 1, log.c_str(),
                                     O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid = 0;
    const int rc =
        posix_spawn(&pid, binary.c_str(), &fa, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) {
      return absl::InternalError(absl::StrCat("cannot start ", binary));
    }
    out.pids_.push_back(pid);
    out.endpoints_.push_back(client);
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  for (int i = 0; i < members; ++i) {
    httplib::Client c(out.endpoints_[i]);
    c.set_connection_timeout(std::chrono::milliseconds(200));
    while (true) {
      auto r = c.Get("/health");
      if (r && r->status == 200 &&
          r->body.find("\"true\"") != std::string::npos) {
        break;
      }
      int status = 0;
      if (waitpid(out.pids_[i], &status, WNOHANG) == out.pids_[i]) {
        out.pids_[i] = 0;
        return absl::InternalError(absl::StrCat("etcd member ", i,
                                                " exited at start; see ", dir,
                                                "/etcd-m", i, ".log"));
      }
      if (absl::Now() > deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("etcd member ", i, " not healthy after 20 s"));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  return out;
}

EtcdProcess::EtcdProcess(EtcdProcess&& other) noexcept
    : pids_(std::move(other.pids_)), endpoints_(std::move(other.endpoints_)) {
  other.pids_.clear();
}

EtcdProcess::~EtcdProcess() {
  for (size_t i = 0; i < pids_.size(); ++i) Kill(static_cast<int>(i));
}

std::string EtcdProcess::EndpointList() const {
  return absl::StrJoin(endpoints_, ",");
}

void EtcdProcess::Kill(int i) {
  if (i < 0 || i >= static_cast<int>(pids_.size()) || pids_[i] <= 0) return;
  kill(pids_[i], SIGKILL);
  int status = 0;
  waitpid(pids_[i], &status, 0);
  pids_[i] = 0;
}

}  // namespace loom::testing
