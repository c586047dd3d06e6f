#include "loom/agent/task_state.h"

#include <string.h>

#include "absl/strings/str_cat.h"

namespace loom {

using json = nlohmann::json;

std::string SignalText(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  return abbrev != nullptr ? absl::StrCat("SIG", abbrev)
                           : absl::StrCat("signal ", sig);
}

TaskSummary SummarizeTask(const TaskUnit& unit) {
  TaskSummary s;
  const bool several = unit.procs.size() > 1;
  for (const TaskProcess& p : unit.procs) {
    if (!p.ended()) {
      s.state = "running";
      return s;
    }
  }
  // The first failure decides: the one this agent saw first, else (tasks
  // recovered after a restart) the earliest by time, then by process.
  const TaskProcess* first = nullptr;
  size_t first_k = 0;
  if (unit.first_failure &&
      *unit.first_failure < static_cast<int>(unit.procs.size()) &&
      unit.procs[*unit.first_failure].state == TaskProcess::State::kExited) {
    first_k = static_cast<size_t>(*unit.first_failure);
    first = &unit.procs[first_k];
  }
  const bool seen = first != nullptr;
  for (size_t k = 0; k < unit.procs.size() && !seen; ++k) {
    const TaskProcess& p = unit.procs[k];
    if (p.state != TaskProcess::State::kExited || !p.failed()) continue;
    if (first == nullptr || p.ended_at < first->ended_at) {
      first = &p;
      first_k = k;
    }
  }
  if (first != nullptr) {
    s.state = "exited";
    s.signal = first->term_signal;
    s.exit_code =
        first->term_signal != 0 ? 128 + first->term_signal : first->exit_code;
    if (several) {
      s.reason = absl::StrCat(
          "process ", first_k, " ",
          first->term_signal != 0
              ? absl::StrCat("was killed by ", SignalText(first->term_signal))
              : absl::StrCat("exited with code ", first->exit_code));
    } else if (first->term_signal != 0) {
      s.reason = absl::StrCat("killed by ", SignalText(first->term_signal));
    }
    return s;
  }
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const TaskProcess& p = unit.procs[k];
    if (p.state != TaskProcess::State::kLost) continue;
    s.state = "lost";
    s.exit_code = -1;
    s.reason = several ? absl::StrCat("process ", k, ": ", p.reason) : p.reason;
    if (s.reason.empty()) s.reason = "lost";
    return s;
  }
  s.state = "exited";
  return s;
}

json TaskStatusJson(const std::string& node, const TaskUnit& unit,
                    bool detailed) {
  if (unit.pull != nullptr) {
    const ImagePullMeter& m = *unit.pull;
    static constexpr const char* kPhases[] = {"manifest", "layers", "unpacking",
                                              "done"};
    const int phase = m.phase.load();
    json j = {{"task_id", unit.task_id},
              {"state", "pulling"},
              {"pull",
               {{"image", m.image},
                {"phase", m.dataset_filling.load()
                              ? "dataset"
                              : kPhases[phase >= 0 && phase < 4 ? phase : 0]},
                {"bytes_done", m.bytes_done.load()},
                {"bytes_total", m.bytes_total.load()}}}};
    if (detailed) {
      j["node"] = node;
      j["job_id"] = unit.job_id;
      j["task_index"] = unit.task_index;
    }
    return j;
  }
  const TaskSummary s = SummarizeTask(unit);
  json j = {{"task_id", unit.task_id},
            {"state", s.state},
            {"exit_code", s.exit_code},
            {"signal", s.signal},
            {"reason", s.reason}};
  if (unit.refused) j["refused"] = true;
  if (!unit.data_report.is_null()) j["data"] = unit.data_report;
  if (unit.port != 0) {
    const bool running = s.state == "running";
    const bool ready = running && !unit.stopping &&
                       unit.liveness_failure.empty() &&
                       (!unit.readiness || unit.ready);
    j["port"] = unit.port;
    j["ready"] = ready;
    if (running && !ready) {
      std::string why = "stopping";
      if (!unit.stopping && !unit.liveness_failure.empty()) {
        why = unit.liveness_failure;
      } else if (!unit.stopping && !unit.not_ready_reason.empty()) {
        why = unit.not_ready_reason;
      } else if (!unit.stopping && unit.readiness) {
        why = absl::StrCat("readiness probe GET ", unit.readiness->http,
                           " has not passed yet");
      }
      j["ready_reason"] = why;
    }
  }
  if (!unit.liveness_failure.empty() && s.state != "running") {
    j["liveness_failed"] = true;
    j["reason"] = s.reason.empty()
                      ? unit.liveness_failure
                      : absl::StrCat(unit.liveness_failure, "; ", s.reason);
  }
  if (!detailed) return j;
  j["node"] = node;
  j["job_id"] = unit.job_id;
  j["task_index"] = unit.task_index;
  j["stopping"] = unit.stopping && s.state == "running";
  json procs = json::array();
  for (size_t k = 0; k < unit.procs.size(); ++k) {
    const TaskProcess& p = unit.procs[k];
    const char* state = "starting";
    switch (p.state) {
      case TaskProcess::State::kStarting:
        state = "starting";
        break;
      case TaskProcess::State::kRunning:
        state = "running";
        break;
      case TaskProcess::State::kExited:
        state = "exited";
        break;
      case TaskProcess::State::kLost:
        state = "lost";
        break;
    }
    json pj = {{"index", k}, {"state", state}, {"pid", p.pid}};
    if (p.state == TaskProcess::State::kExited) {
      pj["exit_code"] = p.term_signal != 0 ? 128 + p.term_signal : p.exit_code;
      pj["signal"] = p.term_signal;
    }
    if (!p.reason.empty()) pj["reason"] = p.reason;
    procs.push_back(std::move(pj));
  }
  j["processes"] = std::move(procs);
  return j;
}

}  // namespace loom
