// The task runner's part for service replicas (docs/agent.md, "Service
// replicas"): a task launched with `port: true` holds a port of the
// runner's pool while it runs; its readiness and liveness probes run on the
// prober's threads (probe_runner.h), whose results come back here, under
// the node's lock like every other change of the task table. A liveness
// failure stops the task the way any stop does; restarting it is the
// server's business.

#include <utility>

#include "absl/strings/str_cat.h"
#include "loom/agent/json_values.h"
#include "loom/agent/task_runner.h"

namespace loom {
namespace {

std::string ProbeFailedTimes(int n) {
  return n == 1 ? "once" : absl::StrCat(n, " times");
}

}  // namespace

absl::Status TaskRunner::AllocatePortLocked(AgentNode& node, TaskUnit& unit,
                                            LaunchContext& ctx) {
  absl::StatusOr<int> port =
      ports_.Allocate(PortOwner(node.name, unit.task_id));
  if (!port.ok()) {
    absl::Status failure = absl::UnavailableError(
        absl::StrCat("task ", unit.task_id, " on node ", node.name, ": ",
                     Str(port.status().message())));
    log_("warn", node.name,
         absl::StrCat("launch of task ", unit.task_id,
                      " failed: ", Str(failure.message())));
    return failure;
  }
  unit.port = *port;
  ctx.port = *port;
  ctx.port_host = ports_.host();
  return absl::OkStatus();
}

void TaskRunner::StartReplicaLocked(AgentNode& node, TaskUnit& unit) {
  if (unit.port == 0 || unit.probe_key != 0) return;
  unit.not_ready_reason.clear();
  // Fake tasks answer no probe: they count as ready while they "run".
  unit.ready = !options_.run_probes;
  if (!options_.run_probes || (!unit.readiness && !unit.liveness)) return;
  ProbeTarget target;
  target.host = ports_.host();
  target.port = unit.port;
  target.readiness = unit.readiness;
  target.liveness = unit.liveness;
  target.started = unit.started_at;
  unit.probe_key =
      probes_.Add(std::move(target),
                  [this, &node, id = unit.task_id](const ProbeReport& report) {
                    OnProbeReport(node, id, report);
                  });
}

void TaskRunner::RecoverReplicaLocked(AgentNode& node, TaskUnit& unit) {
  if (unit.port == 0 || SummarizeTask(unit).state != "running") return;
  if (!ports_.Hold(unit.port, PortOwner(node.name, unit.task_id))) {
    log_("warn", node.name,
         absl::StrCat("task ", unit.task_id, ": its port ", unit.port,
                      " is recorded for ", ports_.Holder(unit.port),
                      " too; it stays with that task"));
  }
  StartReplicaLocked(node, unit);
}

void TaskRunner::EndReplicaLocked(AgentNode& node, TaskUnit& unit) {
  if (unit.port != 0) {
    ports_.Release(unit.port, PortOwner(node.name, unit.task_id));
  }
  if (unit.probe_key != 0) {
    probes_.Remove(unit.probe_key);
    unit.probe_key = 0;
  }
}

void TaskRunner::OnProbeReport(AgentNode& node, const std::string& task_id,
                               const ProbeReport& report) {
  bool tell = false;
  {
    absl::MutexLock lock(&node.mu);
    auto it = node.units.find(task_id);
    // A report of probes removed since (the task ended, or was forgotten).
    if (it == node.units.end() || it->second.probe_key != report.key) return;
    TaskUnit& unit = it->second;
    if (unit.stopping || SummarizeTask(unit).state != "running") return;
    if (report.kind == ProbeReport::Kind::kReadiness) {
      const bool was_ready = unit.ready;
      unit.ready = report.ready;
      unit.not_ready_reason =
          report.ready ? ""
                       : absl::StrCat("readiness probe failed ",
                                      ProbeFailedTimes(report.failures), ": ",
                                      report.message);
      if (was_ready != report.ready) {
        log_("info", node.name,
             report.ready
                 ? absl::StrCat("task ", task_id, " is ready (GET ",
                                unit.readiness->http, " on port ", unit.port,
                                " passed)")
                 : absl::StrCat("task ", task_id,
                                " is not ready: ", unit.not_ready_reason));
        tell = true;
      }
    } else if (report.failed) {
      unit.probe_key = 0;  // the prober has dropped its probes
      unit.liveness_failure =
          absl::StrCat("liveness probe failed ",
                       ProbeFailedTimes(report.failures), ": ", report.message);
      log_("warn", node.name,
           absl::StrCat("task ", task_id, ": ", unit.liveness_failure,
                        "; stopping it (", SignalText(options_.stop_signal),
                        ", then SIGKILL after ",
                        absl::FormatDuration(options_.stop_grace), ")"));
      StopLocked(node, unit, options_.stop_signal, options_.stop_grace);
      tell = true;
    }
  }
  if (tell) Report(node);
}

}  // namespace loom
