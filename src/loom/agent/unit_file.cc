#include "loom/agent/unit_file.h"

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "loom/agent/json_values.h"
#include "loom/agent/launch_request.h"

namespace loom {

using json = nlohmann::json;

std::string UnitFileText(const TaskUnit& unit) {
  json m = {{"version", 1},          {"task_id", unit.task_id},
            {"job_id", unit.job_id}, {"task_index", unit.task_index},
            {"gpus", unit.gpus},     {"processes", json::array()}};
  for (const TaskProcess& p : unit.procs) {
    m["processes"].push_back({{"launcher_id", p.launcher_id},
                              {"stdout", p.stdout_path},
                              {"stderr", p.stderr_path}});
  }
  if (unit.port != 0) m["port"] = unit.port;
  if (unit.started_at != absl::InfinitePast()) {
    m["started_at_ms"] = absl::ToUnixMillis(unit.started_at);
  }
  if (unit.readiness) m["readiness"] = ProbeSpecJson(*unit.readiness);
  if (unit.liveness) m["liveness"] = ProbeSpecJson(*unit.liveness);
  return Dump(m, 2);
}

absl::StatusOr<TaskUnit> ParseUnitFile(const std::string& text) {
  const json m = json::parse(text, nullptr, false);
  if (!m.is_object() || !m.contains("task_id") || !m["task_id"].is_string() ||
      !ValidTaskId(m["task_id"].get<std::string>()) ||
      !m.contains("processes") || !m["processes"].is_array() ||
      m["processes"].empty()) {
    return absl::InvalidArgumentError("not a unit file");
  }
  TaskUnit unit;
  unit.task_id = m["task_id"].get<std::string>();
  unit.job_id = AsInt(m.value("job_id", json(0))).value_or(0);
  unit.task_index = AsInt(m.value("task_index", json(0))).value_or(0);
  if (m.contains("gpus") && m["gpus"].is_array()) {
    for (const json& g : m["gpus"]) {
      if (std::optional<int64_t> i = AsInt(g); i && *i >= 0 && *i < 64) {
        unit.gpus.push_back(static_cast<int>(*i));
      }
    }
  }
  unit.persisted = true;
  // A service replica's port and probes (task_replica.cc).
  if (m.contains("port")) {
    std::optional<int64_t> port = AsInt(m["port"]);
    if (!port || *port < 1 || *port > 65535) {
      return absl::InvalidArgumentError("a port that is not one");
    }
    unit.port = static_cast<int>(*port);
  }
  if (m.contains("started_at_ms")) {
    std::optional<int64_t> ms = AsInt(m["started_at_ms"]);
    if (!ms) return absl::InvalidArgumentError("a start time that is not one");
    unit.started_at = absl::FromUnixMillis(*ms);
  }
  for (const char* key : {"readiness", "liveness"}) {
    if (!m.contains(key)) continue;
    absl::StatusOr<ProbeSpec> probe = ParseProbeSpec(m[key], key, nullptr);
    if (!probe.ok()) return probe.status();
    if (unit.port == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("a ", key, " probe without a port"));
    }
    (std::string(key) == "readiness" ? unit.readiness : unit.liveness) =
        *std::move(probe);
  }
  for (const json& p : m["processes"]) {
    if (!p.is_object() || !p.contains("launcher_id") ||
        !p["launcher_id"].is_string()) {
      return absl::InvalidArgumentError("a process without a launcher id");
    }
    TaskProcess proc;
    proc.launcher_id = p["launcher_id"].get<std::string>();
    if (p.contains("stdout") && p["stdout"].is_string()) {
      proc.stdout_path = p["stdout"].get<std::string>();
    }
    if (p.contains("stderr") && p["stderr"].is_string()) {
      proc.stderr_path = p["stderr"].get<std::string>();
    }
    unit.procs.push_back(std::move(proc));
  }
  return unit;
}

}  // namespace loom
