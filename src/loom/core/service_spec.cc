#include "loom/core/service_spec.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "loom/common/digest.h"
#include "loom/core/container_spec_yaml.h"
#include "loom/core/job_spec.h"
#include "loom/core/spec_reader.h"
#include "loom/core/yaml_util.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace loom {

int ReplicaAmount::Of(int replicas, bool round_up) const {
  if (!percent) return value;
  const int64_t scaled = int64_t{value} * std::max(replicas, 0);
  return static_cast<int>(round_up ? (scaled + 99) / 100 : scaled / 100);
}

UpdateSpec::Limits UpdateSpec::LimitsFor(int replicas) const {
  Limits limits;
  limits.surge = max_surge.Of(replicas, /*round_up=*/true);
  limits.unavailable = max_unavailable.Of(replicas, /*round_up=*/false);
  if (limits.surge == 0 && limits.unavailable == 0) limits.unavailable = 1;
  return limits;
}

absl::Duration ReplicaRestartSpec::BackoffAfter(int failures) const {
  absl::Duration wait = backoff;
  for (int i = 1; i < failures && wait < max_backoff; ++i) wait *= 2;
  return std::min(wait, max_backoff);
}

std::string_view AutoscaleMetricName(AutoscaleMetric metric) {
  switch (metric) {
    case AutoscaleMetric::kInFlight:
      return "in_flight";
    case AutoscaleMetric::kRps:
      return "rps";
    case AutoscaleMetric::kP95Ms:
      return "p95_ms";
  }
  return "in_flight";
}

std::string_view ServiceSpreadName(ServiceSpread spread) {
  switch (spread) {
    case ServiceSpread::kNode:
      return "node";
    case ServiceSpread::kLeaf:
      return "leaf";
  }
  return "node";
}

namespace {

using internal::FormatDurationExact;
using yaml::ChildPath;
using yaml::Field;
using yaml::KindOf;
using yaml::MapNode;

// Bounds of the service fields (docs/services.md).
constexpr int64_t kMaxServiceTarget = 1000000;
constexpr size_t kMaxProbePathBytes = 1024;
constexpr absl::Duration kMinProbePeriod = absl::Milliseconds(100);
constexpr absl::Duration kMaxProbeTime = absl::Hours(1);
constexpr int64_t kMaxProbeFailures = 100;
constexpr absl::Duration kMinRestartBackoff = absl::Milliseconds(100);

// The variables the agent sets for every replica, besides a task's.
constexpr absl::string_view kServiceReservedEnv[] = {"PORT"};

// Fields a service spec does not have but a job spec does, or that belong
// under `resources`: the hint that follows "unknown field 'x'".
struct FieldHint {
  absl::string_view key;
  absl::string_view hint;
};
constexpr FieldHint kServiceFieldHints[] = {
    {"gpus", "it belongs under `resources`: write resources: {gpus: ...}"},
    {"gpu_model",
     "it belongs under `resources`: write resources: {gpu_model: ...}"},
    {"cpus", "it belongs under `resources`: write resources: {cpus: ...}"},
    {"memory", "it belongs under `resources`: write resources: {memory: ...}"},
    {"tasks", "a service runs `replicas`, each one task"},
    {"time_limit", "a service runs until it is deleted"},
    {"cancel", "a service's replicas stop as `stop` says"},
    {"checkpoint", "a job spec field; a service has none"},
    {"requeue", "a job spec field; a replica is restarted as `restart` says"},
    {"hold", "a job spec field; a service has none"},
    {"dependency", "a job spec field; a service has none"},
    {"array", "a job spec field; a service has none"},
    {"spares", "a job spec field; a service has none"},
};
constexpr FieldHint kServiceResourceHints[] = {
    {"gpus_per_task", "a service's resources are per replica: write `gpus`"},
    {"cpus_per_task", "a service's resources are per replica: write `cpus`"},
    {"memory_per_task",
     "a service's resources are per replica: write `memory`"},
};

// Reports a key of `node` (a map) that has a hint in `hints`.
template <size_t N>
absl::Status CheckHintedFields(const yaml::Reader& reader,
                               const YAML::Node& node, absl::string_view path,
                               const FieldHint (&hints)[N]) {
  if (!node.IsMap()) return absl::OkStatus();
  for (auto it = node.begin(); it != node.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    const std::string& key = it->first.Scalar();
    for (const FieldHint& h : hints) {
      if (h.key == key) {
        return reader.Error(
            it->first, ChildPath(path, key),
            absl::StrCat("unknown field '", key, "' (", h.hint, ")"));
      }
    }
  }
  return absl::OkStatus();
}

// Turns a service spec document into a `ServiceSpec`. Every method returns
// InvalidArgument with "<source>:<line>:<column>: <path>: <reason>" on bad
// input. yaml-cpp exceptions are caught by `internal::ParseDocument`.
class ServiceSpecParser : public internal::SpecReader {
 public:
  // `source` must outlive the parser.
  explicit ServiceSpecParser(absl::string_view source)
      : internal::SpecReader(source, "service") {}

  absl::StatusOr<ServiceSpec> Parse(const YAML::Node& root);

 private:
  absl::Status CheckKind(const YAML::Node& root) const;
  absl::Status ParseReplicas(const Field& field, ReplicaRange* out) const;
  absl::Status ParseResources(const Field& field, ServiceSpec* spec) const;
  absl::StatusOr<ProbeSpec> ParseProbe(const Field& field) const;
  absl::StatusOr<ReplicaAmount> ReadAmount(const YAML::Node& node,
                                           absl::string_view path) const;
  absl::Status ParseUpdate(const Field& field, UpdateSpec* out) const;
  absl::StatusOr<AutoscaleSpec> ParseAutoscale(const Field& field) const;
  absl::Status ParseStop(const Field& field, ReplicaStopSpec* out) const;
  absl::Status ParseRestart(const Field& field, ReplicaRestartSpec* out) const;
};

absl::Status ServiceSpecParser::CheckKind(const YAML::Node& root) const {
  for (auto it = root.begin(); it != root.end(); ++it) {
    if (!it->first.IsScalar() || it->first.Scalar() != "kind") continue;
    absl::StatusOr<std::string> kind = ReadText(it->second, "kind", false);
    if (!kind.ok()) return kind.status();
    if (*kind == "service") return absl::OkStatus();
    if (ParseJobKind(*kind).ok()) {
      return Error(it->second, "kind",
                   absl::StrCat("'", *kind,
                                "' is a job kind; a service spec says "
                                "`kind: service` (submit a job with `loom "
                                "submit`)"));
    }
    return Error(it->second, "kind",
                 absl::StrCat("must be 'service', got '", *kind, "'"));
  }
  return Error(root, "kind",
               "is required (a service spec says `kind: service`)");
}

absl::Status ServiceSpecParser::ParseReplicas(const Field& field,
                                              ReplicaRange* out) const {
  const YAML::Node& node = field.value;
  if (node.IsScalar()) {
    absl::StatusOr<int64_t> n =
        ReadInt(node, field.key, 0, kMaxServiceReplicas);
    if (!n.ok()) return n.status();
    *out = ReplicaRange{static_cast<int>(*n), static_cast<int>(*n), false};
    return absl::OkStatus();
  }
  if (!node.IsMap()) {
    return Error(node, field.key,
                 absl::StrCat("must be a whole number or a range {min, max}, "
                              "got ",
                              KindOf(node)));
  }
  absl::StatusOr<MapNode> map = ReadFields(node, field.key, {"min", "max"});
  if (!map.ok()) return map.status();
  absl::StatusOr<const Field*> min = Require(*map, "min");
  if (!min.ok()) return min.status();
  absl::StatusOr<const Field*> max = Require(*map, "max");
  if (!max.ok()) return max.status();
  absl::StatusOr<int64_t> lo = ReadInt(
      (*min)->value, ChildPath(field.key, "min"), 1, kMaxServiceReplicas);
  if (!lo.ok()) return lo.status();
  absl::StatusOr<int64_t> hi = ReadInt(
      (*max)->value, ChildPath(field.key, "max"), 1, kMaxServiceReplicas);
  if (!hi.ok()) return hi.status();
  if (*lo > *hi) {
    return Error(
        (*min)->value, ChildPath(field.key, "min"),
        absl::StrCat("must not be more than `max` (", *hi, "), got ", *lo));
  }
  *out = ReplicaRange{static_cast<int>(*lo), static_cast<int>(*hi), true};
  return absl::OkStatus();
}

absl::Status ServiceSpecParser::ParseResources(const Field& field,
                                               ServiceSpec* spec) const {
  if (absl::Status st = CheckHintedFields(*this, field.value, field.key,
                                          kServiceResourceHints);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<MapNode> map = ReadFields(
      field.value, field.key, {"gpus", "gpu_model", "cpus", "memory"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("gpus"); f != nullptr) {
    absl::StatusOr<int64_t> n =
        ReadInt(f->value, ChildPath(map->path, "gpus"), 0, kMaxGpusPerNode);
    if (!n.ok()) return n.status();
    spec->gpus = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("gpu_model"); f != nullptr) {
    absl::StatusOr<std::string> model =
        ReadGpuModel(f->value, ChildPath(map->path, "gpu_model"));
    if (!model.ok()) return model.status();
    spec->gpu_model = *std::move(model);
  }
  if (const Field* f = map->Find("cpus"); f != nullptr) {
    absl::StatusOr<int64_t> milli =
        ReadCpusMilli(f->value, ChildPath(map->path, "cpus"));
    if (!milli.ok()) return milli.status();
    spec->cpus_milli = *milli;
  }
  if (const Field* f = map->Find("memory"); f != nullptr) {
    absl::StatusOr<int64_t> bytes =
        ReadMemory(f->value, ChildPath(map->path, "memory"));
    if (!bytes.ok()) return bytes.status();
    spec->memory_bytes = *bytes;
  }
  return absl::OkStatus();
}

absl::StatusOr<ProbeSpec> ServiceSpecParser::ParseProbe(
    const Field& field) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key,
                 {"http", "period", "timeout", "failures", "initial_delay"});
  if (!map.ok()) return map.status();
  ProbeSpec probe;
  absl::StatusOr<const Field*> http = Require(*map, "http");
  if (!http.ok()) return http.status();
  const std::string http_path = ChildPath(map->path, "http");
  absl::StatusOr<std::string> path = ReadText((*http)->value, http_path, false);
  if (!path.ok()) return path.status();
  if ((*path)[0] != '/') {
    return Error(
        (*http)->value, http_path,
        absl::StrCat("must be a path starting with '/', got '", *path, "'"));
  }
  if (path->size() > kMaxProbePathBytes) {
    return Error((*http)->value, http_path,
                 absl::StrCat("is longer than ", kMaxProbePathBytes, " bytes"));
  }
  if (std::any_of(path->begin(), path->end(), [](char c) {
        const auto u = static_cast<unsigned char>(c);
        return u <= 0x20 || u >= 0x7f;
      })) {
    return Error((*http)->value, http_path,
                 "must be printable ASCII without spaces (percent-encode "
                 "other characters)");
  }
  probe.http = *std::move(path);
  if (const Field* f = map->Find("period"); f != nullptr) {
    absl::StatusOr<absl::Duration> d =
        ReadBoundedDuration(f->value, ChildPath(map->path, "period"),
                            kMinProbePeriod, kMaxProbeTime);
    if (!d.ok()) return d.status();
    probe.period = *d;
  }
  probe.timeout = std::min(probe.timeout, probe.period);
  if (const Field* f = map->Find("timeout"); f != nullptr) {
    const std::string path_t = ChildPath(map->path, "timeout");
    absl::StatusOr<absl::Duration> d = ReadBoundedDuration(
        f->value, path_t, absl::Milliseconds(1), kMaxProbeTime);
    if (!d.ok()) return d.status();
    if (*d > probe.period) {
      return Error(f->value, path_t,
                   absl::StrCat("must not be longer than `period` (",
                                FormatDurationExact(probe.period), "), got '",
                                f->value.Scalar(), "'"));
    }
    probe.timeout = *d;
  }
  if (const Field* f = map->Find("failures"); f != nullptr) {
    absl::StatusOr<int64_t> n = ReadInt(
        f->value, ChildPath(map->path, "failures"), 1, kMaxProbeFailures);
    if (!n.ok()) return n.status();
    probe.failures = static_cast<int>(*n);
  }
  if (const Field* f = map->Find("initial_delay"); f != nullptr) {
    absl::StatusOr<absl::Duration> d =
        ReadBoundedDuration(f->value, ChildPath(map->path, "initial_delay"),
                            absl::ZeroDuration(), kMaxProbeTime);
    if (!d.ok()) return d.status();
    probe.initial_delay = *d;
  }
  return probe;
}

absl::StatusOr<ReplicaAmount> ServiceSpecParser::ReadAmount(
    const YAML::Node& node, absl::string_view path) const {
  absl::string_view text;
  if (node.IsScalar()) text = node.Scalar();
  const bool percent = absl::ConsumeSuffix(&text, "%");
  int64_t value = 0;
  if (!node.IsScalar() || !absl::SimpleAtoi(text, &value)) {
    return Error(
        node, path,
        absl::StrCat("must be a whole number or a percentage such as "
                     "25%, got ",
                     node.IsScalar() ? absl::StrCat("'", node.Scalar(), "'")
                                     : std::string(KindOf(node))));
  }
  if (percent && (value < 0 || value > 100)) {
    return Error(
        node, path,
        absl::StrCat("must be between 0% and 100%, got ", node.Scalar()));
  }
  if (!percent && (value < 0 || value > kMaxServiceReplicas)) {
    return Error(node, path,
                 absl::StrCat("must be between 0 and ", kMaxServiceReplicas,
                              ", got ", value));
  }
  return ReplicaAmount{static_cast<int>(value), percent};
}

absl::Status ServiceSpecParser::ParseUpdate(const Field& field,
                                            UpdateSpec* out) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"max_surge", "max_unavailable"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("max_surge"); f != nullptr) {
    absl::StatusOr<ReplicaAmount> a =
        ReadAmount(f->value, ChildPath(map->path, "max_surge"));
    if (!a.ok()) return a.status();
    out->max_surge = *a;
  }
  if (const Field* f = map->Find("max_unavailable"); f != nullptr) {
    absl::StatusOr<ReplicaAmount> a =
        ReadAmount(f->value, ChildPath(map->path, "max_unavailable"));
    if (!a.ok()) return a.status();
    out->max_unavailable = *a;
  }
  if (out->max_surge.value == 0 && out->max_unavailable.value == 0) {
    return Error(field.value, field.key,
                 "max_surge and max_unavailable cannot both be 0 (no replica "
                 "could ever be replaced)");
  }
  return absl::OkStatus();
}

absl::StatusOr<AutoscaleSpec> ServiceSpecParser::ParseAutoscale(
    const Field& field) const {
  absl::StatusOr<MapNode> map = ReadFields(
      field.value, field.key, {"metric", "target", "up_delay", "down_delay"});
  if (!map.ok()) return map.status();
  AutoscaleSpec autoscale;
  if (const Field* f = map->Find("metric"); f != nullptr) {
    const std::string path = ChildPath(map->path, "metric");
    absl::StatusOr<std::string> text = ReadText(f->value, path, false);
    if (!text.ok()) return text.status();
    bool known = false;
    for (AutoscaleMetric m : {AutoscaleMetric::kInFlight, AutoscaleMetric::kRps,
                              AutoscaleMetric::kP95Ms}) {
      if (AutoscaleMetricName(m) == *text) {
        autoscale.metric = m;
        known = true;
      }
    }
    if (!known) {
      return Error(
          f->value, path,
          absl::StrCat("must be in_flight, rps or p95_ms, got '", *text, "'"));
    }
  }
  absl::StatusOr<const Field*> target = Require(*map, "target");
  if (!target.ok()) return target.status();
  const std::string target_path = ChildPath(map->path, "target");
  absl::StatusOr<double> value = ReadNumber((*target)->value, target_path);
  if (!value.ok()) return value.status();
  if (*value <= 0 || *value > kMaxServiceTarget) {
    return Error(
        (*target)->value, target_path,
        absl::StrCat("must be more than 0 and at most ", kMaxServiceTarget,
                     ", got ", (*target)->value.Scalar()));
  }
  autoscale.target = *value;
  if (const Field* f = map->Find("up_delay"); f != nullptr) {
    absl::StatusOr<absl::Duration> d =
        ReadBoundedDuration(f->value, ChildPath(map->path, "up_delay"),
                            absl::ZeroDuration(), internal::kMaxGrace);
    if (!d.ok()) return d.status();
    autoscale.up_delay = *d;
  }
  if (const Field* f = map->Find("down_delay"); f != nullptr) {
    absl::StatusOr<absl::Duration> d =
        ReadBoundedDuration(f->value, ChildPath(map->path, "down_delay"),
                            absl::ZeroDuration(), internal::kMaxGrace);
    if (!d.ok()) return d.status();
    autoscale.down_delay = *d;
  }
  return autoscale;
}

absl::Status ServiceSpecParser::ParseStop(const Field& field,
                                          ReplicaStopSpec* out) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"signal", "grace"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("signal"); f != nullptr) {
    absl::StatusOr<int> signal =
        ReadSignal(f->value, ChildPath(map->path, "signal"));
    if (!signal.ok()) return signal.status();
    out->signal = *signal;
  }
  if (const Field* f = map->Find("grace"); f != nullptr) {
    absl::StatusOr<absl::Duration> grace =
        ReadBoundedDuration(f->value, ChildPath(map->path, "grace"),
                            absl::ZeroDuration(), internal::kMaxGrace);
    if (!grace.ok()) return grace.status();
    out->grace = *grace;
  }
  return absl::OkStatus();
}

absl::Status ServiceSpecParser::ParseRestart(const Field& field,
                                             ReplicaRestartSpec* out) const {
  absl::StatusOr<MapNode> map =
      ReadFields(field.value, field.key, {"backoff", "max_backoff"});
  if (!map.ok()) return map.status();
  if (const Field* f = map->Find("backoff"); f != nullptr) {
    absl::StatusOr<absl::Duration> d =
        ReadBoundedDuration(f->value, ChildPath(map->path, "backoff"),
                            kMinRestartBackoff, internal::kMaxGrace);
    if (!d.ok()) return d.status();
    out->backoff = *d;
  }
  // Omitted, the cap is 60s, or `backoff` when that is longer.
  out->max_backoff = std::max(out->max_backoff, out->backoff);
  if (const Field* f = map->Find("max_backoff"); f != nullptr) {
    const std::string path = ChildPath(map->path, "max_backoff");
    absl::StatusOr<absl::Duration> d = ReadBoundedDuration(
        f->value, path, kMinRestartBackoff, internal::kMaxGrace);
    if (!d.ok()) return d.status();
    if (*d < out->backoff) {
      return Error(f->value, path,
                   absl::StrCat("must not be shorter than `backoff` (",
                                FormatDurationExact(out->backoff), "), got '",
                                f->value.Scalar(), "'"));
    }
    out->max_backoff = *d;
  }
  return absl::OkStatus();
}

absl::StatusOr<ServiceSpec> ServiceSpecParser::Parse(const YAML::Node& root) {
  if (!root.IsMap()) {
    return Error(root, "",
                 absl::StrCat("a service spec must be a map of fields (kind, "
                              "name, command, ...), got ",
                              KindOf(root)));
  }
  if (absl::Status st = CheckKind(root); !st.ok()) return st;
  if (absl::Status st = CheckHintedFields(*this, root, "", kServiceFieldHints);
      !st.ok()) {
    return st;
  }
  absl::StatusOr<MapNode> map = ReadFields(
      root, "",
      {"kind",        "name",         "project",   "user",      "priority",
       "preemptible", "replicas",     "resources", "command",   "env",
       "working_dir", "container",    "port",      "readiness", "liveness",
       "update",      "autoscale",    "spread",    "stop",      "restart",
       "labels",      "node_selector"});
  if (!map.ok()) return map.status();

  ServiceSpec spec;
  absl::StatusOr<const Field*> name_field = Require(*map, "name");
  if (!name_field.ok()) return name_field.status();
  absl::StatusOr<std::string> name = ReadName((*name_field)->value, "name");
  if (!name.ok()) return name.status();
  spec.name = *std::move(name);
  if (const Field* f = map->Find("project"); f != nullptr) {
    absl::StatusOr<std::string> project = ReadId(f->value, f->key);
    if (!project.ok()) return project.status();
    spec.project = *std::move(project);
  }
  if (const Field* f = map->Find("user"); f != nullptr) {
    absl::StatusOr<std::string> user = ReadUser(f->value, f->key);
    if (!user.ok()) return user.status();
    spec.user = *std::move(user);
  }
  if (const Field* f = map->Find("priority"); f != nullptr) {
    absl::StatusOr<std::string> priority = ReadId(f->value, f->key);
    if (!priority.ok()) return priority.status();
    spec.priority = *std::move(priority);
  }
  if (const Field* f = map->Find("preemptible"); f != nullptr) {
    absl::StatusOr<bool> b = ReadBool(f->value, f->key);
    if (!b.ok()) return b.status();
    spec.preemptible = *b;
  }
  const Field* replicas = map->Find("replicas");
  if (replicas != nullptr) {
    if (absl::Status st = ParseReplicas(*replicas, &spec.replicas); !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("resources"); f != nullptr) {
    if (absl::Status st = ParseResources(*f, &spec); !st.ok()) return st;
  }
  absl::StatusOr<const Field*> command = Require(*map, "command");
  if (!command.ok()) return command.status();
  if (absl::Status st = ReadCommand(**command, &spec.command); !st.ok()) {
    return st;
  }
  if (const Field* f = map->Find("env"); f != nullptr) {
    if (absl::Status st = ReadEnv(*f, kServiceReservedEnv, &spec.env);
        !st.ok()) {
      return st;
    }
  }
  if (const Field* f = map->Find("working_dir"); f != nullptr) {
    absl::StatusOr<std::string> dir = ReadPath(f->value, f->key);
    if (!dir.ok()) return dir.status();
    spec.working_dir = *std::move(dir);
  }
  if (const Field* f = map->Find("container"); f != nullptr) {
    absl::StatusOr<ContainerSpec> container =
        internal::ParseContainerField(*this, *f);
    if (!container.ok()) return container.status();
    spec.container = *std::move(container);
    if (const Field* dir = map->Find("working_dir"); dir != nullptr) {
      return Error(dir->key_node, "working_dir",
                   "does not apply to a service in an image (it is a host "
                   "path); write container.workdir instead");
    }
  }
  if (const Field* f = map->Find("port"); f != nullptr) {
    absl::StatusOr<int64_t> port = ReadInt(f->value, f->key, 1, 65535);
    if (!port.ok()) return port.status();
    spec.port = static_cast<int>(*port);
  }
  if (const Field* f = map->Find("readiness"); f != nullptr) {
    absl::StatusOr<ProbeSpec> probe = ParseProbe(*f);
    if (!probe.ok()) return probe.status();
    spec.readiness = *std::move(probe);
  }
  if (const Field* f = map->Find("liveness"); f != nullptr) {
    absl::StatusOr<ProbeSpec> probe = ParseProbe(*f);
    if (!probe.ok()) return probe.status();
    spec.liveness = *std::move(probe);
  }
  if (const Field* f = map->Find("update"); f != nullptr) {
    if (absl::Status st = ParseUpdate(*f, &spec.update); !st.ok()) return st;
  }
  if (const Field* f = map->Find("autoscale"); f != nullptr) {
    if (!spec.replicas.range) {
      return Error(f->key_node, "autoscale",
                   "needs a range of replicas: write replicas: {min: N, max: "
                   "M} (a plain `replicas: N` is a fixed count)");
    }
    absl::StatusOr<AutoscaleSpec> autoscale = ParseAutoscale(*f);
    if (!autoscale.ok()) return autoscale.status();
    spec.autoscale = *autoscale;
  } else if (spec.replicas.range) {
    return Error(replicas->key_node, "replicas",
                 "a range {min, max} needs `autoscale` (the metric and target "
                 "that choose the count); write replicas: N for a fixed "
                 "count");
  }
  if (const Field* f = map->Find("spread"); f != nullptr) {
    absl::StatusOr<std::string> text = ReadText(f->value, f->key, false);
    if (!text.ok()) return text.status();
    if (*text == "node") {
      spec.spread = ServiceSpread::kNode;
    } else if (*text == "leaf") {
      spec.spread = ServiceSpread::kLeaf;
    } else {
      return Error(f->value, f->key,
                   absl::StrCat("must be node or leaf, got '", *text, "'"));
    }
  }
  if (const Field* f = map->Find("stop"); f != nullptr) {
    if (absl::Status st = ParseStop(*f, &spec.stop); !st.ok()) return st;
  }
  if (const Field* f = map->Find("restart"); f != nullptr) {
    if (absl::Status st = ParseRestart(*f, &spec.restart); !st.ok()) return st;
  }
  if (const Field* f = map->Find("labels"); f != nullptr) {
    if (absl::Status st = ReadLabels(*f, &spec.labels); !st.ok()) return st;
  }
  if (const Field* f = map->Find("node_selector"); f != nullptr) {
    if (absl::Status st = ReadLabels(*f, &spec.node_selector); !st.ok()) {
      return st;
    }
  }
  return spec;
}

absl::StatusOr<ServiceSpec> ParseServiceText(std::string_view text,
                                             std::string_view source,
                                             bool check_size) {
  const std::string source_name(source);
  ServiceSpecParser parser(source_name);
  absl::StatusOr<ServiceSpec> spec;
  absl::Status st = internal::ParseDocument(
      parser, text, check_size,
      "it needs at least `kind: service`, `name` and `command`",
      [&](const YAML::Node& root) {
        spec = parser.Parse(root);
        return spec.status();
      });
  if (!st.ok()) return st;
  return spec;
}

using Json = nlohmann::ordered_json;

Json StringMapJson(const std::map<std::string, std::string>& map) {
  Json j = Json::object();
  for (const auto& [k, v] : map) j[k] = v;
  return j;
}

Json ProbeJson(const ProbeSpec& probe) {
  return Json{{"http", probe.http},
              {"period", FormatDurationExact(probe.period)},
              {"timeout", FormatDurationExact(probe.timeout)},
              {"failures", probe.failures},
              {"initial_delay", FormatDurationExact(probe.initial_delay)}};
}

Json AmountJson(const ReplicaAmount& amount) {
  if (amount.percent) return Json(absl::StrCat(amount.value, "%"));
  return Json(amount.value);
}

// A number written as an integer when it is one ("4", not "4.0").
Json NumberJson(double value) {
  if (std::trunc(value) == value && std::abs(value) < 1e15) {
    return Json(static_cast<int64_t>(value));
  }
  return Json(value);
}

Json ResourcesJson(const ServiceSpec& spec) {
  return Json{{"gpus", spec.gpus},
              {"gpu_model", spec.gpu_model},
              {"cpus", NumberJson(static_cast<double>(spec.cpus_milli) / 1000)},
              {"memory", yaml::FormatBytesExact(spec.memory_bytes)}};
}

Json StopJson(const ReplicaStopSpec& stop) {
  return Json{{"signal", SignalName(stop.signal)},
              {"grace", FormatDurationExact(stop.grace)}};
}

}  // namespace

absl::StatusOr<ServiceSpec> ParseServiceSpec(std::string_view text,
                                             std::string_view source) {
  return ParseServiceText(text, source, /*check_size=*/true);
}

absl::StatusOr<ServiceSpec> ParseStoredServiceSpec(std::string_view text,
                                                   std::string_view source) {
  return ParseServiceText(text, source, /*check_size=*/false);
}

std::string ServiceSpecToJson(const ServiceSpec& spec) {
  Json j;
  j["kind"] = "service";
  j["name"] = spec.name;
  j["project"] = spec.project;
  if (!spec.user.empty()) j["user"] = spec.user;
  j["priority"] = spec.priority;
  j["preemptible"] = spec.preemptible;
  if (spec.replicas.range) {
    j["replicas"] = {{"min", spec.replicas.min}, {"max", spec.replicas.max}};
  } else {
    j["replicas"] = spec.replicas.min;
  }
  j["resources"] = ResourcesJson(spec);
  j["command"] = spec.command;
  j["env"] = StringMapJson(spec.env);
  if (!spec.working_dir.empty()) j["working_dir"] = spec.working_dir;
  if (spec.container.has_value()) {
    j["container"] = internal::ContainerSpecJson(*spec.container);
  }
  if (spec.port.has_value()) j["port"] = *spec.port;
  if (spec.readiness.has_value()) j["readiness"] = ProbeJson(*spec.readiness);
  if (spec.liveness.has_value()) j["liveness"] = ProbeJson(*spec.liveness);
  j["update"] = {{"max_surge", AmountJson(spec.update.max_surge)},
                 {"max_unavailable", AmountJson(spec.update.max_unavailable)}};
  if (spec.autoscale.has_value()) {
    const AutoscaleSpec& a = *spec.autoscale;
    j["autoscale"] = {{"metric", std::string(AutoscaleMetricName(a.metric))},
                      {"target", NumberJson(a.target)},
                      {"up_delay", FormatDurationExact(a.up_delay)},
                      {"down_delay", FormatDurationExact(a.down_delay)}};
  }
  j["spread"] = std::string(ServiceSpreadName(spec.spread));
  j["stop"] = StopJson(spec.stop);
  j["restart"] = {
      {"backoff", FormatDurationExact(spec.restart.backoff)},
      {"max_backoff", FormatDurationExact(spec.restart.max_backoff)}};
  j["labels"] = StringMapJson(spec.labels);
  j["node_selector"] = StringMapJson(spec.node_selector);
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string ReplicaTemplateDigest(const ServiceSpec& spec) {
  // The fields in a fixed order, optional ones only when set, so that a
  // field added later leaves the digest of specs without it unchanged.
  Json j;
  j["command"] = spec.command;
  if (spec.container.has_value()) {
    j["container"] = internal::ContainerSpecJson(*spec.container);
  }
  j["env"] = StringMapJson(spec.env);
  if (!spec.working_dir.empty()) j["working_dir"] = spec.working_dir;
  j["resources"] = ResourcesJson(spec);
  if (spec.readiness.has_value()) j["readiness"] = ProbeJson(*spec.readiness);
  if (spec.liveness.has_value()) j["liveness"] = ProbeJson(*spec.liveness);
  j["stop"] = StopJson(spec.stop);
  j["node_selector"] = StringMapJson(spec.node_selector);
  j["priority"] = spec.priority;
  j["preemptible"] = spec.preemptible;
  return Sha256Hex(j.dump(-1, ' ', false, Json::error_handler_t::replace));
}

absl::StatusOr<JobRequest> ToReplicaRequest(const ServiceSpec& spec,
                                            const Cluster& cluster, JobId id,
                                            absl::Time submit_time) {
  JobRequest job;
  job.id = id;
  job.name = spec.name;
  job.project = spec.project;
  if (!spec.user.empty()) job.user = spec.user;
  job.kind = JobKind::kInference;
  job.preemptible = spec.preemptible;
  if (spec.container.has_value()) job.image = spec.container->image_digest;
  job.node_selector = spec.node_selector;
  job.submit_time = submit_time;
  job.time_limit = absl::InfiniteDuration();
  absl::StatusOr<int> priority =
      internal::ResolvePriority(cluster, spec.priority);
  if (!priority.ok()) return priority.status();
  job.priority = *priority;

  if (spec.gpu_model != "any") {
    std::vector<int> gpus_per_model(cluster.gpu_models.size(), 0);
    for (const NodeSpec& node : cluster.nodes) {
      if (node.gpu_model >= 0 &&
          node.gpu_model < static_cast<int>(gpus_per_model.size())) {
        gpus_per_model[node.gpu_model] += node.gpus;
      }
    }
    const GpuModelId model = cluster.FindGpuModel(spec.gpu_model);
    if (model < 0 || gpus_per_model[model] == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("resources.gpu_model: the cluster has no '",
                       spec.gpu_model, "' GPUs (it has ",
                       internal::ModelsWithGpus(cluster, gpus_per_model), ")"));
    }
    job.shape.gpu_model = model;
  }
  job.shape.tasks = 1;
  job.shape.gpus_per_task = spec.gpus;
  job.shape.cpus_milli_per_task = spec.cpus_milli;
  job.shape.memory_bytes_per_task = spec.memory_bytes;
  if (absl::Status st = ValidateJobRequest(job, cluster); !st.ok()) return st;
  return job;
}

}  // namespace loom
