#pragma once

// The TCP ports of service replicas (docs/agent.md, "Service replicas"): a
// task launched with `"port": true` gets a port of the agent's range
// (`--service-ports`) that no other live task of this agent holds and that
// is free on the node's address at that moment, in `PORT`.

#include <map>
#include <memory>
#include <string>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "loom/agent/launch_steps.h"

namespace loom {

struct PortRange {
  int first = 20000;
  int last = 29999;
};

// "FIRST-LAST" (1 <= FIRST <= LAST <= 65535), or one port "N";
// `InvalidArgument` otherwise.
absl::StatusOr<PortRange> ParsePortRange(std::string_view text);

// Whether a TCP socket can be bound to `host:port` now, as a server binds
// it (SO_REUSEADDR): a port some socket listens on, or holds without
// SO_REUSEADDR, is not free; connections in TIME_WAIT (the last task's)
// do not count.
bool PortBindable(const std::string& host, int port);

// The ports handed to the tasks of one agent (all its nodes: the nodes of
// a fleet share the agent's address). Thread-safe; never calls out.
class ReplicaPortPool {
 public:
  // `host`: the agent's own address (its `--listen` host), which the ports
  // are checked on and the probes call.
  ReplicaPortPool(std::string host, PortRange range);

  const std::string& host() const { return host_; }
  PortRange range() const { return range_; }

  // A port of the range for `owner` (a task: "node/task_id"), held until
  // `Release`: the next one after the last handed out (round robin, so a
  // port just given back is not handed out again at once) that no owner
  // holds and `PortBindable` finds free. `Unavailable` when there is none.
  absl::StatusOr<int> Allocate(const std::string& owner);

  // Holds `port` for `owner` again (a task recovered after an agent
  // restart; the port may lie outside the range, and is not bound: the
  // task has it). False when another owner holds it already.
  bool Hold(int port, const std::string& owner);

  // Gives `port` back when `owner` holds it; otherwise does nothing.
  void Release(int port, const std::string& owner);

  // Tests: who holds `port` ("" for nobody), and how many are held.
  std::string Holder(int port) const;
  size_t held() const;

 private:
  const std::string host_;
  const PortRange range_;
  mutable absl::Mutex mu_;
  std::map<int, std::string> held_ ABSL_GUARDED_BY(mu_);
  int next_ ABSL_GUARDED_BY(mu_);
};

// "node/task_id": who holds a task's port.
std::string PortOwner(const std::string& node, const std::string& task_id);

// The launch step of a service replica's port: `PORT` and `LOOM_PORT` (the
// port the runner allocated, `LaunchContext::port`) and `LOOM_HOST` (the
// address the probes call), overriding the request's `env`.
std::unique_ptr<const LaunchStep> MakeReplicaPortStep();

}  // namespace loom
