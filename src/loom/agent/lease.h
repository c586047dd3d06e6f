#pragma once

// The lease file (`<node>/lease`, docs/fault-tolerance.md): when the server
// last answered this node's heartbeat and how long the node may go without
// an answer before its tasks must die. The agent fences by it while it
// lives; its tasks' shims fence by it when the agent is gone; an agent that
// restarts fences by the lease its predecessor left.

#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace loom {

struct Lease {
  // The send time of the last heartbeat (or registration) answered.
  absl::Time last_ack_sent = absl::InfinitePast();
  // Zero: never fence.
  absl::Duration fence_after = absl::ZeroDuration();
};

// Replaces the lease at `path` (write to `path.tmp`, rename; not synced:
// after a crash of the machine its tasks are gone anyway). On error, a
// status whose message names the step and errno ("open: No space left on
// device").
absl::Status WriteLease(const std::string& path, const Lease& lease);

// The lease at `path`; nullopt when there is none, it is unreadable, or it
// never fences.
std::optional<Lease> ReadLease(const std::string& path);

}  // namespace loom
