#include "loom/server/maintenance.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/common/units.h"
#include "loom/server/job_record.h"

namespace loom {
namespace {

using Phase = MaintenanceNode::Phase;
using State = Maintenance::State;

// A command sent that no report mentions yet is sent again this often.
constexpr absl::Duration kResendAfter = absl::Seconds(10);
constexpr size_t kMaxCommandBytes = 64 * 1024;
constexpr size_t kMaxOutputBytes = 2048;
constexpr int kMaxBatch = 100'000;
constexpr double kMaxTimeoutSeconds = 7 * 24 * 3600.0;

bool InFlightPhase(Phase p) {
  return p == Phase::kDraining || p == Phase::kRunning || p == Phase::kChecking;
}

bool FinishedPhase(Phase p) {
  return p == Phase::kDone || p == Phase::kFailed || p == Phase::kSkipped;
}

std::string Plural(int n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::optional<Phase> PhaseOf(std::string_view name) {
  for (Phase p :
       {Phase::kPending, Phase::kDraining, Phase::kRunning, Phase::kChecking,
        Phase::kDone, Phase::kFailed, Phase::kSkipped}) {
    if (name == PhaseName(p)) return p;
  }
  return std::nullopt;
}

std::optional<State> StateOf(std::string_view name) {
  for (State s : {State::kRunning, State::kPaused, State::kFailed,
                  State::kAborted, State::kDone}) {
    if (name == StateName(s)) return s;
  }
  return std::nullopt;
}

nlohmann::json TimeOrNull(absl::Time t) {
  if (t == absl::InfinitePast()) return nullptr;
  return FormatTimestamp(t);
}

absl::Time TimeOf(const nlohmann::json& j) {
  if (!j.is_string()) return absl::InfinitePast();
  absl::StatusOr<absl::Time> t = ParseTimestamp(j.get<std::string>());
  return t.ok() ? *t : absl::InfinitePast();
}

// The run's ending, once none of its nodes is pending or in flight.
void Finish(Maintenance& m, absl::Time now) {
  std::vector<std::string> failed;
  for (const MaintenanceNode& n : m.nodes) {
    if (n.phase == Phase::kFailed) failed.push_back(n.name);
  }
  if (m.state == State::kRunning) {
    m.state = failed.empty() ? State::kDone : State::kFailed;
  }
  if (m.state == State::kDone) {
    m.reason = absl::StrCat("done: ", Plural(m.nodes.size(), "node", "nodes"),
                            " maintained");
  } else if (m.state == State::kFailed) {
    m.reason = absl::StrCat("ended; failed: ", absl::StrJoin(failed, ", "),
                            " (cordoned)");
  }
  m.ended = now;
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kPending:
      return "pending";
    case Phase::kDraining:
      return "draining";
    case Phase::kRunning:
      return "running";
    case Phase::kChecking:
      return "checking";
    case Phase::kDone:
      return "done";
    case Phase::kFailed:
      return "failed";
    case Phase::kSkipped:
      return "skipped";
  }
  return "pending";
}

const char* StateName(State state) {
  switch (state) {
    case State::kRunning:
      return "running";
    case State::kPaused:
      return "paused";
    case State::kFailed:
      return "failed";
    case State::kAborted:
      return "aborted";
    case State::kDone:
      return "done";
  }
  return "running";
}

int Maintenance::batches_total() const {
  const int k = std::max(1, settings.batch);
  return static_cast<int>((nodes.size() + k - 1) / k);
}

std::string Maintenance::CommandId(const std::string& node) const {
  return absl::StrCat("maint-", id, "-", node);
}

bool Maintenance::InFlight() const {
  for (const MaintenanceNode& n : nodes) {
    if (InFlightPhase(n.phase)) return true;
  }
  return false;
}

bool Maintenance::Active() const {
  if (state == State::kRunning || state == State::kPaused || InFlight()) {
    return true;
  }
  // Stopped by a failure with nodes still to do: resumed or aborted first.
  if (state == State::kFailed) {
    for (const MaintenanceNode& n : nodes) {
      if (n.phase == Phase::kPending) return true;
    }
  }
  return false;
}

std::string MaintenanceDrainReason(const Maintenance& m) {
  return absl::StrCat("maintenance ", m.id, " (", m.author, ")");
}

MaintenanceOps StepMaintenance(Maintenance& m,
                               const std::vector<MaintenanceFacts>& facts,
                               absl::Time now) {
  MaintenanceOps ops;
  const MaintenanceSettings& s = m.settings;
  auto set_phase = [&](MaintenanceNode& n, Phase p, std::string message) {
    n.phase = p;
    n.since = now;
    n.message = std::move(message);
    ops.changed = true;
  };
  auto say = [&](MaintenanceNode& n, std::string message) {
    if (n.message == message) return;
    n.message = std::move(message);
    ops.changed = true;
  };
  auto fail = [&](MaintenanceNode& n, std::string message) {
    set_phase(n, Phase::kFailed, message);
    if (s.stop_on_failure && m.state == State::kRunning) {
      m.state = State::kFailed;
      m.reason = absl::StrCat(
          "stopped: ", n.name, " failed (", message,
          "); `loom maintain resume` goes on without it, `abort` ends the run");
    }
  };

  // Nodes in flight go on whatever the run's state.
  for (size_t i = 0; i < m.nodes.size() && i < facts.size(); ++i) {
    MaintenanceNode& n = m.nodes[i];
    const MaintenanceFacts& f = facts[i];
    if (!f.known && !FinishedPhase(n.phase)) {
      set_phase(n,
                n.phase == Phase::kPending ? Phase::kSkipped : Phase::kFailed,
                "no longer in the cluster");
      continue;
    }
    const std::string id = m.CommandId(n.name);
    const bool reported = f.report_id == id;
    switch (n.phase) {
      case Phase::kDraining:
        if (f.jobs > 0) {
          const std::string jobs = Plural(f.jobs, "job", "jobs");
          if (now - n.since >= s.drain_timeout) {
            ops.evict.push_back(n.name);
            say(n, absl::StrCat("moving ", jobs,
                                " off (checkpoint signal, then queued again)"));
          } else {
            // Fixed text, no countdown: the run is written to the store
            // whenever a message changes.
            say(n, absl::StrCat("waiting for ", jobs, " to end (drain timeout ",
                                FormatDurationShort(s.drain_timeout),
                                ", then they are moved)"));
          }
        } else if (!f.up) {
          say(n, "drained; the node is not heard from, waiting for it");
        } else {
          set_phase(n, Phase::kRunning, "command sent");
          n.sent = now;
          ops.send.push_back(n.name);
        }
        break;
      case Phase::kRunning:
        if (reported && f.report_state == "exited") {
          const int code = f.report_exit_code.value_or(-1);
          n.exit_code = f.report_exit_code;
          if (code == 0) {
            set_phase(n, Phase::kChecking,
                      "command done; waiting for the node to be back, "
                      "healthy and on its pool's stack");
          } else {
            n.output = f.report_output.substr(
                f.report_output.size() > kMaxOutputBytes
                    ? f.report_output.size() - kMaxOutputBytes
                    : 0);
            fail(n, absl::StrCat("command exited ", code));
          }
        } else if (reported && f.report_state == "lost") {
          set_phase(n, Phase::kChecking,
                    "the command's end was not seen (the agent restarted "
                    "while it ran); checking the node");
        } else if (reported && f.report_state == "running") {
          say(n, "command running");
        } else if (!f.up) {
          say(n, "command sent; the node is not heard from");
        } else if (now - n.sent >= kResendAfter) {
          n.sent = now;
          ops.send.push_back(n.name);
          ops.changed = true;
        }
        break;
      case Phase::kChecking: {
        const std::string why = !f.up ? "not heard from" : f.not_ready;
        if (why.empty()) {
          set_phase(n, Phase::kDone, "back in service");
          ops.restore.push_back(n.name);
        } else if (now - n.since >= s.ready_timeout) {
          fail(n,
               absl::StrCat("not ready ", FormatDurationShort(s.ready_timeout),
                            " after the command: ", why));
        } else {
          say(n, absl::StrCat("waiting: ", why));
        }
        break;
      }
      default:
        break;
    }
  }

  if (m.state == State::kRunning) {
    auto batch_open = [&] {
      for (const MaintenanceNode& n : m.nodes) {
        if (n.batch == m.batch_current && !FinishedPhase(n.phase)) return true;
      }
      return false;
    };
    if (m.batch_current == 0 || !batch_open()) {
      std::vector<size_t> next;
      for (size_t i = 0; i < m.nodes.size(); ++i) {
        if (m.nodes[i].batch == 0 && m.nodes[i].phase == Phase::kPending) {
          next.push_back(i);
        }
      }
      if (next.empty()) {
        Finish(m, now);
        ops.changed = true;
        m.updated = now;
        return ops;
      }
      // The emptiest nodes first: work moves as little as it can.
      std::stable_sort(next.begin(), next.end(), [&](size_t a, size_t b) {
        return facts[a].gpus_allocated < facts[b].gpus_allocated;
      });
      next.resize(std::min<size_t>(next.size(), s.batch));
      ++m.batch_current;
      std::vector<std::string> names;
      for (size_t i : next) {
        m.nodes[i].batch = m.batch_current;
        names.push_back(m.nodes[i].name);
      }
      m.reason =
          absl::StrCat("batch ", m.batch_current, " of ", m.batches_total(),
                       ": ", absl::StrJoin(names, ", "));
      ops.changed = true;
    }
    int out = 0;
    for (size_t i = 0; i < m.nodes.size(); ++i) {
      const Phase p = m.nodes[i].phase;
      if (InFlightPhase(p) || p == Phase::kFailed ||
          (i < facts.size() && facts[i].unavailable)) {
        ++out;
      }
    }
    for (size_t i = 0; i < m.nodes.size() && i < facts.size(); ++i) {
      MaintenanceNode& n = m.nodes[i];
      const MaintenanceFacts& f = facts[i];
      if (n.batch != m.batch_current || n.phase != Phase::kPending) continue;
      if (out >= s.max_unavailable) {
        say(n, absl::StrCat("waiting: ", Plural(out, "node", "nodes"),
                            " of the set out of service (max-unavailable ",
                            s.max_unavailable, ")"));
        continue;
      }
      // Drained by this run already, before a crash lost the run's record
      // of it: it was in service.
      const bool ours =
          f.draining && f.mode_reason == MaintenanceDrainReason(m);
      n.was_cordoned = f.cordoned;
      n.was_draining = f.draining && !ours;
      n.was_reason = ours ? "" : f.mode_reason;
      set_phase(n, Phase::kDraining, "cordoned");
      ops.cordon.push_back(n.name);
      if (!f.unavailable) ++out;
    }
  }
  if (m.state != State::kRunning && m.state != State::kPaused &&
      !m.ended.has_value() && !m.InFlight()) {
    m.ended = now;
    ops.changed = true;
  }
  if (ops.changed) m.updated = now;
  return ops;
}

absl::Status PauseMaintenance(Maintenance& m, const std::string& who,
                              absl::Time now) {
  if (m.state != State::kRunning) {
    return absl::FailedPreconditionError(absl::StrCat(
        "maintenance ", m.id, " is ", StateName(m.state), ", not running"));
  }
  m.state = State::kPaused;
  m.reason = absl::StrCat("paused by ", who,
                          "; nodes under way finish, no new one starts");
  m.updated = now;
  return absl::OkStatus();
}

absl::Status ResumeMaintenance(Maintenance& m, const std::string& who,
                               absl::Time now) {
  if (m.state != State::kPaused && !(m.state == State::kFailed && m.Active())) {
    return absl::FailedPreconditionError(absl::StrCat(
        "maintenance ", m.id, " is ", StateName(m.state),
        m.state == State::kFailed ? " with no node left to do" : "",
        "; only a paused or stopped one resumes"));
  }
  m.state = State::kRunning;
  m.reason = absl::StrCat("resumed by ", who);
  m.ended.reset();
  m.updated = now;
  return absl::OkStatus();
}

absl::Status AbortMaintenance(Maintenance& m, const std::string& who,
                              absl::Time now,
                              std::vector<std::string>* restore) {
  if (m.state == State::kDone || m.state == State::kAborted || !m.Active()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "maintenance ", m.id, " has ended (", StateName(m.state), ")"));
  }
  m.state = State::kAborted;
  m.reason = absl::StrCat("aborted by ", who);
  for (MaintenanceNode& n : m.nodes) {
    if (n.phase == Phase::kPending || n.phase == Phase::kDraining) {
      if (n.phase == Phase::kDraining) restore->push_back(n.name);
      n.phase = Phase::kSkipped;
      n.since = now;
      n.message = absl::StrCat("aborted by ", who);
    }
  }
  if (m.InFlight()) {
    m.reason += "; nodes whose command was sent are followed to their end";
  } else {
    m.ended = now;
  }
  m.updated = now;
  return absl::OkStatus();
}

nlohmann::json MaintenanceJson(const Maintenance& m, bool with_nodes) {
  const MaintenanceSettings& s = m.settings;
  nlohmann::json counts = {{"pending", 0},
                           {"in_progress", 0},
                           {"done", 0},
                           {"failed", 0},
                           {"skipped", 0}};
  for (const MaintenanceNode& n : m.nodes) {
    const char* key = n.phase == Phase::kPending   ? "pending"
                      : n.phase == Phase::kSkipped ? "skipped"
                      : InFlightPhase(n.phase)     ? "in_progress"
                      : n.phase == Phase::kDone    ? "done"
                                                   : "failed";
    counts[key] = counts[key].get<int>() + 1;
  }
  nlohmann::json j = {
      {"id", m.id},
      {"state", StateName(m.state)},
      {"reason", m.reason},
      {"author", m.author},
      {"created", TimeOrNull(m.created)},
      {"updated", TimeOrNull(m.updated)},
      {"ended", m.ended ? TimeOrNull(*m.ended) : nlohmann::json(nullptr)},
      {"command", s.command},
      {"pool", s.pool},
      {"batch", s.batch},
      {"max_unavailable", s.max_unavailable},
      {"drain_timeout_s", absl::ToDoubleSeconds(s.drain_timeout)},
      {"ready_timeout_s", absl::ToDoubleSeconds(s.ready_timeout)},
      {"on_failure", s.stop_on_failure ? "stop" : "continue"},
      {"batches_total", m.batches_total()},
      {"batch_current", m.batch_current},
      {"counts", std::move(counts)}};
  if (with_nodes) {
    nlohmann::json nodes = nlohmann::json::array();
    for (const MaintenanceNode& n : m.nodes) {
      nodes.push_back({{"name", n.name},
                       {"batch", n.batch},
                       {"phase", PhaseName(n.phase)},
                       {"since", TimeOrNull(n.since)},
                       {"exit_code", n.exit_code ? nlohmann::json(*n.exit_code)
                                                 : nlohmann::json()},
                       {"message", n.message},
                       {"output", n.output}});
    }
    j["node_status"] = std::move(nodes);
  }
  return j;
}

std::string MaintenanceRecord(const Maintenance& m) {
  nlohmann::json j = MaintenanceJson(m);
  j["nodes"] = m.settings.nodes;
  nlohmann::json internal = nlohmann::json::array();
  for (const MaintenanceNode& n : m.nodes) {
    internal.push_back({{"was_cordoned", n.was_cordoned},
                        {"was_draining", n.was_draining},
                        {"was_reason", n.was_reason},
                        {"sent", TimeOrNull(n.sent)}});
  }
  j["node_modes"] = std::move(internal);
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

absl::StatusOr<Maintenance> ReadMaintenanceRecord(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  auto bad = [](std::string what) {
    return absl::DataLossError(
        absl::StrCat("maintenance record unreadable: ", what));
  };
  if (!j.is_object()) return bad("not a JSON object");
  Maintenance m;
  try {
    m.id = j.at("id").get<int64_t>();
    std::optional<State> state = StateOf(j.at("state").get<std::string>());
    if (!state) return bad("unknown state");
    m.state = *state;
    m.reason = j.value("reason", "");
    m.author = j.value("author", "");
    m.created = TimeOf(j.value("created", nlohmann::json()));
    m.updated = TimeOf(j.value("updated", nlohmann::json()));
    if (j.contains("ended") && j["ended"].is_string())
      m.ended = TimeOf(j["ended"]);
    MaintenanceSettings& s = m.settings;
    s.command = j.at("command").get<std::string>();
    s.pool = j.value("pool", "");
    s.nodes = j.at("nodes").get<std::vector<std::string>>();
    s.batch = std::max(1, j.at("batch").get<int>());
    s.max_unavailable = std::max(1, j.at("max_unavailable").get<int>());
    s.drain_timeout = absl::Seconds(j.at("drain_timeout_s").get<double>());
    s.ready_timeout = absl::Seconds(j.at("ready_timeout_s").get<double>());
    s.stop_on_failure = j.at("on_failure").get<std::string>() != "continue";
    m.batch_current = j.at("batch_current").get<int>();
    const nlohmann::json& nodes = j.at("node_status");
    const nlohmann::json& modes = j.at("node_modes");
    if (!nodes.is_array() || !modes.is_array() ||
        nodes.size() != modes.size()) {
      return bad("node_status and node_modes differ");
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      const nlohmann::json& a = nodes[i];
      const nlohmann::json& b = modes[i];
      MaintenanceNode n;
      n.name = a.at("name").get<std::string>();
      n.batch = a.at("batch").get<int>();
      std::optional<Phase> phase = PhaseOf(a.at("phase").get<std::string>());
      if (!phase) return bad(absl::StrCat("node ", n.name, ": unknown phase"));
      n.phase = *phase;
      n.since = TimeOf(a.value("since", nlohmann::json()));
      if (a.contains("exit_code") && a["exit_code"].is_number_integer()) {
        n.exit_code = a["exit_code"].get<int>();
      }
      n.message = a.value("message", "");
      n.output = a.value("output", "");
      n.was_cordoned = b.value("was_cordoned", false);
      n.was_draining = b.value("was_draining", false);
      n.was_reason = b.value("was_reason", "");
      n.sent = TimeOf(b.value("sent", nlohmann::json()));
      m.nodes.push_back(std::move(n));
    }
  } catch (const nlohmann::json::exception& e) {
    return bad(e.what());
  }
  return m;
}

absl::StatusOr<MaintenanceSettings> ParseMaintenanceRequest(
    const nlohmann::json& body,
    const std::vector<std::pair<std::string, std::vector<std::string>>>&
        pool_nodes,
    const std::vector<std::string>& all_nodes) {
  auto bad = [](std::string what) {
    return absl::InvalidArgumentError(std::move(what));
  };
  if (!body.is_object()) return bad("the body must be a JSON object");
  static const std::set<std::string> kFields = {"pool",
                                                "nodes",
                                                "command",
                                                "batch",
                                                "max_unavailable",
                                                "drain_timeout_s",
                                                "ready_timeout_s",
                                                "on_failure"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (!kFields.count(it.key())) {
      return bad(absl::StrCat(it.key(), ": unknown field (known: ",
                              absl::StrJoin(kFields, ", "), ")"));
    }
  }
  MaintenanceSettings s;
  const bool has_pool = body.contains("pool") && !body["pool"].is_null();
  const bool has_nodes = body.contains("nodes") && !body["nodes"].is_null();
  if (has_pool == has_nodes) {
    return bad(
        "pool, nodes: give exactly one (a pool's name, or a list of "
        "node names)");
  }
  if (has_pool) {
    if (!body["pool"].is_string()) return bad("pool: must be a pool's name");
    s.pool = body["pool"].get<std::string>();
    for (const auto& [name, nodes] : pool_nodes) {
      if (name == s.pool) s.nodes = nodes;
    }
    if (s.nodes.empty()) {
      std::vector<std::string> names;
      for (const auto& p : pool_nodes) names.push_back(p.first);
      return bad(absl::StrCat(
          "pool: no pool '", s.pool,
          "' with nodes (pools: ", absl::StrJoin(names, ", "), ")"));
    }
  } else {
    const nlohmann::json& nodes = body["nodes"];
    if (!nodes.is_array() || nodes.empty()) {
      return bad("nodes: must be a non-empty list of node names");
    }
    std::set<std::string> seen;
    for (const nlohmann::json& n : nodes) {
      if (!n.is_string()) return bad("nodes: must be a list of node names");
      const std::string name = n.get<std::string>();
      if (std::find(all_nodes.begin(), all_nodes.end(), name) ==
          all_nodes.end()) {
        return bad(absl::StrCat("nodes: no node '", name, "'"));
      }
      if (!seen.insert(name).second) {
        return bad(absl::StrCat("nodes: '", name, "' is named twice"));
      }
      s.nodes.push_back(name);
    }
  }
  auto command = body.find("command");
  if (command == body.end() || !command->is_string() ||
      command->get_ref<const std::string&>().empty() ||
      command->get_ref<const std::string&>().size() > kMaxCommandBytes) {
    return bad(
        "command: required, the shell command to run on each node "
        "(at most 64 KiB)");
  }
  s.command = command->get<std::string>();
  auto batch = body.find("batch");
  if (batch == body.end() || !batch->is_number_integer() ||
      batch->get<int64_t>() < 1 || batch->get<int64_t>() > kMaxBatch) {
    return bad("batch: required, the number of nodes at a time (1 or more)");
  }
  s.batch = static_cast<int>(batch->get<int64_t>());
  s.max_unavailable = s.batch;
  if (auto it = body.find("max_unavailable");
      it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        it->get<int64_t>() > kMaxBatch) {
      return bad("max_unavailable: must be a number of nodes, 1 or more");
    }
    s.max_unavailable = static_cast<int>(it->get<int64_t>());
  }
  for (const auto& [field, out, positive] :
       {std::tuple{"drain_timeout_s", &s.drain_timeout, false},
        std::tuple{"ready_timeout_s", &s.ready_timeout, true}}) {
    auto it = body.find(field);
    if (it == body.end() || it->is_null()) continue;
    const double v = it->is_number() ? it->get<double>() : -1;
    if (!it->is_number() || !std::isfinite(v) || v < 0 ||
        (positive && v == 0) || v > kMaxTimeoutSeconds) {
      return bad(absl::StrCat(field, ": must be a number of seconds, ",
                              positive ? "more than 0" : "0 or more",
                              ", at most 7 days"));
    }
    *out = absl::Seconds(v);
  }
  if (auto it = body.find("on_failure"); it != body.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "stop" && *it != "continue")) {
      return bad("on_failure: must be \"stop\" or \"continue\"");
    }
    s.stop_on_failure = *it == "stop";
  }
  return s;
}

}  // namespace loom
