#pragma once

// The service spec: what a user applies with `loom service apply -f
// svc.yaml` for an inference service, long-running replicas behind one
// endpoint (issue 21). The format is documented field by field in
// docs/services.md, "Service spec". Parsing shares its reads and its error
// format with the job spec (loom/core/job_spec.h).

#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/core/cluster.h"
#include "loom/core/container_spec.h"
#include "loom/core/job.h"

namespace loom {

// The most replicas one service may ask for (`replicas`, `replicas.max`).
inline constexpr int kMaxServiceReplicas = 1000;

// An HTTP probe of a replica: a GET of `http` on the replica's `PORT` every
// `period`, each given `timeout`; a 2xx or 3xx answer passes. `failures`
// failed probes in a row fail it. The first probe is `initial_delay` after
// the replica's process started. The defaults are those of the agent's
// launch body (loom/agent/probe_spec.h), so that a probe that gives only
// `http` means the same at both ends.
struct ProbeSpec {
  std::string http;  // the path, starting with '/': "/healthz"
  absl::Duration period = absl::Seconds(1);
  absl::Duration timeout = absl::Seconds(1);  // at most `period`
  int failures = 3;
  absl::Duration initial_delay = absl::ZeroDuration();

  bool operator==(const ProbeSpec&) const = default;
};

// How many replicas run: `replicas: N` is min = max = N (`range` false);
// `replicas: {min, max}` is an autoscaled range (`range` true, and the
// spec's `autoscale` is then set). A range starts at `min`.
struct ReplicaRange {
  int min = 1;
  int max = 1;
  bool range = false;

  bool operator==(const ReplicaRange&) const = default;
};

// A number of replicas in an update: a count, or `value` percent of the
// desired replicas (`percent`).
struct ReplicaAmount {
  int value = 0;
  bool percent = false;

  // The count for `replicas` desired replicas: a percentage is rounded up
  // when `round_up`, else down.
  int Of(int replicas, bool round_up) const;

  bool operator==(const ReplicaAmount&) const = default;
};

// A rolling update: at most `max_surge` replicas above the desired count
// while new ones start, at most `max_unavailable` below it while old ones
// stop. Never both zero as written.
struct UpdateSpec {
  ReplicaAmount max_surge{1, false};
  ReplicaAmount max_unavailable{0, false};

  struct Limits {
    int surge = 0;
    int unavailable = 0;
  };
  // The two limits for `replicas` desired replicas, as Kubernetes resolves
  // a Deployment's: the surge rounded up, the unavailable rounded down, and
  // when both come to zero, one replica may be unavailable (so that an
  // update can always proceed).
  Limits LimitsFor(int replicas) const;

  bool operator==(const UpdateSpec&) const = default;
};

// What the autoscaler measures at the balancer: requests in flight per
// replica, requests per second per replica, or the service's 95th
// percentile response time in milliseconds.
enum class AutoscaleMetric { kInFlight, kRps, kP95Ms };

// "in_flight", "rps", "p95_ms".
std::string_view AutoscaleMetricName(AutoscaleMetric metric);

// Scaling between `replicas.min` and `replicas.max` so that `metric` stays
// near `target`: replicas are added once the measurement has been above the
// target for `up_delay`, removed once it has been below for `down_delay`.
struct AutoscaleSpec {
  AutoscaleMetric metric = AutoscaleMetric::kInFlight;
  double target = 0;  // > 0, in the metric's unit
  absl::Duration up_delay = absl::Seconds(30);
  absl::Duration down_delay = absl::Minutes(5);

  bool operator==(const AutoscaleSpec&) const = default;
};

// Where replicas go relative to each other, where the cluster allows:
// distinct nodes, or distinct leaf switches.
enum class ServiceSpread { kNode, kLeaf };

// "node", "leaf".
std::string_view ServiceSpreadName(ServiceSpread spread);

// How a replica is stopped once it is drained from the balancer: `signal`,
// up to `grace`, then SIGKILL of its process group.
struct ReplicaStopSpec {
  int signal = SIGTERM;
  absl::Duration grace = absl::Seconds(30);

  bool operator==(const ReplicaStopSpec&) const = default;
};

// How a replica that exited or failed its liveness probe is restarted:
// after `backoff`, doubling with each failure in a row up to `max_backoff`.
struct ReplicaRestartSpec {
  absl::Duration backoff = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(60);

  // The wait before restart number `failures` (1 for the first failure in
  // a row): backoff x 2^(failures - 1), at most `max_backoff`.
  absl::Duration BackoffAfter(int failures) const;

  bool operator==(const ReplicaRestartSpec&) const = default;
};

// A service as applied. Durations are whole milliseconds when parsed.
struct ServiceSpec {
  std::string name;  // a job name (loom/core/job_name.h)
  std::string project = "default";
  // Filled by the server from the caller; a spec may set it. Empty: unset.
  std::string user;
  std::string priority = "normal";  // a priority class of the cluster
  bool preemptible = false;
  ReplicaRange replicas;

  // What each replica needs: one task of `gpus` GPUs (0: none).
  int gpus = 1;
  std::string gpu_model = "any";  // lower case
  int64_t cpus_milli = 0;         // 0: no CPU requirement
  int64_t memory_bytes = 0;       // 0: no memory requirement

  // argv of every replica; a spec's one-string command becomes
  // {"/bin/sh", "-c", command}.
  std::vector<std::string> command;
  std::map<std::string, std::string> env;
  std::string working_dir;  // absolute path, or empty: the agent's default
  // The image every replica runs in (docs/images.md); nullopt: a host
  // process. As in a job spec.
  std::optional<ContainerSpec> container;

  // The service's stable port on the gateway; nullopt: the gateway picks
  // one. Each replica listens on its own `PORT`, which the agent gives it.
  std::optional<int> port;
  // nullopt: a replica is ready as soon as its process runs.
  std::optional<ProbeSpec> readiness;
  // nullopt: a replica is restarted only when its process exits.
  std::optional<ProbeSpec> liveness;
  UpdateSpec update;
  // Set exactly when `replicas.range` is.
  std::optional<AutoscaleSpec> autoscale;
  ServiceSpread spread = ServiceSpread::kNode;
  ReplicaStopSpec stop;
  ReplicaRestartSpec restart;
  std::map<std::string, std::string> labels;
  // As a job's (loom/core/labels.h `MatchesSelector`).
  std::map<std::string, std::string> node_selector;

  bool operator==(const ServiceSpec&) const = default;
};

// Parses a service spec written in YAML or JSON, which must say `kind:
// service`. `source` names the document in error messages, which are
// InvalidArgument and read "<source>:<line>:<column>: <field path>:
// <reason>", like the job spec's: "svc.yaml:7:12: replicas.max: must be
// between 1 and 1000, got 5000". Unknown fields, repeated fields, tabs used
// for indentation, empty documents and several documents in one text are
// errors. Never throws; any bytes give either a spec or an error.
absl::StatusOr<ServiceSpec> ParseServiceSpec(std::string_view text,
                                             std::string_view source);

// Reads back a spec that `ServiceSpecToJson` wrote (a stored record): the
// same checks as `ParseServiceSpec` except the size of the whole text.
absl::StatusOr<ServiceSpec> ParseStoredServiceSpec(std::string_view text,
                                                   std::string_view source);

// The spec as canonical JSON, for storage: every field written out in a
// fixed order (durations as "30s"-style strings, signals by name, memory as
// an exact byte quantity, percentages as "25%"); `user`, `working_dir`,
// `container`, `port`, `readiness`, `liveness` and `autoscale` only when
// set. `ParseStoredServiceSpec` reads it back to an equal spec. Never
// throws; invalid UTF-8 is replaced.
std::string ServiceSpecToJson(const ServiceSpec& spec);

// The scheduler's request for one replica of `spec`: one task of `gpus`
// GPUs (0 is representable; see docs/services.md for what the scheduler
// accepts), the priority class's value, the GPU model's id, node_selector,
// preemptible, the image digest, kind `inference`, no time limit. An empty
// `user` becomes "default". Finishes with `ValidateJobRequest`. Errors are
// InvalidArgument naming the field, as `ToJobRequest`'s:
// "resources.gpu_model: the cluster has no 'v100' GPUs (it has h200, a100)".
absl::StatusOr<JobRequest> ToReplicaRequest(const ServiceSpec& spec,
                                            const Cluster& cluster, JobId id,
                                            absl::Time submit_time);

// The SHA-256 (64 lower-case hex digits) of what a replica runs: `command`,
// `container` (with its `image_digest`), `env`, `working_dir`, the
// resources, `readiness`, `liveness`, `stop`, `node_selector`, `priority`
// and `preemptible`, in their canonical JSON. Two specs with the same
// digest run the same replicas, so a new digest means a rolling update;
// `replicas`, `autoscale`, `update`, `spread`, `restart`, `port`, `labels`,
// `project`, `user` and `name` do not enter it.
std::string ReplicaTemplateDigest(const ServiceSpec& spec);

}  // namespace loom
