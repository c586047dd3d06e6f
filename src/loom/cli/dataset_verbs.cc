#include "loom/cli/dataset_verbs.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
using cli::Num;
using cli::Str;

std::string FormatDatasetTable(const Json& datasets) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& d : Items(datasets, "datasets")) {
    const Json use = d.contains("use") ? d["use"] : Json::object();
    const int64_t starts = Int(use, "starts").value_or(0);
    std::string nodes = "-";
    if (use.contains("nodes") && use["nodes"].is_array()) {
      nodes = absl::StrCat(use["nodes"].size());
    }
    const std::string version = Str(use, "version");
    rows.push_back(
        {Str(d, "name").empty()
             ? "-"
             : Str(d, "name") + (d.value("removed", false) ? " (removed)" : ""),
         Cell(d, "source"), version.empty() ? "-" : version, nodes,
         absl::StrCat(starts),
         starts == 0 ? "-"
                     : absl::StrFormat("%.0f%%",
                                       100 * Num(use, "hit_ratio").value_or(0)),
         // What the cold store and peers sent: for tasks and prefetches.
         FormatBytes(Int(use, "cold_bytes").value_or(0) +
                     Int(use, "prefetch_cold_bytes").value_or(0)),
         FormatBytes(Int(use, "peer_bytes").value_or(0) +
                     Int(use, "prefetch_peer_bytes").value_or(0)),
         Int(use, "fills").value_or(0) == 0
             ? "-"
             : absl::StrFormat("%.1fs",
                               Num(use, "fill_seconds_mean").value_or(0)),
         absl::StrCat(Int(use, "prefetches").value_or(0))});
  }
  return FormatTable({"NAME", "SOURCE", "VERSION", "NODES", "STARTS", "HIT",
                      "COLD", "PEER", "FILL", "PREFETCHES"},
                     rows);
}

namespace cli {
namespace {

int List(const Verb& v) {
  return RequestAndPrint(
      v, [](ApiClient& client) { return client.ListDatasets(); },
      [](const Json& d) { return FormatDatasetTable(d); });
}

int Dataset(const Verb& v) {
  const JobCommandFlags& f = v.flags;
  const std::vector<std::string>& args = f.dataset_args;
  if (f.dataset_action == "list") {
    if (!args.empty()) return v.Fail(kExitUsage, "list: takes no arguments");
    return List(v);
  }
  if (f.dataset_action == "add") {
    if (args.size() != 2) {
      return v.Fail(kExitUsage, "usage: loom dataset add NAME SOURCE");
    }
    Json request = {{"name", args[0]}, {"source", args[1]}};
    if (!f.description.empty()) request["description"] = f.description;
    return RequestAndPrint(
        v, [&](ApiClient& client) { return client.AddDataset(request); },
        [](const Json& d) {
          return absl::StrCat("dataset ", Str(d, "name"), " is ",
                              Str(d, "source"), "\n");
        });
  }
  if (f.dataset_action == "rm") {
    if (args.size() != 1) {
      return v.Fail(kExitUsage, "usage: loom dataset rm NAME");
    }
    return RequestAndPrint(
        v, [&](ApiClient& client) { return client.DeleteDataset(args[0]); },
        [](const Json& d) {
          return absl::StrCat("dataset ", Str(d, "name"), " removed\n");
        });
  }
  return v.Fail(kExitUsage, absl::StrCat("dataset: '", f.dataset_action,
                                         "' is not an action (add, list, rm)"));
}

}  // namespace

void AddDatasetVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* datasets = AddVerb(
      app, f, "datasets",
      "List the datasets: hit rate, cold-store and peer bytes, fill time");
  AddOutputFlag(datasets, f, {"json", "yaml"});
  CLI::App* dataset = AddVerb(
      app, f, "dataset",
      "Datasets jobs read (docs/datasets.md): add NAME SOURCE names a source "
      "for specs (operator), rm NAME forgets it, list shows them all");
  dataset->add_option("action", f->dataset_action, "add | list | rm")
      ->required()
      ->check(CLI::IsMember({"add", "list", "rm"}));
  dataset->add_option("args", f->dataset_args,
                      "add: NAME SOURCE (REMOTE:PATH or /abs/path); rm: NAME");
  dataset->add_option("--description", f->description,
                      "add: what the dataset is, for `loom dataset list -o "
                      "json`");
  AddOutputFlag(dataset, f, {"json", "yaml"});
}

std::optional<int> RunDatasetVerb(const Verb& v) {
  if (v.name == "datasets") return List(v);
  if (v.name == "dataset") return Dataset(v);
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
