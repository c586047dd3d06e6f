#pragma once

// The service reconciler's decisions, as a pure function of a service, its
// replicas as the controller sees them and the time (docs/services.md,
// "Replicas" and "Rolling updates"): how many replicas to start, which to
// drain from the balancer, which drained ones to stop, and what to say. The
// controller (controller_services.cc) applies them. No I/O, no clock.

#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/server/service_record.h"

namespace loom {

// A replica stays in the balancer's drain at most this long before it is
// stopped anyway (its connections are then cut by its stop signal).
inline constexpr absl::Duration kMaxDrain = absl::Seconds(30);

// One replica (a job) of a service.
struct ReplicaView {
  JobId job = 0;
  bool current = true;  // runs the service's revision
  enum class Phase {
    kPending,   // waits for a placement (or to run again)
    kStarting,  // placed or running, not ready yet
    kReady,     // running, its readiness passed, its port known
    kDraining,  // taken out of the balancer, requests in flight finishing
    kStopping,  // asked to stop
  } phase = Phase::kPending;
  // Pending: why (the scheduler's reason); empty when it is merely queued.
  std::string pending_reason;
  // Pending for want of room (its reason says so, not just queued).
  bool unschedulable = false;
  // When it entered its phase (submitted, started, became ready, drained).
  absl::Time since;
  // The gateway serves it (its server is in the backend, ready).
  bool in_backend = false;
  // Starting: why its agent says it is not ready ("" when it says none).
  std::string not_ready_reason;
  // While draining: the gateway's count of its sessions (nullopt: unknown).
  std::optional<int> sessions;
};

struct ServicePlan {
  int create = 0;            // new replicas of the current revision
  std::vector<JobId> drain;  // out of the balancer first
  std::vector<JobId> stop;   // drained: stop now
  std::string status;        // for `loom service show`
  // Nothing to do and every replica current and ready.
  bool settled = false;
};

// `gateway_live`: a gateway reported within the last few seconds, so that
// "in the backend" and drain counts mean something; without one, ready
// replicas count as serving and drains end at once.
ServicePlan PlanService(const ServiceRecord& service,
                        const std::vector<ReplicaView>& replicas,
                        bool gateway_live, absl::Time now);

}  // namespace loom
