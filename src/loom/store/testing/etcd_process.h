#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace loom::testing {

// A throwaway etcd cluster for tests: `members` etcd processes (Debian's
// /usr/bin/etcd, or $LOOM_ETCD) on free loopback ports with fast election
// timings, data in `dir`. The destructor kills them with SIGKILL (a member
// without quorum hangs on SIGTERM) and waits for them.
class EtcdProcess {
 public:
  // Starts the members and waits until every one reports healthy.
  static absl::StatusOr<EtcdProcess> Start(const std::string& dir,
                                           int members = 1);
  EtcdProcess(EtcdProcess&& other) noexcept;
  EtcdProcess& operator=(EtcdProcess&&) = delete;
  ~EtcdProcess();

  // Client URLs, one per member ("http://127.0.0.1:PORT").
  const std::vector<std::string>& endpoints() const { return endpoints_; }
  // Comma-joined client URLs.
  std::string EndpointList() const;
  // SIGKILLs member `i` (and waits for it).
  void Kill(int i);

 private:
  EtcdProcess() = default;
  std::vector<pid_t> pids_;
  std::vector<std::string> endpoints_;
};

}  // namespace loom::testing
