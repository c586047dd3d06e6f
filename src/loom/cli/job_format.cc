#include "loom/cli/job_format.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/run_spec.h"
#include "loom/common/hostlist.h"
#include "loom/common/units.h"
#include "loom/core/job_spec.h"

namespace loom {
namespace {

using cli::Cell;
using cli::Field;
using cli::FormatUtc;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Str;
using cli::TimeField;

// "2026-11-29 19:40:00 UTC (3m ago)", or "-".
std::string TimeAndAgo(const Json& j, const char* key, absl::Time now) {
  std::optional<absl::Time> t = TimeField(j, key);
  if (!t.has_value()) return Str(j, key).empty() ? "-" : Str(j, key);
  return absl::StrCat(FormatUtc(*t), " (", FormatAgo(*t, now), ")");
}

// "0-7", "0,2-3".
std::string FormatIndexList(const Json& list) {
  std::vector<int64_t> v;
  if (list.is_array()) {
    for (const Json& x : list) {
      if (x.is_number_integer()) v.push_back(x.get<int64_t>());
    }
  }
  if (v.empty()) return "-";
  std::sort(v.begin(), v.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1) ++j;
    parts.push_back(j == i ? absl::StrCat(v[i])
                           : absl::StrCat(v[i], "-", v[j]));
    i = j + 1;
  }
  return absl::StrJoin(parts, ",");
}

// Quotes a word for a shell when it needs it.
std::string ShellQuote(const std::string& w) {
  if (!w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
        return absl::ascii_isalnum(static_cast<unsigned char>(c)) ||
               std::strchr("-_./=:,+@%", c) != nullptr;
      })) {
    return w;
  }
  std::string q = "'";
  for (char c : w) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

std::string JoinCommand(const Json& command) {
  if (command.is_string()) return command.get<std::string>();
  if (!command.is_array()) return "-";
  std::vector<std::string> words;
  for (const Json& w : command) {
    words.push_back(
        ShellQuote(w.is_string() ? w.get<std::string>() : w.dump()));
  }
  return words.empty() ? "-" : absl::StrJoin(words, " ");
}

// The JOBID cell: an element as Slurm writes it ("12_7"), an array by its
// pending indices ("12_[40-999%10]").
std::string JobIdCell(const Json& job) {
  if (std::string d = Str(job, "display_id"); !d.empty()) return d;
  if (const Json* a = Field(job, "array"); a != nullptr && a->is_object()) {
    const std::string pending = Str(*a, "pending");
    if (pending.empty()) return Cell(job, "id");
    std::optional<int64_t> max = Int(*a, "max_running");
    return absl::StrCat(Cell(job, "id"), "_[", pending,
                        max && *max > 0 ? absl::StrCat("%", *max) : "", "]");
  }
  return Cell(job, "id");
}

}  // namespace

std::string FormatJobTable(const nlohmann::json& jobs, bool wide,
                           absl::Time now) {
  std::vector<std::string> header = {"JOBID", "NAME", "USER",  "PROJECT",
                                     "STATE", "GPUS", "NODES", "TIME"};
  if (wide) {
    header.insert(header.end(), {"PRIORITY", "GPU_MODEL", "SUBMIT"});
  }
  header.push_back("REASON");
  std::vector<std::vector<std::string>> rows;
  for (const Json& job : Items(jobs, "jobs")) {
    std::optional<int64_t> gpus = Int(job, "gpus");
    if (!gpus.has_value()) {
      std::optional<int64_t> tasks = Int(job, "tasks");
      std::optional<int64_t> per = Int(job, "gpus_per_task");
      if (tasks && per) gpus = *tasks * *per;
    }
    std::optional<int64_t> nodes;
    if (const Json* p = Field(job, "placement"); p != nullptr) {
      nodes = Int(*p, "nodes");
    }
    if (!nodes.has_value()) nodes = Int(job, "tasks");
    std::string time = "-";
    if (std::optional<absl::Time> start = TimeField(job, "start_time")) {
      const absl::Time end = TimeField(job, "end_time").value_or(now);
      time = FormatElapsed(end - *start);
    }
    std::vector<std::string> row = {JobIdCell(job),     Cell(job, "name"),
                                    Cell(job, "user"),  Cell(job, "project"),
                                    Cell(job, "state"), Cell(gpus),
                                    Cell(nodes),        time};
    if (wide) {
      std::optional<absl::Time> submit = TimeField(job, "submit_time");
      row.insert(row.end(), {Cell(job, "priority"), Cell(job, "gpu_model"),
                             submit ? FormatAgo(*submit, now) : "-"});
    }
    row.push_back(Cell(job, "reason"));
    rows.push_back(std::move(row));
  }
  return FormatTable(header, rows);
}

std::string DescribeSwitchSpan(const nlohmann::json& placement) {
  std::optional<int64_t> level = Int(placement, "switch_level");
  if (!level.has_value()) return "";
  const std::string name = Str(placement, "switch");
  if (*level <= 0) {
    std::string node = name;
    if (node.empty()) {
      const Json& tasks = Items(placement, "tasks");
      if (!tasks.empty()) node = Str(tasks[0], "node");
    }
    return node.empty() ? "one node" : absl::StrCat("one node (", node, ")");
  }
  static const char* const kLevelNames[] = {"node", "leaf", "spine", "core"};
  std::string s = absl::StrCat("one ",
                               *level < 4 ? std::string(kLevelNames[*level])
                                          : absl::StrCat("level-", *level),
                               " switch");
  if (!name.empty()) absl::StrAppend(&s, " (", name, ")");
  if (std::optional<int64_t> leaves = Int(placement, "leaves");
      *level >= 2 && leaves && *leaves > 1) {
    absl::StrAppend(&s, ", ", *leaves, " leaves");
  }
  return s;
}

std::string FormatJobDetails(const nlohmann::json& job, absl::Time now) {
  std::vector<std::pair<std::string, std::string>> lines;
  auto add = [&](std::string label, std::string value) {
    lines.emplace_back(std::move(label), std::move(value));
  };
  const std::string state = Str(job, "state");
  std::string title = Cell(job, "id");
  if (std::string d = Str(job, "display_id"); !d.empty()) {
    absl::StrAppend(&title, " = ", d);
  }
  if (!Str(job, "name").empty())
    absl::StrAppend(&title, " (", Str(job, "name"), ")");
  add("Job", title);
  if (const Json* a = Field(job, "array"); a != nullptr && a->is_object()) {
    std::optional<int64_t> max = Int(*a, "max_running");
    add("Array",
        absl::StrCat(
            Str(*a, "indices"), max && *max > 0 ? absl::StrCat("%", *max) : "",
            " (", Cell(*a, "elements"),
            " elements): ", Cell(*a, "pending_count"), " pending, ",
            Cell(*a, "active"), " running, ", Cell(*a, "held"), " held, ",
            Cell(*a, "succeeded"), " succeeded, ", Cell(*a, "failed"),
            " failed, ", Cell(*a, "cancelled"), " cancelled"));
    if (!Str(*a, "pending").empty()) add("Pending indices", Str(*a, "pending"));
  }
  add("State", state.empty() ? "-" : state);
  if (!Str(job, "reason").empty()) {
    add(state == "pending" || state == "held" ? "Pending reason" : "Reason",
        Str(job, "reason"));
  }
  if (!Str(job, "dependency").empty()) {
    add("Dependency", Str(job, "dependency"));
  }
  add("User", Cell(job, "user"));
  add("Project", Cell(job, "project"));
  std::string kind = Cell(job, "kind");
  if (!Str(job, "priority").empty()) {
    absl::StrAppend(&kind, ", priority ", Str(job, "priority"));
  }
  if (const Json* p = Field(job, "preemptible");
      p != nullptr && p->is_boolean()) {
    absl::StrAppend(&kind,
                    p->get<bool>() ? ", preemptible" : ", not preemptible");
  }
  add("Kind", kind);
  std::optional<int64_t> gpus = Int(job, "gpus");
  std::optional<int64_t> tasks = Int(job, "tasks");
  std::optional<int64_t> per = Int(job, "gpus_per_task");
  if (!gpus && tasks && per) gpus = *tasks * *per;
  std::string gpu_line =
      absl::StrCat(Cell(gpus), " x ", Cell(job, "gpu_model"));
  if (tasks && per) {
    absl::StrAppend(&gpu_line, " (", *tasks, " task", *tasks == 1 ? "" : "s",
                    " x ", *per, " GPU", *per == 1 ? "" : "s", ")");
  }
  add("GPUs", gpu_line);
  std::vector<std::vector<std::string>> task_rows;
  if (const Json* p = Field(job, "placement"); p != nullptr) {
    const std::string span = DescribeSwitchSpan(*p);
    std::optional<int64_t> nodes = Int(*p, "nodes");
    std::string where = span;
    if (nodes) {
      absl::StrAppend(&where, where.empty() ? "" : ", ", *nodes, " node",
                      *nodes == 1 ? "" : "s");
    }
    if (!where.empty()) add("Placement", where);
    for (const Json& t : Items(*p, "tasks")) {
      std::string gpus = Field(t, "gpus") ? FormatIndexList(t["gpus"]) : "-";
      // A task on part of a GPU: its MIG instance or its share.
      if (const Json* slice = Field(t, "slice"); slice != nullptr) {
        if (const Json* mig = Field(*slice, "mig");
            mig != nullptr && mig->is_string()) {
          absl::StrAppend(&gpus, " (MIG ", mig->get<std::string>(), "@",
                          Cell(*slice, "start"), ")");
        } else if (std::optional<int64_t> b = Int(*slice, "share_bytes")) {
          absl::StrAppend(&gpus, " (shared, ", FormatBytes(*b), ")");
        }
      }
      task_rows.push_back({Cell(t, "index"), Cell(t, "node"),
                           Cell(t, "address"), gpus, Cell(t, "state"),
                           Cell(t, "exit_code")});
    }
  }
  if (const Json* spec = Field(job, "spec"); spec != nullptr) {
    if (const Json* r = Field(*spec, "resources"); r != nullptr) {
      if (std::optional<int64_t> procs = Int(*r, "processes_per_task")) {
        add("Processes", absl::StrCat(*procs, " per task"));
      }
    }
    if (const Json* c = Field(*spec, "command"); c != nullptr) {
      add("Command", JoinCommand(*c));
    }
    if (const Json* c = Field(*spec, "container");
        c != nullptr && c->is_object()) {
      add("Image", Str(*c, "image"));
      add("Digest", Str(*c, "image_digest").empty()
                        ? std::string("- (not resolved)")
                        : Str(*c, "image_digest"));
      std::vector<std::string> mounts;
      for (const Json& m : Items(*c, "mounts")) {
        if (m.is_string()) mounts.push_back(m.get<std::string>());
      }
      if (!mounts.empty()) add("Mounts", absl::StrJoin(mounts, ", "));
    }
    if (!Str(*spec, "time_limit").empty())
      add("Time limit", Str(*spec, "time_limit"));
  }

  add("Submitted", TimeAndAgo(job, "submit_time", now));
  if (Field(job, "start_time") != nullptr) {
    std::string started = TimeAndAgo(job, "start_time", now);
    if (std::optional<absl::Time> start = TimeField(job, "start_time")) {
      const absl::Time end = TimeField(job, "end_time").value_or(now);
      absl::StrAppend(&started, ", ran ", FormatElapsed(end - *start));
    }
    add("Started", started);
  }
  if (Field(job, "end_time") != nullptr)
    add("Ended", TimeAndAgo(job, "end_time", now));
  if (Field(job, "exit_code") != nullptr || IsFinalJobState(state)) {
    std::string code = Cell(job, "exit_code");
    if (std::optional<int64_t> sig = Int(job, "signal"); sig && *sig > 0) {
      code = absl::StrCat(code == "-" ? "" : code + ", ", "killed by ",
                          SignalName(static_cast<int>(*sig)));
    }
    add("Exit code", code);
  }
  // Which kind each new run was: a restart after the job's own failure
  // (its restart policy) or a requeue (preempted, moved off a node, or its
  // node lost: not its fault).
  std::string restarts = Cell(job, "restart_count");
  const std::optional<int64_t> requeues = Int(job, "requeues");
  const std::optional<int64_t> used = Int(job, "restarts_used");
  if (requeues.value_or(0) > 0 || used.value_or(0) > 0) {
    absl::StrAppend(&restarts, " (", used.value_or(0),
                    " after its own failures, ", requeues.value_or(0),
                    " requeued: preempted, moved or its node lost)");
  }
  add("Restarts", restarts);
  // Earlier runs whose logs can still be read.
  if (const Json* past = Field(job, "past_runs");
      past != nullptr && past->is_array() && !past->empty()) {
    std::vector<std::string> runs;
    for (const Json& r : *past) {
      std::vector<std::string> nodes;
      if (const Json* n = Field(r, "nodes"); n != nullptr && n->is_array()) {
        for (const Json& name : *n) {
          if (name.is_string()) nodes.push_back(name.get<std::string>());
        }
      }
      runs.push_back(absl::StrCat(
          Cell(r, "run"), " on ",
          nodes.empty() ? std::string("-") : CompressHostlist(nodes)));
    }
    add("Past runs", absl::StrCat(absl::StrJoin(runs, "; "), " (loom logs ",
                                  Cell(job, "id"), " --run N)"));
  }
  if (std::optional<int64_t> by = Int(job, "preempted_by")) {
    add("Preempted by", absl::StrCat("job ", *by));
  }
  if (const Json* c = Field(job, "checkpoint");
      c != nullptr && c->is_object()) {
    std::string line = TimeAndAgo(*c, "time", now);
    if (std::optional<int64_t> step = Int(*c, "step")) {
      absl::StrAppend(&line, ", step ", *step);
    }
    if (std::optional<int64_t> run = Int(*c, "run")) {
      absl::StrAppend(&line, ", run ", *run);
    }
    add("Checkpoint", line);
  }
  // Goodput (docs/accounting.md "Goodput"): once it has used a GPU.
  if (const Json* g = Field(job, "goodput"); g != nullptr && g->is_object()) {
    const std::optional<double> ratio = Num(*g, "ratio");
    const double lost = Num(*g, "lost_gpu_seconds").value_or(0);
    if (ratio) {
      add("Goodput",
          absl::StrFormat("%.1f%% (%.2f of %.2f GPU-hours lost after the last "
                          "checkpoint of a run)",
                          100 * *ratio, lost / 3600,
                          Num(*g, "gpu_seconds").value_or(0) / 3600));
    }
  }
  // Hot spares held for it (docs/scheduling.md "Hot spares").
  if (const Json* spares = Field(job, "spare_nodes");
      spares != nullptr && spares->is_array()) {
    std::vector<std::string> names;
    for (const Json& n : *spares) {
      if (n.is_string()) names.push_back(n.get<std::string>());
    }
    const Json* spec = Field(job, "spec");
    const std::optional<int64_t> asked =
        spec != nullptr ? Int(*spec, "spares") : std::nullopt;
    add("Hot spares",
        absl::StrCat(
            names.empty() ? "none" : absl::StrJoin(names, ", "),
            asked ? absl::StrCat(" (", names.size(), " of ", *asked, " asked)")
                  : ""));
  }
  // The last recovery, phase by phase (docs/fault-tolerance.md).
  if (const Json* r = Field(job, "recovery"); r != nullptr && r->is_object()) {
    std::string line;
    if (const Json* phases = Field(*r, "phases");
        phases != nullptr && phases->is_object()) {
      for (const char* phase : {"detection", "gang_stop", "placement", "launch",
                                "first_progress"}) {
        const Json* v = Field(*phases, phase);
        std::string name = phase;
        std::replace(name.begin(), name.end(), '_', ' ');
        absl::StrAppend(&line, line.empty() ? "" : ", ", name, " ",
                        v != nullptr && v->is_number()
                            ? absl::StrFormat("%.1fs", v->get<double>())
                            : std::string("-"));
      }
    }
    if (const Json* total = Field(*r, "total_s");
        total != nullptr && total->is_number()) {
      absl::StrAppend(&line,
                      absl::StrFormat("; %.1fs in all", total->get<double>()));
    }
    add("Recovery", line);
    add("Recovered from", Cell(*r, "cause"));
  }

  size_t width = 0;
  for (const auto& [label, value] : lines)
    width = std::max(width, label.size());
  std::string out;
  for (const auto& [label, value] : lines) {
    absl::StrAppend(&out, label, ":",
                    std::string(width - label.size() + 2, ' '), value, "\n");
  }
  if (!task_rows.empty()) {
    out += "Tasks:\n";
    cli::AppendLines(
        &out,
        FormatTable({"TASK", "NODE", "ADDRESS", "GPUS", "STATE", "EXIT"},
                    task_rows),
        "  ");
  }
  out += FormatEventsSection(Items(job, "events"), now);
  return out;
}

std::string FormatEventsSection(const nlohmann::json& events, absl::Time now) {
  std::vector<std::vector<std::string>> event_rows;
  for (const Json& e : Items(events, "events")) {
    std::optional<absl::Time> t = TimeField(e, "time");
    std::string message = Cell(e, "message");
    // Repeats the server coalesced into one event (docs/api.md).
    if (std::optional<int64_t> count = Int(e, "count"); count && *count > 1) {
      std::optional<absl::Time> last = TimeField(e, "last_time");
      absl::StrAppend(&message, " (", *count, " times",
                      last ? absl::StrCat(", the last ", FormatAgo(*last, now))
                           : std::string(),
                      ")");
    }
    event_rows.push_back({t ? FormatUtc(*t) : Cell(e, "time"),
                          t ? FormatAgo(*t, now) : "-", message});
  }
  std::string out;
  if (!event_rows.empty()) {
    out += "Events:\n";
    cli::AppendLines(&out, FormatTable({"TIME", "AGE", "MESSAGE"}, event_rows),
                     "  ");
  }
  return out;
}

}  // namespace loom
