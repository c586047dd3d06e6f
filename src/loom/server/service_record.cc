#include "loom/server/service_record.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "loom/server/job_record.h"

namespace loom {

std::string ServiceKey(std::string_view name) {
  return absl::StrCat(std::string(kServicePrefix), std::string(name));
}

JobSpec ReplicaJobSpec(const ServiceSpec& spec) {
  JobSpec j;
  j.name = spec.name;
  j.project = spec.project;
  j.user = spec.user;
  j.kind = JobKind::kInference;
  j.priority = spec.priority;
  j.preemptible = spec.preemptible;
  j.tasks = 1;
  j.gpus_per_task = spec.gpus;
  j.gpu_model = spec.gpu_model;
  j.cpus_milli_per_task = spec.cpus_milli;
  j.memory_bytes_per_task = spec.memory_bytes;
  j.command = spec.command;
  j.env = spec.env;
  j.working_dir = spec.working_dir;
  j.container = spec.container;
  j.cancel_signal = spec.stop.signal;
  j.cancel_grace = spec.stop.grace;
  j.restart = RestartSpec{0, absl::ZeroDuration()};
  j.requeue = RestartSpec{-1, absl::ZeroDuration()};
  j.labels = spec.labels;
  j.labels["loom.service"] = spec.name;
  j.node_selector = spec.node_selector;
  return j;
}

nlohmann::json ServiceRecordToJson(const ServiceRecord& s) {
  nlohmann::json j = {
      {"name", s.name},
      {"spec", nlohmann::json::parse(ServiceSpecToJson(s.spec))},
      {"revision", s.revision},
      {"generation", s.generation},
      {"port", s.port},
      {"desired", s.desired},
      {"created", FormatTimestamp(s.created)},
      {"updated", FormatTimestamp(s.updated)},
      {"failures", s.failures},
      {"events", s.events.ToJson()}};
  if (s.deleting) j["deleting"] = true;
  if (s.next_start) j["next_start"] = FormatTimestamp(*s.next_start);
  if (s.events.dropped() > 0) j["events_dropped"] = s.events.dropped();
  return j;
}

absl::StatusOr<ServiceRecord> ServiceRecordFromJson(const nlohmann::json& j) {
  try {
    ServiceRecord s;
    s.name = j.at("name").get<std::string>();
    absl::StatusOr<ServiceSpec> spec = ParseStoredServiceSpec(
        j.at("spec").dump(), absl::StrCat("service ", s.name));
    if (!spec.ok()) return spec.status();
    s.spec = *std::move(spec);
    s.revision = j.at("revision").get<std::string>();
    s.generation = j.value("generation", 1);
    s.port = j.at("port").get<int>();
    s.desired = j.at("desired").get<int>();
    for (auto [key, out] :
         {std::pair<const char*, absl::Time*>{"created", &s.created},
          {"updated", &s.updated}}) {
      absl::StatusOr<absl::Time> t =
          ParseTimestamp(j.at(key).get<std::string>());
      if (!t.ok()) return t.status();
      *out = *t;
    }
    s.deleting = j.value("deleting", false);
    s.failures = j.value("failures", 0);
    if (j.contains("next_start")) {
      absl::StatusOr<absl::Time> t =
          ParseTimestamp(j["next_start"].get<std::string>());
      if (!t.ok()) return t.status();
      s.next_start = *t;
    }
    absl::StatusOr<JobEvents> events =
        JobEvents::FromJson(j.value("events", nlohmann::json::array()),
                            j.value("events_dropped", int64_t{0}));
    if (!events.ok()) return events.status();
    s.events = *std::move(events);
    return s;
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("service record: ", e.what()));
  }
}

}  // namespace loom
