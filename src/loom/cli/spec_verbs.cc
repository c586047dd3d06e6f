#include "loom/cli/spec_verbs.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/core/cluster_spec.h"

namespace loom {

using cli::Int;
using cli::Items;
using cli::Json;
using cli::Str;

std::string FormatClusterPlan(const Json& plan) {
  std::string out;
  std::map<std::string, int> counts;
  for (const Json& c : Items(plan, "changes")) {
    absl::StrAppend(&out, "  ", Str(c, "text"), "\n");
    counts[Str(c, "op")] += 1;
  }
  const int64_t live = Int(plan, "live_revision").value_or(0);
  if (counts.empty()) {
    return absl::StrCat("No changes: the spec matches the live revision ", live,
                        ".\n");
  }
  std::vector<std::string> effects;
  const Json empty = Json::object();
  const Json& e = plan.contains("effects") && plan["effects"].is_object()
                      ? plan["effects"]
                      : empty;
  for (const Json& d : Items(e, "drain")) {
    effects.push_back(absl::StrCat(
        "job ", Int(d, "job").value_or(0), " moves: ", Str(d, "why"),
        " (checkpoint signal, then it is queued again)"));
  }
  for (const Json& q : Items(e, "over_quota")) {
    effects.push_back(absl::StrCat(
        "project ", Str(q, "project"), " goes over its quota: ",
        Int(q, "running_gpus").value_or(0), " GPUs running, quota ",
        Int(q, "quota_gpus").value_or(0), " (was ", Int(q, "was").value_or(0),
        "); its preemptible jobs may be reclaimed by projects within theirs"));
  }
  for (const Json& u : Items(e, "infeasible")) {
    const std::string why = Str(u, "why");
    effects.push_back(absl::StrCat(
        "pending job ", Int(u, "job").value_or(0), " can no longer run",
        why.empty() ? "" : absl::StrCat(": ", why), " (it stays pending)"));
  }
  for (const Json& id : Items(e, "feasible")) {
    if (!id.is_number_integer()) continue;
    effects.push_back(
        absl::StrCat("pending job ", id.get<int64_t>(), " can run again"));
  }
  out = absl::StrCat("Changes against the live revision ", live, ":\n", out);
  if (!effects.empty()) {
    absl::StrAppend(&out, "\nEffects on work:\n");
    for (const std::string& line : effects) {
      absl::StrAppend(&out, "  ", line, "\n");
    }
  }
  absl::StrAppend(&out, "\nPlan: ", counts["+"], " to add, ", counts["~"],
                  " to change, ", counts["-"], " to remove.\n");
  return out;
}

std::string FormatClusterHistory(const Json& history) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& r : Items(history, "revisions")) {
    std::vector<std::string> lines;
    for (const Json& l : Items(r, "changes")) {
      if (l.is_string()) lines.push_back(l.get<std::string>());
    }
    std::string summary =
        lines.empty()
            ? "-"
            : absl::StrJoin(lines.begin(),
                            lines.begin() + std::min<size_t>(lines.size(), 2),
                            "; ");
    if (lines.size() > 2) {
      absl::StrAppend(&summary, "; (", lines.size() - 2, " more)");
    }
    const bool live =
        r.contains("live") && r["live"].is_boolean() && r["live"].get<bool>();
    rows.push_back(
        {absl::StrCat(Int(r, "revision").value_or(0), live ? " (live)" : ""),
         Str(r, "author"), Str(r, "time"), summary});
  }
  return FormatTable({"REVISION", "AUTHOR", "TIME", "CHANGES"}, rows);
}

namespace cli {
namespace {

// The request body of plan and apply: the spec's text, named by its path.
absl::StatusOr<Json> SpecRequest(const Verb& v) {
  if (v.flags.files.size() != 1) {
    return absl::InvalidArgumentError(
        "give the cluster spec with -f FILE (one file, or a preset name)");
  }
  absl::StatusOr<ClusterSpecText> spec = ReadClusterSpec(v.flags.files[0]);
  if (!spec.ok()) return spec.status();
  return Json{{"spec", spec->text}, {"source", spec->source}};
}

int Plan(const Verb& v) {
  absl::StatusOr<Json> request = SpecRequest(v);
  if (!request.ok()) return v.Fail(kExitFailed, request.status());
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitFailed;
  absl::StatusOr<Json> plan = client->PlanCluster(*request);
  if (!plan.ok()) return v.Fail(kExitFailed, plan.status());
  if (!v.PrintStructured(*plan)) {
    v.out() << FormatClusterPlan(*plan);
    if (!Items(*plan, "changes").empty()) {
      v.out() << "`loom apply -f " << v.flags.files[0] << " --revision "
              << Int(*plan, "live_revision").value_or(0) << "` applies it.\n";
    }
  }
  // As `terraform plan -detailed-exitcode`: 2 when there are changes.
  return Items(*plan, "changes").empty() ? kExitOk : 2;
}

// Prints an apply's (or rollback's) reply.
int Applied(const Verb& v, const Json& reply) {
  if (v.PrintStructured(reply)) return kExitOk;
  v.out() << FormatClusterPlan(reply);
  const bool applied = reply.contains("applied") &&
                       reply["applied"].is_boolean() &&
                       reply["applied"].get<bool>();
  if (applied) {
    v.out() << "Applied as revision " << Int(reply, "revision").value_or(0);
    if (reply.contains("rollback_to")) {
      v.out() << " (the spec of revision "
              << Int(reply, "rollback_to").value_or(0) << ")";
    }
    v.out() << ".";
    std::vector<std::string> retiring;
    for (const Json& n : Items(reply, "retiring")) {
      if (n.is_string()) retiring.push_back(n.get<std::string>());
    }
    if (!retiring.empty()) {
      v.out() << " Draining " << absl::StrJoin(retiring, ", ")
              << " first; they go once their jobs have moved.";
    }
    v.out() << "\n";
  }
  return kExitOk;
}

int Apply(const Verb& v) {
  absl::StatusOr<Json> request = SpecRequest(v);
  if (!request.ok()) return v.Fail(kExitFailed, request.status());
  if (v.flags.spec_revision >= 0) {
    (*request)["revision"] = v.flags.spec_revision;
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitFailed;
  absl::StatusOr<Json> reply = client->ApplyCluster(*request);
  if (!reply.ok()) return v.Fail(kExitFailed, reply.status());
  return Applied(v, *reply);
}

int Rollback(const Verb& v) {
  Json request = Json::object();
  if (v.flags.rollback_to > 0) request["to"] = v.flags.rollback_to;
  if (v.flags.spec_revision >= 0) request["revision"] = v.flags.spec_revision;
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitFailed;
  absl::StatusOr<Json> reply = client->RollbackCluster(request);
  if (!reply.ok()) return v.Fail(kExitFailed, reply.status());
  return Applied(v, *reply);
}

int History(const Verb& v) {
  return RequestAndPrint(
      v, [](ApiClient& client) { return client.ClusterRevisions(); },
      [](const Json& history) { return FormatClusterHistory(history); });
}

}  // namespace

void AddSpecVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* plan = AddVerb(
      app, f, "plan",
      "Show what applying a cluster spec would change and its effect on "
      "work (exit 0: no change, 2: changes, 1: error)");
  plan->add_option("-f,--file", f->files, "The cluster spec (or a preset)")
      ->required();
  AddOutputFlag(plan, f, {"json", "yaml"});

  CLI::App* apply = AddVerb(app, f, "apply",
                            "Apply a cluster spec as a new revision (admin), "
                            "live, without a restart");
  apply->add_option("-f,--file", f->files, "The cluster spec (or a preset)")
      ->required();
  apply->add_option("--revision", f->spec_revision,
                    "Refuse unless the live revision is still N (the one "
                    "`loom plan` showed)");
  AddOutputFlag(apply, f, {"json", "yaml"});

  CLI::App* history =
      AddVerb(app, f, "history", "List the cluster spec's revisions");
  AddOutputFlag(history, f, {"json", "yaml"});

  CLI::App* rollback = AddVerb(
      app, f, "rollback",
      "Apply an earlier revision's spec again, as a new revision (admin)");
  rollback->add_option("--to", f->rollback_to,
                       "The revision to return to (default: the one before "
                       "the live one)");
  rollback->add_option("--revision", f->spec_revision,
                       "Refuse unless the live revision is still N");
  AddOutputFlag(rollback, f, {"json", "yaml"});
}

std::optional<int> RunSpecVerb(const Verb& v) {
  if (v.name == "plan") return Plan(v);
  if (v.name == "apply") return Apply(v);
  if (v.name == "rollback") return Rollback(v);
  if (v.name == "history") return History(v);
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
