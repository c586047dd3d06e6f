#include "loom/cli/maintain_verbs.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/units.h"

namespace loom {

using cli::Cell;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Str;
using cli::TimeField;

namespace {

// "1 node", "3 nodes".
std::string Plural(int64_t n, absl::string_view one, absl::string_view many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

// A whole number >= 1 given to `flag`; "" is nullopt.
absl::StatusOr<std::optional<int64_t>> CountFlag(const std::string& text,
                                                 absl::string_view flag) {
  if (text.empty()) return std::nullopt;
  int64_t n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": '", text, "' is not a whole number >= 1"));
  }
  return n;
}

// A duration given to `flag` as JSON seconds (a whole number when it is
// one); "" is nullopt.
absl::StatusOr<std::optional<Json>> SecondsFlag(const std::string& text,
                                                absl::string_view flag) {
  if (text.empty()) return std::nullopt;
  absl::StatusOr<absl::Duration> d = ParseDuration(text);
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": ", d.status().message()));
  }
  const int64_t whole = absl::ToInt64Seconds(*d);
  if (absl::Seconds(whole) == *d) return Json(whole);
  return Json(absl::ToDoubleSeconds(*d));
}

// A node's batch; 0 until its batch starts (the server picks a batch's
// nodes as it starts it).
int64_t BatchOf(const Json& n) { return Int(n, "batch").value_or(0); }

// The nodes of a snapshot in batch order, those without one yet last (the
// server's order within each).
std::vector<const Json*> NodesInBatchOrder(const Json& m) {
  std::vector<const Json*> nodes;
  for (const Json& n : Items(m, "node_status")) {
    if (n.is_object()) nodes.push_back(&n);
  }
  const auto rank = [](const Json* n) {
    const int64_t b = BatchOf(*n);
    return b > 0 ? b : INT64_MAX;
  };
  std::stable_sort(
      nodes.begin(), nodes.end(),
      [&](const Json* a, const Json* b) { return rank(a) < rank(b); });
  return nodes;
}

bool InFlightPhase(const std::string& phase) {
  return phase == "draining" || phase == "running" || phase == "checking";
}

bool PhaseEnded(const std::string& phase) {
  return phase == "done" || phase == "failed" || phase == "skipped";
}

// The last `max_lines` non-empty lines of a command's output, each led by
// `indent` and ending in '\n'.
std::string OutputTail(const std::string& output, size_t max_lines,
                       absl::string_view indent) {
  std::vector<absl::string_view> lines;
  for (absl::string_view l : absl::StrSplit(output, '\n')) {
    l = absl::StripTrailingAsciiWhitespace(l);
    if (!l.empty()) lines.push_back(l);
  }
  std::string out;
  const size_t first = lines.size() > max_lines ? lines.size() - max_lines : 0;
  for (size_t i = first; i < lines.size(); ++i) {
    absl::StrAppend(&out, indent, lines[i], "\n");
  }
  return out;
}

// "2 done, 2 in progress, 4 pending, 0 failed".
std::string CountsText(const Json& m) {
  static const Json kEmpty = Json::object();
  const Json* c = cli::Field(m, "counts");
  const Json& counts = c != nullptr ? *c : kEmpty;
  return absl::StrCat(
      Int(counts, "done").value_or(0), " done, ",
      Int(counts, "in_progress").value_or(0), " in progress, ",
      Int(counts, "pending").value_or(0), " pending, ",
      Int(counts, "failed").value_or(0), " failed",
      Int(counts, "skipped").value_or(0) > 0
          ? absl::StrCat(", ", *Int(counts, "skipped"), " skipped")
          : "");
}

// The reason, without a lead that repeats the state ("done: 8 nodes
// maintained" of a done one).
std::string ReasonText(const Json& m) {
  std::string reason = Str(m, "reason");
  const std::string lead = absl::StrCat(Str(m, "state"), ": ");
  if (absl::StartsWith(reason, lead)) reason.erase(0, lead.size());
  return reason;
}

// "batch 2 of 4", or "no batch started yet (4 batches)".
std::string BatchText(const Json& m) {
  const int64_t current = Int(m, "batch_current").value_or(0);
  const int64_t total = Int(m, "batches_total").value_or(0);
  if (current <= 0) {
    return absl::StrCat("no batch started yet (",
                        Plural(total, "batch", "batches"), ")");
  }
  return absl::StrCat("batch ", current, " of ", total);
}

// Up to `max` names, then "and N more".
std::string NameList(const std::vector<std::string>& names, size_t max) {
  if (names.size() <= max) return absl::StrJoin(names, ", ");
  return absl::StrCat(absl::StrJoin(names.begin(), names.begin() + max, ", "),
                      " and ", names.size() - max, " more");
}

}  // namespace

bool MaintenanceOver(const Json& m) {
  const std::string state = Str(m, "state");
  if (state != "done" && state != "failed" && state != "aborted") {
    return false;
  }
  if (TimeField(m, "ended").has_value()) return true;
  for (const Json* n : NodesInBatchOrder(m)) {
    if (InFlightPhase(Str(*n, "phase"))) return false;
  }
  return true;
}

absl::StatusOr<Json> MaintenanceRequest(const MaintainFlags& f) {
  Json request = Json::object();
  if (!f.pool.empty() && !f.nodes.empty()) {
    return absl::InvalidArgumentError(
        "--pool and --nodes: give one of them, not both");
  }
  if (f.pool.empty() && f.nodes.empty()) {
    return absl::InvalidArgumentError(
        "give the nodes to maintain: --pool POOL or --nodes N1,N2,...");
  }
  if (!f.pool.empty()) {
    request["pool"] = f.pool;
  } else {
    std::set<std::string> seen;
    for (const std::string& n : f.nodes) {
      if (n.empty()) {
        return absl::InvalidArgumentError(
            "--nodes: an empty name in the list (write N1,N2,...)");
      }
      if (!seen.insert(n).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("--nodes: ", n, " is named twice"));
      }
    }
    request["nodes"] = f.nodes;
  }
  if (absl::StripAsciiWhitespace(f.command).empty()) {
    return absl::InvalidArgumentError(
        "--run: give the command to run on each node (--run 'CMD')");
  }
  request["command"] = f.command;
  absl::StatusOr<std::optional<int64_t>> batch = CountFlag(f.batch, "--batch");
  if (!batch.ok()) return batch.status();
  if (!batch->has_value()) {
    return absl::InvalidArgumentError(
        "--batch: give how many nodes to take at a time (--batch K, K >= 1)");
  }
  request["batch"] = **batch;
  absl::StatusOr<std::optional<int64_t>> max_unavailable =
      CountFlag(f.max_unavailable, "--max-unavailable");
  if (!max_unavailable.ok()) return max_unavailable.status();
  if (max_unavailable->has_value()) {
    request["max_unavailable"] = **max_unavailable;
  }
  for (const auto& [text, flag, field] :
       {std::tuple(&f.drain_timeout, "--drain-timeout", "drain_timeout_s"),
        std::tuple(&f.ready_timeout, "--ready-timeout", "ready_timeout_s")}) {
    absl::StatusOr<std::optional<Json>> s = SecondsFlag(*text, flag);
    if (!s.ok()) return s.status();
    if (s->has_value()) request[field] = **s;
  }
  if (!f.on_failure.empty()) {
    if (f.on_failure != "stop" && f.on_failure != "continue") {
      return absl::InvalidArgumentError(absl::StrCat(
          "--on-failure: '", f.on_failure, "' is not stop or continue"));
    }
    request["on_failure"] = f.on_failure;
  }
  return request;
}

std::string FormatMaintenanceStarted(const Json& m) {
  std::vector<std::string> names;
  for (const Json* n : NodesInBatchOrder(m)) names.push_back(Str(*n, "name"));
  int64_t count = static_cast<int64_t>(names.size());
  if (count == 0) {
    const Json* c = cli::Field(m, "counts");
    if (c != nullptr) {
      for (const char* k :
           {"pending", "in_progress", "done", "failed", "skipped"}) {
        count += Int(*c, k).value_or(0);
      }
    }
  }
  const std::string pool = Str(m, "pool");
  const int64_t batch = Int(m, "batch").value_or(0);
  const int64_t out = Int(m, "max_unavailable").value_or(batch > 0 ? batch : 1);
  return absl::StrCat(
      "maintenance ", Int(m, "id").value_or(0),
      " started: ", Plural(count, "node", "nodes"),
      pool.empty()
          ? (names.empty() ? "" : absl::StrCat(" (", NameList(names, 4), ")"))
          : absl::StrCat(" of pool ", pool),
      " in ", Plural(Int(m, "batches_total").value_or(0), "batch", "batches"),
      " of ", batch, " (at most ", out, " out at once)");
}

std::string FormatMaintenanceHeader(const Json& m) {
  std::string line =
      absl::StrCat("maintenance ", Int(m, "id").value_or(0), " ",
                   Str(m, "state"), ", ", BatchText(m), ": ", CountsText(m));
  if (const std::string reason = ReasonText(m); !reason.empty()) {
    absl::StrAppend(&line, "; ", reason);
  }
  return line;
}

std::string FormatMaintenanceStatus(const Json& m, absl::Time now) {
  std::string out = absl::StrCat(FormatMaintenanceHeader(m), "\n");
  // What runs where, by whom and since when.
  const std::string pool = Str(m, "pool");
  std::string where = pool.empty() ? "nodes" : absl::StrCat("pool ", pool);
  const int64_t batch = Int(m, "batch").value_or(0);
  const std::string on_failure = Str(m, "on_failure");
  absl::StrAppend(&out, "  ", where, ", batches of ", batch, " (at most ",
                  Int(m, "max_unavailable").value_or(batch),
                  " out), on failure ",
                  on_failure.empty() ? "stop" : on_failure);
  if (const std::string author = Str(m, "author"); !author.empty()) {
    absl::StrAppend(&out, ", by ", author);
  }
  if (std::optional<absl::Time> t = TimeField(m, "created")) {
    absl::StrAppend(&out, ", started ", FormatAgo(*t, now));
  }
  if (std::optional<absl::Time> t = TimeField(m, "ended")) {
    absl::StrAppend(&out, ", ended ", FormatAgo(*t, now));
  }
  absl::StrAppend(&out, "\n  run: ", Str(m, "command"), "\n");

  std::vector<std::vector<std::string>> rows;
  std::string failures;
  for (const Json* n : NodesInBatchOrder(m)) {
    std::optional<absl::Time> since = TimeField(*n, "since");
    rows.push_back({Cell(*n, "name"),
                    BatchOf(*n) > 0 ? absl::StrCat(BatchOf(*n)) : "-",
                    Cell(*n, "phase"), since ? FormatAgo(*since, now) : "-",
                    Cell(*n, "message")});
    if (Str(*n, "phase") == "failed" && !Str(*n, "output").empty()) {
      absl::StrAppend(&failures, "\n", Str(*n, "name"), ", last output:\n",
                      OutputTail(Str(*n, "output"), 10, "    "));
    }
  }
  if (!rows.empty()) {
    absl::StrAppend(
        &out, "\n",
        FormatTable({"NODE", "BATCH", "PHASE", "SINCE", "MESSAGE"}, rows));
  }
  absl::StrAppend(&out, failures);
  return out;
}

std::string FormatMaintenanceProgress(const Json& before, const Json& after,
                                      absl::Time now, absl::TimeZone tz) {
  const std::string at = absl::FormatTime("%H:%M:%S ", now, tz);
  const int64_t total = Int(after, "batches_total").value_or(0);
  const int64_t was_current = Int(before, "batch_current").value_or(0);
  const int64_t current = Int(after, "batch_current").value_or(0);

  std::map<std::string, std::string> was;  // node -> its phase before
  for (const Json* n : NodesInBatchOrder(before)) {
    was[Str(*n, "name")] = Str(*n, "phase");
  }
  // The nodes of each batch in order; those whose batch has not started
  // last, under kNoBatch.
  constexpr int64_t kNoBatch = INT64_MAX;
  std::map<int64_t, std::vector<const Json*>> batches;
  for (const Json* n : NodesInBatchOrder(after)) {
    batches[BatchOf(*n) > 0 ? BatchOf(*n) : kNoBatch].push_back(n);
  }
  std::string out;
  for (const auto& [b, nodes] : batches) {
    const bool started = b != kNoBatch;
    const std::string lead = started ? absl::StrCat("batch ", b, " ") : "";
    if (started && b > was_current && b <= current) {
      std::vector<std::string> names;
      for (const Json* n : nodes) names.push_back(Str(*n, "name"));
      absl::StrAppend(&out, at, "batch ", b, " of ", total,
                      " started: ", NameList(names, 8), "\n");
    }
    bool ended_now = true, ended_before = true;
    std::map<std::string, int> ends;
    // Skipped nodes (an abort) make one line, named by their message.
    std::vector<std::string> skipped;
    std::string skipped_message;
    for (const Json* n : nodes) {
      const std::string name = Str(*n, "name");
      const std::string phase = Str(*n, "phase");
      auto it = was.find(name);
      const std::string old_phase = it == was.end() ? "" : it->second;
      ended_now = ended_now && PhaseEnded(phase);
      ended_before = ended_before && PhaseEnded(old_phase);
      if (PhaseEnded(phase)) ends[phase] += 1;
      if (phase == old_phase || (old_phase.empty() && phase == "pending")) {
        continue;
      }
      const std::string message = Str(*n, "message");
      if (phase == "skipped") {
        skipped.push_back(name);
        if (skipped_message.empty()) skipped_message = message;
        continue;
      }
      absl::StrAppend(&out, at, lead, name, " ", phase,
                      message.empty() ? "" : ": ", message, "\n");
      if (phase == "failed") {
        absl::StrAppend(&out, OutputTail(Str(*n, "output"), 5, "    "));
      }
    }
    if (!skipped.empty()) {
      absl::StrAppend(&out, at, lead, NameList(skipped, 8), " skipped",
                      skipped_message.empty() ? "" : ": ", skipped_message,
                      "\n");
    }
    if (started && ended_now && !ended_before) {
      std::vector<std::string> parts;
      for (const char* p : {"done", "failed", "skipped"}) {
        if (ends[p] > 0) parts.push_back(absl::StrCat(ends[p], " ", p));
      }
      absl::StrAppend(&out, at, "batch ", b, " of ", total,
                      " ended: ", absl::StrJoin(parts, ", "), "\n");
    }
  }
  // The maintenance's own changes: its state, and its end (a failed or
  // aborted one ends once its nodes in flight have).
  const std::string state = Str(after, "state");
  const std::string old_state = Str(before, "state");
  const bool over = MaintenanceOver(after);
  if (!state.empty() &&
      (state != old_state || (over && !MaintenanceOver(before)))) {
    const bool resumed =
        state == "running" && (old_state == "paused" || old_state == "failed");
    absl::StrAppend(&out, at, "maintenance ", Int(after, "id").value_or(0), " ",
                    resumed ? "resumed" : state);
    std::vector<std::string> parts;
    if (over) parts.push_back(CountsText(after));
    if (const std::string reason = ReasonText(after); !reason.empty()) {
      parts.push_back(reason);
    }
    if (!parts.empty()) absl::StrAppend(&out, ": ", absl::StrJoin(parts, "; "));
    absl::StrAppend(&out, "\n");
  }
  return out;
}

namespace cli {
namespace {

constexpr char kMaintainUsage[] =
    "usage: loom maintain (--pool POOL | --nodes N1,N2,...) --batch K "
    "--run 'CMD'\n"
    "                     [--max-unavailable M] [--drain-timeout D] "
    "[--ready-timeout D]\n"
    "                     [--on-failure stop|continue] [--wait] "
    "[-o json|yaml]\n"
    "       loom maintain status [ID] [-w] [-o json|yaml]\n"
    "       loom maintain pause|resume|abort [ID] [-o json|yaml]\n"
    "ID defaults to the newest maintenance; see `loom maintain --help`.\n";

constexpr char kMaintainFooter[] =
    "Exit status: 0 ok (with --wait or -w: the maintenance is done), 1 the "
    "request failed, or the maintenance failed or was aborted, 2 bad usage, "
    "130 interrupted (the maintenance goes on). See docs/cli.md.";

// A usage error: the message, then the usage, on stderr.
int MaintainUsageError(const Verb& v, absl::string_view message) {
  v.Fail(kExitUsage, message);
  v.err() << kMaintainUsage;
  return kExitUsage;
}

bool AnyStartFlag(const MaintainFlags& m) {
  return !m.pool.empty() || !m.nodes.empty() || !m.batch.empty() ||
         !m.max_unavailable.empty() || !m.command.empty() ||
         !m.drain_timeout.empty() || !m.ready_timeout.empty() ||
         !m.on_failure.empty() || m.wait;
}

// The ID an action names: nullopt for none (the newest), an error when it
// is not a positive whole number.
absl::StatusOr<std::optional<int64_t>> ParseMaintenanceId(
    const std::string& text) {
  if (text.empty()) return std::nullopt;
  int64_t id = 0;
  if (!absl::SimpleAtoi(text, &id) || id < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a maintenance ID"));
  }
  return id;
}

// The ID of the newest maintenance; NotFound when there is none.
absl::StatusOr<int64_t> NewestMaintenanceId(ApiClient& client) {
  absl::StatusOr<Json> list = client.ListMaintenances();
  if (!list.ok()) return list.status();
  int64_t newest = 0;
  for (const Json& m : Items(*list, "maintenances")) {
    newest = std::max(newest, Int(m, "id").value_or(0));
  }
  if (newest == 0) {
    return absl::NotFoundError(
        "no maintenance has been started (loom maintain --pool P --batch K "
        "--run 'CMD' starts one)");
  }
  return newest;
}

// Follows maintenance `last` until it ends, printing its progress: 0 when
// it is done, 1 when it failed or was aborted (or the server cannot be
// asked), 130 when interrupted.
int FollowMaintenance(const Verb& v, ApiClient& client, Json last) {
  const int64_t id = Int(last, "id").value_or(0);
  const absl::TimeZone tz = absl::LocalTimeZone();
  bool unreachable = false;
  while (!MaintenanceOver(last)) {
    if (!SleepUnlessInterrupted(v.ctx)) {
      v.err() << "loom " << v.name << ": interrupted; maintenance " << id
              << " goes on (`loom maintain status " << id
              << " -w` follows it again)\n";
      return kExitInterrupted;
    }
    absl::StatusOr<Json> next = client.GetMaintenance(id);
    if (!next.ok() && next.status().code() == absl::StatusCode::kUnavailable) {
      // A restart or failover of the server: the maintenance goes on there.
      if (!unreachable) {
        v.err() << "loom " << v.name << ": " << next.status().message()
                << "; still trying\n";
      }
      unreachable = true;
      continue;
    }
    if (!next.ok()) return v.Fail(kExitFailed, next.status());
    unreachable = false;
    if (!v.flags.output.empty()) {
      if (*next != last) v.PrintStructured(*next);
    } else {
      v.out() << FormatMaintenanceProgress(last, *next, v.ctx.now(), tz);
    }
    v.out().flush();
    last = *std::move(next);
  }
  return Str(last, "state") == "done" ? kExitOk : kExitFailed;
}

int StartMaintenance(const Verb& v) {
  const MaintainFlags& f = v.flags.maintain;
  if (!AnyStartFlag(f)) {
    return MaintainUsageError(
        v,
        "give --pool or --nodes, --batch and --run to start a maintenance, "
        "or an action: status, pause, resume, abort");
  }
  absl::StatusOr<Json> request = MaintenanceRequest(f);
  if (!request.ok()) {
    // A flag missing, or two that do not go together: the usage too.
    const bool usage = f.pool.empty() == f.nodes.empty() || f.batch.empty() ||
                       f.command.empty();
    if (usage) return MaintainUsageError(v, request.status().message());
    return v.Fail(kExitUsage, request.status());
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> m = client->StartMaintenance(*request);
  if (!m.ok()) return v.Fail(kExitFailed, m.status());
  if (!v.PrintStructured(*m)) {
    v.out() << FormatMaintenanceStarted(*m) << "\n";
    if (!f.wait) {
      const int64_t id = Int(*m, "id").value_or(0);
      v.out() << "`loom maintain status " << id << " -w` follows it.\n";
    }
  }
  if (!f.wait) return kExitOk;
  v.out().flush();
  return FollowMaintenance(v, *client, *std::move(m));
}

int MaintenanceStatus(const Verb& v, ApiClient& client, int64_t id) {
  absl::StatusOr<Json> m = client.GetMaintenance(id);
  if (!m.ok()) return v.Fail(kExitFailed, m.status());
  if (!v.PrintStructured(*m)) {
    v.out() << FormatMaintenanceStatus(*m, v.ctx.now());
  }
  if (!v.flags.maintain.watch) return kExitOk;
  v.out().flush();
  return FollowMaintenance(v, client, *std::move(m));
}

int MaintenanceAction(const Verb& v, ApiClient& client, int64_t id) {
  absl::StatusOr<Json> m =
      client.MaintenanceAction(id, v.flags.maintain.action);
  if (!m.ok()) return v.Fail(kExitFailed, m.status());
  if (!v.PrintStructured(*m)) v.out() << FormatMaintenanceHeader(*m) << "\n";
  return kExitOk;
}

int Maintain(const Verb& parent) {
  const MaintainFlags& f = parent.flags.maintain;
  if (f.action.empty()) return StartMaintenance(parent);
  const Verb v{absl::StrCat("maintain ", f.action), parent.flags, parent.ctx};
  if (AnyStartFlag(f)) {
    return MaintainUsageError(
        v, absl::StrCat("--pool, --nodes, --batch, --run and the other start "
                        "flags start a maintenance; they do not go with ",
                        f.action));
  }
  absl::StatusOr<std::optional<int64_t>> given = ParseMaintenanceId(f.id);
  if (!given.ok()) return v.Fail(kExitUsage, given.status());
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<int64_t> id = given->has_value()
                                   ? absl::StatusOr<int64_t>(**given)
                                   : NewestMaintenanceId(*client);
  if (!id.ok()) return v.Fail(kExitFailed, id.status());
  if (f.action == "status") return MaintenanceStatus(v, *client, *id);
  return MaintenanceAction(v, *client, *id);
}

}  // namespace

void AddMaintainVerbs(CLI::App& app, JobCommandFlags* f) {
  MaintainFlags* m = &f->maintain;
  CLI::App* maintain = AddVerb(
      app, f, "maintain",
      "Rolling maintenance (admin): a few nodes at a time, cordon, move the "
      "jobs off, run a command on the node, wait until it is back and "
      "healthy, uncordon. Or: status|pause|resume|abort [ID]");
  maintain->require_subcommand(0, 1);
  maintain->footer(kMaintainFooter);
  maintain->add_option("--pool", m->pool, "Maintain every node of this pool")
      ->type_name("POOL");
  maintain
      ->add_option("--nodes", m->nodes,
                   "Maintain these nodes (comma-separated), in this order")
      ->delimiter(',')
      ->type_name("N1,N2");
  maintain
      ->add_option("--batch", m->batch,
                   "How many nodes to take at a time (K >= 1)")
      ->type_name("K");
  maintain
      ->add_option("--max-unavailable", m->max_unavailable,
                   "At most M nodes out of service at once (default: K)")
      ->type_name("M");
  maintain
      ->add_option("--run", m->command,
                   "The command to run on each node through its agent "
                   "(the upgrade), e.g. 'apt-get install -y ...'")
      ->type_name("CMD");
  maintain
      ->add_option("--drain-timeout", m->drain_timeout,
                   "How long the jobs may take to end by themselves before "
                   "they are moved "
                   "(90s, 10m; default 0: move them at once, with the "
                   "checkpoint signal)")
      ->type_name("D");
  maintain
      ->add_option("--ready-timeout", m->ready_timeout,
                   "How long a node has, after the command, to come back "
                   "healthy and on its pool's stack (default 10m)")
      ->type_name("D");
  maintain
      ->add_option("--on-failure", m->on_failure,
                   "When a node fails: stop (the default) or continue")
      ->check(CLI::IsMember({"stop", "continue"}));
  maintain->add_flag("--wait", m->wait,
                     "Follow the progress until the maintenance ends (exit 0 "
                     "when done, 1 when it failed or was aborted)");
  AddOutputFlag(maintain, f, {"json", "yaml"});

  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"status",
            "Show a maintenance: its state, batches and each node's phase"},
           {"pause",
            "Pause a maintenance: no new node is started; those in progress "
            "go on (admin)"},
           {"resume", "Resume a paused maintenance (admin)"},
           {"abort", "Abort a maintenance: no new node is started (admin)"}}) {
    CLI::App* sub = maintain->add_subcommand(name, text);
    sub->footer(kMaintainFooter);
    AddServerFlags(sub, f);
    sub->add_option("id", m->id, "The maintenance (default: the newest)")
        ->type_name("ID");
    if (name == "status") {
      sub->add_flag("-w,--watch", m->watch,
                    "Follow the progress, a line per change, until the "
                    "maintenance ends (exit 0 when done, 1 when it failed or "
                    "was aborted)");
    }
    AddOutputFlag(sub, f, {"json", "yaml"});
    sub->callback([m, action = name] { m->action = action; });
  }
}

std::optional<int> RunMaintainVerb(const Verb& v) {
  if (v.name == "maintain") return Maintain(v);
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
