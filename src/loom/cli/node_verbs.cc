#include "loom/cli/node_verbs.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_join.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/units.h"

namespace loom {

using cli::Cell;
using cli::Field;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::TimeField;

std::string FormatNodeTable(const nlohmann::json& nodes, bool wide,
                            absl::Time now) {
  std::vector<std::string> header = {"NAME",  "STATE",   "GPUS", "ALLOC",
                                     "MODEL", "ADDRESS", "JOBS"};
  if (wide) {
    header.insert(header.end(),
                  {"POOL", "LEAF", "DRIVER", "CPUS", "MEMORY", "HEARTBEAT"});
  }
  header.push_back("REASON");
  std::vector<std::vector<std::string>> rows;
  for (const Json& node : Items(nodes, "nodes")) {
    std::vector<std::string> jobs;
    if (const Json* j = Field(node, "jobs"); j != nullptr && j->is_array()) {
      for (const Json& id : *j)
        jobs.push_back(id.is_string() ? id.get<std::string>() : id.dump());
    }
    std::vector<std::string> row = {
        Cell(node, "name"),
        Cell(node, "state"),
        Cell(node, "gpus"),
        Cell(node, "gpus_allocated"),
        Cell(node, "gpu_model"),
        Cell(node, "address"),
        jobs.empty() ? "-" : absl::StrJoin(jobs, ",")};
    if (wide) {
      std::optional<int64_t> memory = Int(node, "memory_bytes");
      std::optional<absl::Time> beat = TimeField(node, "last_heartbeat");
      const Json* labels = Field(node, "labels");
      row.insert(row.end(),
                 {Cell(node, "pool"), Cell(node, "leaf"),
                  labels != nullptr ? Cell(*labels, "gpu.driver") : "-",
                  Cell(node, "cpus"), memory ? FormatBytes(*memory) : "-",
                  beat ? FormatAgo(*beat, now) : "-"});
    }
    row.push_back(Cell(node, "reason"));
    rows.push_back(std::move(row));
  }
  return FormatTable(header, rows);
}

namespace cli {
namespace {

// Only the nodes whose software stack differs from their pool's (a
// non-empty `drift`), whatever their state.
Json DriftedOnly(Json answer) {
  Json kept = Json::array();
  for (const Json& node : Items(answer, "nodes")) {
    const Json* drift = Field(node, "drift");
    if (drift != nullptr && drift->is_array() && !drift->empty()) {
      kept.push_back(node);
    }
  }
  answer["nodes"] = std::move(kept);
  return answer;
}

int Nodes(const Verb& v) {
  return RequestAndPrint(
      v,
      [&](ApiClient& client) -> absl::StatusOr<Json> {
        absl::StatusOr<Json> nodes = client.ListNodes();
        if (!nodes.ok() || !v.flags.drifted || !nodes->is_object()) {
          return nodes;
        }
        return DriftedOnly(*std::move(nodes));
      },
      [&](const Json& nodes) {
        return FormatNodeTable(nodes, v.flags.output == "wide", v.ctx.now());
      });
}

int NodeAction(const Verb& v) {
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  const std::string& node = v.flags.node;
  absl::StatusOr<Json> answer = v.name == "cordon" ? client->CordonNode(node)
                                : v.name == "uncordon"
                                    ? client->UncordonNode(node)
                                    : client->DrainNode(node);
  if (!answer.ok()) return v.Fail(kExitFailed, answer.status());
  const std::string state = Str(*answer, "state");
  if (v.name == "cordon") {
    v.out() << "node " << node << " cordoned (no new work)\n";
  } else if (v.name == "uncordon") {
    v.out() << "node " << node << " uncordoned"
            << (state.empty() ? "" : " (" + state + ")") << "\n";
  } else if (state == "drained") {
    v.out() << "node " << node << " drained (no jobs were running on it)\n";
  } else {
    const size_t jobs = Items(*answer, "jobs").size();
    v.out() << "node " << node << " is draining: no new work";
    if (jobs > 0) {
      v.out() << "; drained when its " << jobs << " job"
              << (jobs == 1 ? "" : "s") << " end";
    } else {
      v.out() << "; drained when its jobs end";
    }
    v.out() << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddNodeVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* nodes = AddVerb(app, f, "nodes", "List nodes");
  AddOutputFlag(nodes, f, {"json", "yaml", "wide"});
  nodes->add_flag("--drifted", f->drifted,
                  "Only nodes whose software stack (driver, CUDA, loom) "
                  "differs from their pool's `stack`");

  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{
           {"cordon", "Stop scheduling new work on a node"},
           {"uncordon", "Let a cordoned or drained node take work again"},
           {"drain",
            "Cordon a node; it becomes drained when its jobs have ended"}}) {
    CLI::App* verb = AddVerb(app, f, name, text);
    verb->add_option("node", f->node, "Node name")->required();
  }
}

std::optional<int> RunNodeVerb(const Verb& v) {
  if (v.name == "nodes") return Nodes(v);
  if (v.name == "cordon" || v.name == "uncordon" || v.name == "drain") {
    return NodeAction(v);
  }
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
