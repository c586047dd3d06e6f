#pragma once

// What the controller keeps about an inference service (docs/services.md):
// its spec as applied, the revision its replicas must run, how many it
// wants now, and what the service's reconciler has to remember between
// passes (restart backoff, autoscaling). Stored as JSON under
// "/services/<name>"; replicas are jobs (`JobRecord::service`).

#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/job.h"
#include "loom/core/job_spec.h"
#include "loom/core/service_spec.h"
#include "loom/server/job_events.h"
#include "nlohmann/json.hpp"

namespace loom {

inline constexpr std::string_view kServicePrefix = "/services/";

std::string ServiceKey(std::string_view name);

struct ServiceRecord {
  std::string name;
  ServiceSpec spec;
  // `ReplicaTemplateDigest(spec)`: replicas of another revision are old
  // and replaced by a rolling update.
  std::string revision;
  int generation = 1;  // applies that changed the spec
  // The service's port on the gateway: its spec's, or the lowest free one
  // of the cluster's `services.port_range` (loom/core/service_ports.h).
  int port = 0;
  // Replicas wanted now: `spec.replicas.min` unless scaled by hand or the
  // autoscaler, within [min, max].
  int desired = 1;
  absl::Time created;
  absl::Time updated;
  bool deleting = false;  // `loom service delete`: drain, stop, forget
  // Replicas that ended on their own (exited, liveness failed) in a row,
  // and when the next may start (`spec.restart`).
  int failures = 0;
  std::optional<absl::Time> next_start;
  // What the reconciler says about it now ("3 of 3 ready", "rolling out
  // ...", "waiting: ..."); not persisted.
  std::string status;
  // Autoscaling: since when the measurement has been above (below) the
  // target; not persisted (a restart starts the delays again).
  std::optional<absl::Time> above_since;
  std::optional<absl::Time> below_since;
  std::optional<double> last_measure;
  // Changed by the reconciler since its last write; not persisted.
  bool dirty = false;
  JobEvents events;

  void AddEvent(absl::Time t, std::string message) {
    events.Add(t, std::move(message));
  }
};

// The name of a replica's server in its service's backend: "j<job id>".
std::string ReplicaServerName(JobId job);

nlohmann::json ServiceRecordToJson(const ServiceRecord& s);
// The job spec of one replica of `spec` (docs/services.md, "Replicas"): one
// task of its resources, kind `inference`, its command, environment and
// image, its stop signal and grace as the cancel's, no restarts (the
// service replaces a replica that fails), requeued after a node loss or a
// preemption; labelled `loom.service: <name>`.
JobSpec ReplicaJobSpec(const ServiceSpec& spec);
absl::StatusOr<ServiceRecord> ServiceRecordFromJson(const nlohmann::json& j);

}  // namespace loom
