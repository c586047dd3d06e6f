#include "loom/cli/service_verbs.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "loom/cli/job_format.h"
#include "loom/cli/job_verbs.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/core/service_spec.h"

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

namespace {

// "2" for a fixed count, "2 (1-8)" for an autoscaled one.
std::string ServiceDesired(const Json& s) {
  const std::optional<int64_t> min = Int(s, "min");
  const std::optional<int64_t> max = Int(s, "max");
  std::string desired = Cell(s, "desired");
  if (min && max && *min != *max) {
    absl::StrAppend(&desired, " (", *min, "-", *max, ")");
  }
  return desired;
}

// The server's status line; a service being deleted says so first.
std::string ServiceStatusLine(const Json& s) {
  std::string status = Str(s, "status");
  if (Str(s, "state") == "deleting" && !absl::StartsWith(status, "deleting")) {
    status = status.empty() ? "deleting" : absl::StrCat("deleting: ", status);
  }
  return status.empty() ? "-" : status;
}

// "2026-11-29 19:40:00 UTC (3m ago)", or "-".
std::string ServiceTimeAndAgo(const Json& j, const char* key, absl::Time now) {
  std::optional<absl::Time> t = TimeField(j, key);
  if (!t.has_value()) return Cell(j, key);
  return absl::StrCat(FormatUtc(*t), " (", FormatAgo(*t, now), ")");
}

}  // namespace

std::string FormatServiceTable(const Json& services) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& s : Items(services, "services")) {
    rows.push_back({Cell(s, "name"), Cell(s, "user"), Cell(s, "project"),
                    Cell(s, "port"), Cell(s, "ready"), ServiceDesired(s),
                    Cell(s, "revision"), ServiceStatusLine(s)});
  }
  return FormatTable({"NAME", "USER", "PROJECT", "PORT", "READY", "DESIRED",
                      "REVISION", "STATUS"},
                     rows);
}

std::string FormatServiceDetails(const Json& s, absl::Time now) {
  std::vector<std::pair<std::string, std::string>> lines;
  auto add = [&](std::string label, std::string value) {
    lines.emplace_back(std::move(label), std::move(value));
  };
  add("Name", Cell(s, "name"));
  add("User", Cell(s, "user"));
  add("Project", Cell(s, "project"));
  add("State", Cell(s, "state"));
  add("Status", ServiceStatusLine(s));
  add("Port", Cell(s, "port"));
  std::string revision = Cell(s, "revision");
  if (std::optional<int64_t> g = Int(s, "generation")) {
    absl::StrAppend(&revision, " (generation ", *g, ")");
  }
  add("Revision", revision);
  std::string ready =
      absl::StrCat(Cell(s, "ready"), " of ", Cell(s, "desired"), " desired");
  const std::optional<int64_t> min = Int(s, "min");
  const std::optional<int64_t> max = Int(s, "max");
  if (min && max && *min != *max) {
    absl::StrAppend(&ready, " (autoscaled, ", *min, " to ", *max, ")");
  }
  add("Ready", ready);
  if (const Json* t = Field(s, "traffic"); t != nullptr && t->is_object()) {
    std::string traffic = absl::StrFormat(
        "%g in flight, %.1f req/s, p95 %.0f ms",
        Num(*t, "in_flight").value_or(0), Num(*t, "rps").value_or(0),
        Num(*t, "p95_ms").value_or(0));
    if (std::optional<absl::Time> at = TimeField(*t, "reported")) {
      absl::StrAppend(&traffic, " (reported ", FormatAgo(*at, now), ")");
    }
    add("Traffic", traffic);
  }
  add("Created", ServiceTimeAndAgo(s, "created", now));
  add("Updated", ServiceTimeAndAgo(s, "updated", now));

  size_t width = 0;
  for (const auto& [label, value] : lines) {
    width = std::max(width, label.size());
  }
  std::string out;
  for (const auto& [label, value] : lines) {
    absl::StrAppend(&out, label, ":",
                    std::string(width - label.size() + 2, ' '), value, "\n");
  }
  std::vector<std::vector<std::string>> rows;
  for (const Json& r : Items(s, "replicas")) {
    std::string rev = Cell(r, "revision");
    if (const Json* current = Field(r, "current");
        current != nullptr && current->is_boolean() && !current->get<bool>()) {
      rev += " (old)";
    }
    std::optional<absl::Time> since = TimeField(r, "since");
    rows.push_back({Cell(r, "job"), Cell(r, "node"), Cell(r, "address"),
                    Cell(r, "phase"), rev,
                    since ? FormatAgo(*since, now) : Cell(r, "since"),
                    Cell(r, "reason")});
  }
  if (rows.empty()) {
    out += "Replicas: none\n";
  } else {
    out += "Replicas:\n";
    cli::AppendLines(&out,
                     FormatTable({"JOB", "NODE", "ADDRESS", "PHASE", "REVISION",
                                  "SINCE", "REASON"},
                                 rows),
                     "  ");
  }
  out += FormatEventsSection(Items(s, "events"), now);
  return out;
}

std::string ApplyOutcome(const Json* before, const Json& after) {
  if (before == nullptr) return "created";
  // Every change the server applies makes a new generation.
  return Int(*before, "generation") == Int(after, "generation") ? "unchanged"
                                                                : "updated";
}

namespace cli {
namespace {

constexpr char kServiceExitFooter[] =
    "Exit status: 0 ok, 1 the request failed at the server or on the "
    "network, 2 bad usage or an unreadable or invalid spec file. See "
    "docs/cli.md.";

// A whole number, written in decimal digits only, from 0 to `max` (none
// when nullopt), as typed for `what`.
absl::StatusOr<int> ServiceCount(const std::string& text, const char* what,
                                 std::optional<int> max) {
  int n = 0;
  if (text.empty() ||
      text.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(text, &n) || (max && n > *max)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": '", text, "' is not a whole number ",
        max ? absl::StrCat("from 0 to ", *max) : std::string(">= 0")));
  }
  return n;
}

absl::StatusOr<std::string> ReadServiceSpecFile(const std::string& path) {
  std::stringstream text;
  if (path == "-") {
    text << std::cin.rdbuf();
    return text.str();
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(EISDIR)));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  text << in.rdbuf();
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path));
  }
  return text.str();
}

int ServiceApply(const Verb& v) {
  const std::string& file = v.flags.service.file;
  absl::StatusOr<std::string> text = ReadServiceSpecFile(file);
  if (!text.ok()) return v.Fail(kExitUsage, text.status());
  // Checked here first, as `loom submit` checks a job spec: a bad spec is
  // named with its file, line and column, and nothing is sent. The server
  // parses the text again.
  absl::StatusOr<ServiceSpec> spec =
      ParseServiceSpec(*text, file == "-" ? "<stdin>" : file);
  if (!spec.ok()) return v.Fail(kExitUsage, spec.status());
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  // The service as it was, to say what the apply did.
  absl::StatusOr<Json> before = client->GetService(spec->name);
  if (!before.ok() && before.status().code() != absl::StatusCode::kNotFound) {
    return v.Fail(kExitFailed, before.status());
  }
  absl::StatusOr<Json> after = client->ApplyService(*text);
  if (!after.ok()) return v.Fail(kExitFailed, after.status());
  if (v.PrintStructured(*after)) return kExitOk;
  v.out() << "service " << Cell(*after, "name") << " "
          << ApplyOutcome(before.ok() ? &*before : nullptr, *after)
          << " (revision " << Cell(*after, "revision") << ", port "
          << Cell(*after, "port") << ")\n";
  return kExitOk;
}

int ServiceList(const Verb& v) {
  return RequestAndPrint(
      v, [](ApiClient& client) { return client.ListServices(); },
      [](const Json& services) { return FormatServiceTable(services); });
}

int ServiceShow(const Verb& v) {
  return RequestAndPrint(
      v,
      [&](ApiClient& client) {
        return client.GetService(v.flags.service.name);
      },
      [&](const Json& s) { return FormatServiceDetails(s, v.ctx.now()); });
}

int ServiceScale(const Verb& v) {
  absl::StatusOr<int> n =
      ServiceCount(v.flags.service.replicas, "replicas", kMaxServiceReplicas);
  if (!n.ok()) return v.Fail(kExitUsage, n.status());
  return RequestAndPrint(
      v,
      [&](ApiClient& client) {
        return client.ScaleService(v.flags.service.name, *n);
      },
      [](const Json& s) {
        return absl::StrCat("service ", Cell(s, "name"), " scaled to ",
                            Cell(s, "desired"), " replica(s) (",
                            Cell(s, "ready"), " ready now)\n");
      });
}

int ServiceDelete(const Verb& v) {
  return RequestAndPrint(
      v,
      [&](ApiClient& client) {
        return client.DeleteService(v.flags.service.name);
      },
      [](const Json& s) {
        const size_t n = Items(s, "replicas").size();
        return absl::StrCat(
            "service ", Cell(s, "name"), " is being deleted: ",
            n == 0 ? std::string("it has no replicas left")
                   : absl::StrCat("its ", n, " replica(s) drain and stop"),
            "; then it is gone\n");
      });
}

int ServiceLogs(const Verb& v) {
  if (!v.flags.output.empty()) {
    return v.Fail(kExitUsage, "-o: this verb prints no structured output");
  }
  const ServiceFlags& f = v.flags.service;
  int index = 0;
  if (!f.replica.empty()) {
    absl::StatusOr<int> n = ServiceCount(f.replica, "--replica", std::nullopt);
    if (!n.ok()) return v.Fail(kExitUsage, n.status());
    index = *n;
  }
  std::unique_ptr<ApiClient> client = MakeClient(v);
  if (client == nullptr) return kExitUsage;
  absl::StatusOr<Json> s = client->GetService(f.name);
  if (!s.ok()) return v.Fail(kExitFailed, s.status());
  const Json& replicas = Items(*s, "replicas");
  if (replicas.empty()) {
    return v.Fail(kExitFailed,
                  absl::StrCat("service ", f.name, " has no replicas"));
  }
  if (static_cast<size_t>(index) >= replicas.size()) {
    return v.Fail(
        kExitFailed,
        absl::StrCat("service ", f.name, " has ", replicas.size(),
                     " replica(s), 0 to ", replicas.size() - 1,
                     " (the rows of `loom service show`); no replica ", index));
  }
  const std::optional<int64_t> job = Int(replicas[index], "job");
  if (!job.has_value() || *job <= 0) {
    return v.Fail(kExitFailed, absl::StrCat("replica ", index, " of service ",
                                            f.name, " names no job"));
  }
  // A replica is a job of one task of one process: `loom logs JOB`.
  JobCommandFlags flags = v.flags;
  flags.task = 0;
  flags.process = 0;
  return PrintJobLogs(Verb{v.name, flags, v.ctx}, *job);
}

}  // namespace

void AddServiceVerbs(CLI::App& app, JobCommandFlags* f) {
  ServiceFlags* s = &f->service;
  CLI::App* service = AddVerb(
      app, f, "service",
      "Inference services (docs/services.md): apply -f FILE, list, show "
      "NAME, scale NAME N, delete NAME, logs NAME [--replica N] [-f]");
  service->require_subcommand(1);
  AddOutputFlag(service, f, {"json", "yaml"});

  auto sub = [&](const std::string& name, const std::string& text) {
    CLI::App* verb = service->add_subcommand(name, text);
    verb->footer(kServiceExitFooter);
    AddServerFlags(verb, f);
    verb->callback([s, name] { s->action = name; });
    return verb;
  };
  auto name_arg = [&](CLI::App* verb) {
    verb->add_option("name", s->name, "The service's name")
        ->required()
        ->type_name("NAME");
  };

  CLI::App* apply = sub("apply",
                        "Create a service, or update it (a rolling update "
                        "when what a replica runs changed), from a spec file");
  apply
      ->add_option("-f,--file", s->file,
                   "The service spec, YAML or JSON (docs/services.md); - "
                   "reads standard input")
      ->required()
      ->type_name("FILE");
  AddOutputFlag(apply, f, {"json", "yaml"});

  CLI::App* list = sub("list", "List services: their port, replicas, status");
  AddOutputFlag(list, f, {"json", "yaml"});

  CLI::App* show =
      sub("show", "One service in detail: its status, replicas and events");
  name_arg(show);
  AddOutputFlag(show, f, {"json", "yaml"});

  CLI::App* scale =
      sub("scale",
          "Set how many replicas run (within replicas.min and max when "
          "autoscaled, until the autoscaler moves it)");
  name_arg(scale);
  scale->add_option("replicas", s->replicas, "How many replicas")
      ->required()
      ->type_name("N");
  AddOutputFlag(scale, f, {"json", "yaml"});

  CLI::App* del = sub("delete",
                      "Delete a service: its replicas are drained and "
                      "stopped, then it is gone");
  name_arg(del);
  AddOutputFlag(del, f, {"json", "yaml"});

  CLI::App* logs = sub("logs",
                       "Print the output of one of a service's replicas, as "
                       "`loom logs` prints a job's");
  name_arg(logs);
  logs->add_option("--replica", s->replica,
                   "Which replica: its row in `loom service show`, from 0 "
                   "(default 0)")
      ->type_name("N");
  logs->add_flag("-f,--follow", f->follow,
                 "Keep printing new output until the replica ends");
  logs->add_flag("--stderr", f->stderr_stream,
                 "Standard error instead of output");
}

std::optional<int> RunServiceVerb(const Verb& v) {
  if (v.name != "service") return std::nullopt;
  const std::string& action = v.flags.service.action;
  const Verb sub{absl::StrCat("service ", action), v.flags, v.ctx};
  if (action == "apply") return ServiceApply(sub);
  if (action == "list") return ServiceList(sub);
  if (action == "show") return ServiceShow(sub);
  if (action == "scale") return ServiceScale(sub);
  if (action == "delete") return ServiceDelete(sub);
  if (action == "logs") return ServiceLogs(sub);
  return v.Fail(kExitUsage,
                "give an action: apply, list, show, scale, delete or logs");
}

}  // namespace cli
}  // namespace loom
