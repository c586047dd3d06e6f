#include "loom/cli/cluster_verbs.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "fmt/format.h"
#include "loom/cli/job_format.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/job_id.h"
#include "loom/common/units.h"

namespace loom {

using cli::Cell;
using cli::Field;
using cli::FormatUtc;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Num;
using cli::Str;
using cli::TimeField;

std::string FormatTop(const Json& nodes_answer, const Json& jobs_answer,
                      const std::string& server, int width, int rows,
                      absl::Time now) {
  const std::vector<Json> nodes = Items(nodes_answer, "nodes");
  const std::vector<Json> jobs = Items(jobs_answer, "jobs");
  width = std::max(width, 40);
  int64_t total = 0, allocated = 0;
  std::map<std::string, int> states;
  for (const Json& n : nodes) {
    total += Int(n, "gpus").value_or(0);
    allocated += Int(n, "gpus_allocated").value_or(0);
    ++states[Str(n, "state")];
  }
  std::vector<Json> waiting, running;
  for (const Json& j : jobs) {
    const std::string s = Str(j, "state");
    if (s == "pending" || s == "held") waiting.push_back(j);
    if (s == "running" || s == "stopping") running.push_back(j);
  }
  std::string out =
      absl::StrCat("loom top  ", server, "  ", FormatUtc(now), "\n");
  const int bar = std::max(10, width - 40);
  const int filled = total > 0 ? static_cast<int>(bar * allocated / total) : 0;
  absl::StrAppend(&out, "GPUs   ", allocated, "/", total, " allocated (",
                  total > 0 ? 100 * allocated / total : 0, "%)  [",
                  std::string(filled, '#'), std::string(bar - filled, '.'),
                  "]\n");
  std::string node_line = absl::StrCat("Nodes  ", nodes.size());
  for (const char* s : {"up", "suspect", "cordoned", "draining", "drained",
                        "down", "unknown"}) {
    if (auto it = states.find(s); it != states.end()) {
      absl::StrAppend(&node_line, ", ", it->second, " ", s);
    }
  }
  absl::StrAppend(&out, node_line, "\n");
  absl::StrAppend(&out, "Jobs   ", running.size(), " running, ", waiting.size(),
                  " waiting\n\n");
  // The node map, by leaf.
  absl::StrAppend(&out,
                  "Nodes by leaf: # full + half - some . idle d drained s "
                  "suspect X down ? unknown\n");
  std::vector<std::pair<std::string, std::string>> leaves;
  for (const Json& n : nodes) {
    const std::string leaf = Str(n, "leaf");
    if (leaves.empty() || leaves.back().first != leaf) {
      leaves.emplace_back(leaf, "");
    }
    const std::string s = Str(n, "state");
    const int64_t g = Int(n, "gpus").value_or(0);
    const int64_t a = Int(n, "gpus_allocated").value_or(0);
    char c = '.';
    if (s == "down") {
      c = 'X';
    } else if (s == "unknown") {
      c = '?';
    } else if (s == "suspect") {
      c = 's';
    } else if (s == "drained" || s == "draining" || s == "cordoned") {
      c = 'd';
    } else if (g > 0 && a == g) {
      c = '#';
    } else if (g > 0 && 2 * a >= g) {
      c = '+';
    } else if (a > 0) {
      c = '-';
    }
    leaves.back().second.push_back(c);
  }
  size_t name_width = 0;
  for (const auto& [leaf, map] : leaves) {
    name_width = std::max(name_width, leaf.size());
  }
  const size_t cell =
      name_width + 2 + (leaves.empty() ? 0 : leaves.front().second.size()) + 2;
  const size_t per_line = std::max<size_t>(
      1, static_cast<size_t>(width) / std::max<size_t>(cell, 1));
  std::string line;
  for (size_t i = 0; i < leaves.size(); ++i) {
    std::string entry = leaves[i].first;
    entry.resize(name_width + 2, ' ');
    absl::StrAppend(&entry, leaves[i].second);
    if (i % per_line != 0) line += "  ";
    line += entry;
    if (i % per_line == per_line - 1 || i + 1 == leaves.size()) {
      absl::StrAppend(&out, line, "\n");
      line.clear();
    }
  }
  absl::StrAppend(&out, "\nWaiting (", waiting.size(), ")\n");
  std::vector<std::vector<std::string>> table;
  for (size_t i = 0; i < waiting.size() && static_cast<int>(i) < rows; ++i) {
    const Json& j = waiting[i];
    table.push_back({Cell(j, "id"), Cell(j, "name"), Cell(j, "user"),
                     Cell(j, "gpus"), Cell(j, "reason")});
  }
  if (!table.empty()) {
    cli::AppendLines(
        &out, FormatTable({"JOBID", "NAME", "USER", "GPUS", "REASON"}, table),
        "", static_cast<size_t>(width));
  }
  std::sort(running.begin(), running.end(), [](const Json& a, const Json& b) {
    return Int(a, "gpus").value_or(0) > Int(b, "gpus").value_or(0);
  });
  absl::StrAppend(&out, "\nRunning (", running.size(), ", largest first)\n");
  table.clear();
  for (size_t i = 0; i < running.size() && static_cast<int>(i) < rows; ++i) {
    const Json& j = running[i];
    std::string time = "-";
    if (std::optional<absl::Time> start = TimeField(j, "start_time")) {
      time = FormatElapsed(now - *start);
    }
    const Json* placement = Field(j, "placement");
    table.push_back({Cell(j, "id"), Cell(j, "name"), Cell(j, "user"),
                     Cell(j, "gpus"), time,
                     placement != nullptr && placement->is_object()
                         ? DescribeSwitchSpan(*placement)
                         : "-"});
  }
  if (!table.empty()) {
    cli::AppendLines(
        &out,
        FormatTable({"JOBID", "NAME", "USER", "GPUS", "TIME", "PLACED ON"},
                    table),
        "", static_cast<size_t>(width));
  }
  return out;
}

std::string FormatProjectTable(const nlohmann::json& projects) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& p : Items(projects, "projects")) {
    std::optional<int64_t> quota = Int(p, "quota_gpus");
    std::optional<double> seconds = Num(p, "gpu_seconds");
    rows.push_back({Cell(p, "name"),
                    quota && *quota > 0 ? absl::StrCat(*quota) : "-",
                    Cell(p, "weight"), Cell(p, "running_gpus"),
                    Cell(p, "running_jobs"), Cell(p, "pending_jobs"),
                    seconds ? fmt::format("{:.1f}", *seconds / 3600.0) : "-"});
  }
  return FormatTable({"NAME", "QUOTA_GPUS", "WEIGHT", "RUNNING_GPUS", "RUNNING",
                      "PENDING", "GPU_HOURS"},
                     rows);
}

namespace cli {
namespace {

int Top(const Verb& v) {
  absl::StatusOr<absl::Duration> interval = ParseDuration(v.flags.interval);
  if (!interval.ok() || *interval < absl::Milliseconds(200)) {
    return v.Fail(kExitUsage, "--interval: a duration of at least 200ms");
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  int width = 100;
  if (std::optional<std::string> cols = v.ctx.getenv("COLUMNS")) {
    int c = 0;
    if (absl::SimpleAtoi(*cols, &c) && c >= 40) width = c;
  }
  while (true) {
    absl::StatusOr<Json> nodes = client->ListNodes();
    if (!nodes.ok()) return v.Fail(kExitFailed, nodes.status());
    JobFilter filter;
    filter.states = {"held", "pending", "running", "stopping"};
    absl::StatusOr<Json> jobs = client->ListJobs(filter);
    if (!jobs.ok()) return v.Fail(kExitFailed, jobs.status());
    const std::string screen = FormatTop(
        *nodes, *jobs, client->server_urls().front(), width, 10, v.ctx.now());
    if (v.flags.once) {
      v.out() << screen;
      return kExitOk;
    }
    v.out() << "\x1b[H\x1b[2J" << screen << std::flush;  // clear, home
    const absl::Time until = absl::Now() + *interval;
    while (absl::Now() < until) {
      if (v.ctx.interrupted != nullptr && v.ctx.interrupted->load()) {
        return kExitOk;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
  }
}

// `loom chaos ACTION TARGET [VALUE]`: fault injection for drills and tests.
int Chaos(const Verb& v) {
  const std::string& action = v.flags.chaos_action;
  const std::string& target = v.flags.chaos_target;
  const std::string& value = v.flags.chaos_value;
  Json fault;
  int64_t n = 0;
  if (action == "kill-task") {
    absl::StatusOr<int64_t> job = ParseJobId(target);
    if (!job.ok()) {
      return v.Fail(kExitUsage, absl::StrCat("kill-task: give a job ID (",
                                             job.status().message(), ")"));
    }
    fault = {{"action", "kill_task"}, {"job", *job}, {"task", v.flags.task}};
  } else if (action == "kill-agent" || action == "freeze" || action == "thaw" ||
             action == "heal") {
    fault = {{"action", action == "kill-agent" ? "kill_agent"
                        : action == "freeze"   ? "freeze_heartbeats"
                        : action == "thaw"     ? "thaw_heartbeats"
                                               : "heal"},
             {"node", target}};
  } else if (action == "fail-gpu" || action == "heal-gpu" ||
             action == "hold-gpu" || action == "reset-gpu") {
    if (!absl::SimpleAtoi(value, &n) || n < 0) {
      return v.Fail(kExitUsage, absl::StrCat(action, ": give NODE GPU_INDEX"));
    }
    std::string wire = action;
    std::replace(wire.begin(), wire.end(), '-', '_');
    fault = {{"action", wire}, {"node", target}, {"gpu", n}};
  } else if (action == "slow") {
    absl::StatusOr<absl::Duration> d = ParseDuration(value);
    if (!d.ok() || *d < absl::ZeroDuration()) {
      return v.Fail(kExitUsage,
                    "slow: give NODE DELAY (e.g. 500ms; 0 ends the delay)");
    }
    fault = {{"action", "slow_agent"},
             {"node", target},
             {"delay_ms", absl::ToInt64Milliseconds(*d)}};
  } else {
    return v.Fail(kExitUsage,
                  absl::StrCat("unknown chaos action '", action,
                               "': kill-agent, freeze, thaw, kill-task, "
                               "fail-gpu, heal-gpu, hold-gpu, reset-gpu, "
                               "slow, heal"));
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> answer = client->Chaos(fault);
  if (!answer.ok()) return v.Fail(kExitFailed, answer.status());
  v.out() << "chaos: " << action << " " << target
          << (value.empty() ? "" : " " + value) << ": done"
          << (action == "kill-task"
                  ? absl::StrCat(" (task ", v.flags.task, " on node ",
                                 Str(*answer, "node"), ")")
                  : std::string())
          << "\n";
  return kExitOk;
}

int Projects(const Verb& v) {
  return RequestAndPrint(
      v, [](ApiClient& client) { return client.ListProjects(); },
      [](const Json& projects) { return FormatProjectTable(projects); });
}

}  // namespace

void AddClusterVerbs(CLI::App& app, JobCommandFlags* f) {
  CLI::App* top =
      AddVerb(app, f, "top",
              "The cluster at a glance, refreshed until Ctrl-C: GPUs, nodes by "
              "leaf, waiting jobs and why, the largest running jobs");
  top->add_flag("--once", f->once, "Print once and exit");
  top->add_option("--interval", f->interval, "Refresh period")
      ->capture_default_str();

  CLI::App* chaos = AddVerb(
      app, f, "chaos",
      "Inject a fault (drills and tests): kill-agent NODE, freeze NODE "
      "(drop its heartbeats: a partition), thaw NODE, kill-task JOB "
      "[--task N], fail-gpu NODE GPU (emulated GPUs), heal-gpu NODE GPU, "
      "hold-gpu NODE GPU (another process holds it open: MIG mode changes "
      "wait), reset-gpu NODE GPU, slow NODE DELAY (agent answers late), heal "
      "NODE (lift all)");
  chaos->add_option("action", f->chaos_action, "The fault")->required();
  chaos->add_option("target", f->chaos_target, "A node name, or a job ID")
      ->required();
  chaos->add_option("value", f->chaos_value, "GPU index, or delay");
  chaos->add_option("--task", f->task, "kill-task: the task (default 0)")
      ->check(CLI::NonNegativeNumber);

  CLI::App* projects =
      AddVerb(app, f, "projects", "List projects: quota, weight, usage");
  AddOutputFlag(projects, f, {"json", "yaml"});
}

std::optional<int> RunClusterVerb(const Verb& v) {
  if (v.name == "top") return Top(v);
  if (v.name == "chaos") return Chaos(v);
  if (v.name == "projects") return Projects(v);
  return std::nullopt;
}

}  // namespace cli
}  // namespace loom
