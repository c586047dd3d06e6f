#include "loom/cli/accounting_verbs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "fmt/format.h"
#include "loom/cli/output_format.h"
#include "loom/cli/reply_fields.h"
#include "loom/cli/time_arg.h"
#include "loom/cli/verb_flags.h"
#include "loom/client/api_client.h"
#include "loom/common/hostlist.h"

namespace loom {
namespace {

using cli::Cell;
using cli::Field;
using cli::Int;
using cli::Items;
using cli::Json;
using cli::Num;
using cli::Str;
using cli::TimeField;

// What sacct's -s takes, lower-cased: loom's states, then Slurm's codes and
// names for them.
constexpr std::pair<const char*, const char*> kAcctStateNames[] = {
    {"held", "held"},           {"pending", "pending"},
    {"running", "running"},     {"stopping", "stopping"},
    {"succeeded", "succeeded"}, {"failed", "failed"},
    {"cancelled", "cancelled"}, {"cd", "succeeded"},
    {"completed", "succeeded"}, {"f", "failed"},
    {"ca", "cancelled"},        {"r", "running"},
    {"pd", "pending"},
};

// A time field in UTC as the sacct table writes it ("2026-12-03T10:00:01"),
// or "-".
std::string AcctTableTime(const Json& job, const char* key) {
  std::optional<absl::Time> t = TimeField(job, key);
  if (!t.has_value()) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%S", *t, absl::UTCTimeZone());
}

// A number as CSV writes it: the shortest form that reads back the same
// ("300", "2400.5"), or "".
std::string AcctPlainNumber(std::optional<double> v) {
  if (!v.has_value()) return "";
  if (std::isfinite(*v) && *v == std::trunc(*v) && std::fabs(*v) < 1e15) {
    return absl::StrCat(static_cast<int64_t>(*v));
  }
  return fmt::format("{}", *v);
}

// Seconds as hours with 2 decimals ("0.67"), or "-".
std::string AcctHours(std::optional<double> seconds) {
  if (!seconds.has_value()) return "-";
  return fmt::format("{:.2f}", *seconds / 3600);
}

// The job's nodes as a Slurm host list, or "".
std::string AcctNodes(const Json& job) {
  std::vector<std::string> nodes;
  for (const Json& n : Items(job, "nodes")) {
    if (n.is_string()) nodes.push_back(n.get<std::string>());
  }
  return nodes.empty() ? "" : CompressHostlist(nodes);
}

// The job's reference: "12", "10_3" for an array element.
std::string AcctRef(const Json& job) {
  std::string ref = Str(job, "ref");
  return ref.empty() ? Str(job, "id") : ref;
}

// The first columns of both sacct forms, "" where absent.
std::vector<std::string> AcctJobCells(const Json& job) {
  return {AcctRef(job), Str(job, "name"), Str(job, "user"), Str(job, "project"),
          SacctStateName(Str(job, "state"))};
}

std::string AcctOrDash(std::string s) { return s.empty() ? "-" : s; }

// The `by` columns of a usage reply: its `by`, else those its rows have.
std::vector<std::string> AcctUsageKeys(const Json& reply) {
  std::vector<std::string> keys;
  if (const Json* by = Field(reply, "by"); by != nullptr && by->is_array()) {
    for (const Json& k : *by) {
      if (k.is_string()) keys.push_back(k.get<std::string>());
    }
    return keys;
  }
  for (const char* key : {"project", "user"}) {
    for (const Json& row : Items(reply, "rows")) {
      if (Field(row, key) != nullptr) {
        keys.push_back(key);
        break;
      }
    }
  }
  return keys;
}

// Whether a usage reply's rows have periods: `per` is not all.
bool AcctUsageHasPeriods(const Json& reply) {
  const std::string per = Str(reply, "per");
  if (!per.empty()) return per != "all";
  for (const Json& row : Items(reply, "rows")) {
    if (Field(row, "period") != nullptr) return true;
  }
  return false;
}

// A period as long as `per` says: "2026-12-03T10:00", "2026-12-03",
// "2026-12"; "-" when there is none.
std::string AcctPeriod(const Json& row, const std::string& per) {
  std::optional<absl::Time> t = TimeField(row, "period");
  if (!t.has_value()) return Cell(row, "period");
  const char* format = per == "hour"    ? "%Y-%m-%dT%H:%M"
                       : per == "day"   ? "%Y-%m-%d"
                       : per == "month" ? "%Y-%m"
                                        : "%Y-%m-%dT%H:%M:%S";
  return absl::FormatTime(format, *t, absl::UTCTimeZone());
}

std::vector<std::string> AcctUsageHeader(const Json& reply,
                                         const char* value_column) {
  std::vector<std::string> header;
  if (AcctUsageHasPeriods(reply)) header.push_back("PERIOD");
  for (const std::string& key : AcctUsageKeys(reply)) {
    header.push_back(absl::AsciiStrToUpper(key));
  }
  header.push_back(value_column);
  return header;
}

// Whether the server reported goodput (servers before it did not).
bool AcctHasGoodput(const Json& reply) { return reply.contains("goodput"); }

// A goodput ratio as a percentage; "-" where there is none.
std::string AcctGoodput(const Json& row) {
  std::optional<double> g = Num(row, "goodput");
  return g ? absl::StrFormat("%.1f%%", 100 * *g) : "-";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseSacctStates(
    std::string_view text) {
  std::vector<std::string> states;
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(text.data(), text.size()), ',')) {
    const std::string name =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
    if (name.empty()) continue;  // "CD,,F"
    const auto* known =
        std::find_if(std::begin(kAcctStateNames), std::end(kAcctStateNames),
                     [&](const auto& n) { return name == n.first; });
    if (known == std::end(kAcctStateNames)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown state '", std::string(absl::StripAsciiWhitespace(part)),
          "' (loom's: held, pending, running, stopping, succeeded, failed, "
          "cancelled; or Slurm's: CD, F, CA, R, PD, COMPLETED, FAILED, "
          "CANCELLED, RUNNING, PENDING)"));
    }
    if (std::find(states.begin(), states.end(), known->second) ==
        states.end()) {
      states.push_back(known->second);
    }
  }
  if (states.empty()) {
    return absl::InvalidArgumentError(
        "give one or more states, comma-separated (CD,F or succeeded,failed)");
  }
  return states;
}

std::string SacctStateName(std::string_view loom_state) {
  if (loom_state == "succeeded") return "COMPLETED";
  return absl::AsciiStrToUpper(
      absl::string_view(loom_state.data(), loom_state.size()));
}

std::string FormatSlurmElapsed(double seconds) {
  const int64_t s =
      std::isfinite(seconds) && seconds > 0 ? static_cast<int64_t>(seconds) : 0;
  const int64_t days = s / 86400;
  std::string hms =
      fmt::format("{:02}:{:02}:{:02}", s % 86400 / 3600, s % 3600 / 60, s % 60);
  return days > 0 ? absl::StrCat(days, "-", hms) : hms;
}

std::string FormatSacctTable(const nlohmann::json& reply) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& job : Items(reply, "jobs")) {
    std::vector<std::string> row = AcctJobCells(job);
    for (std::string& cell : row) cell = AcctOrDash(std::move(cell));
    std::optional<double> elapsed = Num(job, "elapsed_seconds");
    row.insert(
        row.end(),
        {AcctTableTime(job, "submit_time"), AcctTableTime(job, "start_time"),
         AcctTableTime(job, "end_time"),
         elapsed ? FormatSlurmElapsed(*elapsed) : "-", Cell(job, "gpus"),
         AcctHours(Num(job, "gpu_seconds")), Cell(Int(job, "exit_code")),
         AcctOrDash(AcctNodes(job))});
    rows.push_back(std::move(row));
  }
  return FormatTable(
      {"JOBID", "NAME", "USER", "PROJECT", "STATE", "SUBMIT", "START", "END",
       "ELAPSED", "GPUS", "GPU-HOURS", "EXITCODE", "NODES"},
      rows);
}

std::string FormatSacctCsv(const nlohmann::json& reply) {
  std::vector<std::vector<std::string>> rows;
  for (const Json& job : Items(reply, "jobs")) {
    std::vector<std::string> row = AcctJobCells(job);
    std::optional<int64_t> exit_code = Int(job, "exit_code");
    row.insert(
        row.end(),
        {Str(job, "submit_time"), Str(job, "start_time"), Str(job, "end_time"),
         AcctPlainNumber(Num(job, "elapsed_seconds")), Str(job, "gpus"),
         AcctPlainNumber(Num(job, "gpu_seconds")),
         exit_code ? absl::StrCat(*exit_code) : "", AcctNodes(job)});
    rows.push_back(std::move(row));
  }
  return FormatCsv(
      {"JOBID", "NAME", "USER", "PROJECT", "STATE", "SUBMIT", "START", "END",
       "ELAPSED_SECONDS", "GPUS", "GPU_SECONDS", "EXITCODE", "NODES"},
      rows);
}

std::string FormatUsageTable(const nlohmann::json& reply) {
  const bool periods = AcctUsageHasPeriods(reply);
  const bool goodput = AcctHasGoodput(reply);
  const std::vector<std::string> keys = AcctUsageKeys(reply);
  const std::string per = Str(reply, "per");
  std::vector<std::vector<std::string>> rows;
  double sum = 0;
  for (const Json& r : Items(reply, "rows")) {
    std::vector<std::string> row;
    if (periods) row.push_back(AcctPeriod(r, per));
    for (const std::string& key : keys) row.push_back(Cell(r, key.c_str()));
    std::optional<double> seconds = Num(r, "gpu_seconds");
    sum += seconds.value_or(0);
    row.push_back(AcctHours(seconds));
    if (goodput) {
      row.push_back(AcctHours(Num(r, "lost_gpu_seconds")));
      row.push_back(AcctGoodput(r));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> total(keys.size() + (periods ? 1 : 0), "");
  if (!total.empty()) total[0] = "TOTAL";
  total.push_back(AcctHours(Num(reply, "total_gpu_seconds").value_or(sum)));
  // No period nor key columns (a reply without `by` or rows): one cell.
  if (total.size() == 1) total[0] = "TOTAL " + total[0];
  std::vector<std::string> header = AcctUsageHeader(reply, "GPU-HOURS");
  if (goodput) {
    total.push_back(AcctHours(Num(reply, "total_lost_gpu_seconds")));
    total.push_back(AcctGoodput(reply));
    header.push_back("LOST-HOURS");
    header.push_back("GOODPUT");
  }
  rows.push_back(std::move(total));
  return FormatTable(header, rows);
}

std::string FormatUsageCsv(const nlohmann::json& reply) {
  const bool periods = AcctUsageHasPeriods(reply);
  const bool goodput = AcctHasGoodput(reply);
  const std::vector<std::string> keys = AcctUsageKeys(reply);
  std::vector<std::vector<std::string>> rows;
  for (const Json& r : Items(reply, "rows")) {
    std::vector<std::string> row;
    if (periods) row.push_back(Str(r, "period"));
    for (const std::string& key : keys) row.push_back(Str(r, key.c_str()));
    row.push_back(AcctPlainNumber(Num(r, "gpu_seconds")));
    if (goodput) {
      row.push_back(AcctPlainNumber(Num(r, "lost_gpu_seconds")));
      row.push_back(AcctPlainNumber(Num(r, "goodput")));
    }
    rows.push_back(std::move(row));
  }
  std::vector<std::string> header = AcctUsageHeader(reply, "GPU_SECONDS");
  if (goodput) {
    header.push_back("LOST_GPU_SECONDS");
    header.push_back("GOODPUT");
  }
  return FormatCsv(header, rows);
}

namespace cli {
namespace {

constexpr char kAcctTimeForms[] =
    "RFC 3339 (2026-12-03T10:00:00Z), a UTC date or time (2026-12-03, "
    "2026-12-03T10:00), now, now-7d";

// -S and -E: the times they give, nullopt where not given; prints the error
// and returns false when one is bad or -E is before -S.
bool AcctWindow(const Verb& v, std::optional<absl::Time>* since,
                std::optional<absl::Time>* until) {
  const AccountingFlags& a = v.flags.accounting;
  const absl::Time now = v.ctx.now();
  for (auto [text, flag, out] : {std::tuple(&a.since, "--since", since),
                                 std::tuple(&a.until, "--until", until)}) {
    if (text->empty()) continue;
    absl::StatusOr<absl::Time> t = ParseTimeArg(*text, now);
    if (!t.ok()) {
      v.Fail(kExitUsage, absl::StrCat(flag, ": ", t.status().message()));
      return false;
    }
    *out = *t;
  }
  if (since->has_value() && until->has_value() && **until < **since) {
    v.Fail(kExitUsage, absl::StrCat("--until (", FormatQueryTime(**until),
                                    ") is before --since (",
                                    FormatQueryTime(**since), ")"));
    return false;
  }
  return true;
}

int Sacct(const Verb& v) {
  const AccountingFlags& a = v.flags.accounting;
  AccountingFilter filter;
  // As given: an element ("12_7") is resolved by the server, also once its
  // array is purged.
  filter.ids = v.flags.job_refs;
  filter.user = v.flags.user;
  filter.project = v.flags.project;
  filter.limit = a.limit;
  if (!a.states.empty()) {
    absl::StatusOr<std::vector<std::string>> states =
        ParseSacctStates(a.states);
    if (!states.ok()) {
      return v.Fail(kExitUsage,
                    absl::StrCat("--state: ", states.status().message()));
    }
    filter.states = *std::move(states);
  }
  std::optional<absl::Time> since, until;
  if (!AcctWindow(v, &since, &until)) return kExitUsage;
  // As sacct: today's jobs, unless jobs are named.
  if (!since.has_value() && filter.ids.empty()) {
    since = UtcDayStart(v.ctx.now());
  }
  if (since.has_value()) filter.since = FormatQueryTime(*since);
  if (until.has_value()) filter.until = FormatQueryTime(*until);
  const bool csv = v.flags.output == "csv";
  return RequestAndPrint(
      v, [&](ApiClient& client) { return client.AccountingJobs(filter); },
      [&](const Json& reply) {
        return csv ? FormatSacctCsv(reply) : FormatSacctTable(reply);
      });
}

// --by as the server takes it: "project", "user" or "project,user".
absl::StatusOr<std::string> AcctUsageBy(const std::string& text) {
  bool project = false, user = false;
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    const std::string key =
        absl::AsciiStrToLower(absl::StripAsciiWhitespace(part));
    bool* seen = key == "project" ? &project : key == "user" ? &user : nullptr;
    if (seen == nullptr || *seen) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--by: '", text, "' is not one of project, user, project,user"));
    }
    *seen = true;
  }
  return project && user ? "project,user" : project ? "project" : "user";
}

int ReportUsage(const Verb& v) {
  const AccountingFlags& a = v.flags.accounting;
  absl::StatusOr<std::string> by = AcctUsageBy(a.by);
  if (!by.ok()) return v.Fail(kExitUsage, by.status());
  std::optional<absl::Time> since, until;
  if (!AcctWindow(v, &since, &until)) return kExitUsage;
  // As sreport reports a period: by default this month.
  if (!since.has_value()) since = UtcMonthStart(v.ctx.now());
  const std::string until_text = until ? FormatQueryTime(*until) : "";
  const bool csv = v.flags.output == "csv";
  return RequestAndPrint(
      v,
      [&](ApiClient& client) {
        return client.Usage(*by, FormatQueryTime(*since), until_text, a.per);
      },
      [&](const Json& reply) {
        return csv ? FormatUsageCsv(reply) : FormatUsageTable(reply);
      });
}

}  // namespace

void AddAccountingVerbs(CLI::App& app, JobCommandFlags* f) {
  AccountingFlags* a = &f->accounting;
  const std::vector<std::string> formats = {"table", "json", "yaml", "csv"};

  CLI::App* sacct = AddVerb(
      app, f, "sacct",
      "Accounting (like Slurm's sacct): jobs, live and finished, with their "
      "times, exit codes and GPU-hours; by default today's (since midnight "
      "UTC)");
  sacct
      ->add_option("-j,--jobs", f->job_refs,
                   "Only these jobs: IDs or array elements (12_7), "
                   "comma-separated; then no default time window")
      ->delimiter(',')
      ->check(JobRefValidator())
      ->type_name("ID[,ID...]");
  sacct->add_option("-u,--user", f->user, "Only this user's jobs")
      ->type_name("USER");
  sacct->add_option("-A,--project", f->project, "Only this project's jobs")
      ->type_name("PROJECT");
  sacct
      ->add_option("-S,--since,--starttime", a->since,
                   absl::StrCat("Jobs that existed at or after this time: ",
                                kAcctTimeForms,
                                " (default: midnight UTC today; none with -j)"))
      ->type_name("TIME");
  sacct
      ->add_option("-E,--until,--endtime", a->until,
                   "Jobs submitted before this time (default: now)")
      ->type_name("TIME");
  sacct
      ->add_option("-s,--state", a->states,
                   "Only jobs in these states, comma-separated: loom's "
                   "(succeeded, failed, cancelled, running, pending, held, "
                   "stopping) or Slurm's (CD, F, CA, R, PD, COMPLETED, ...)")
      ->type_name("STATE[,STATE...]");
  sacct->add_option("--limit", a->limit, "At most N jobs, the lowest IDs first")
      ->check(CLI::PositiveNumber)
      ->type_name("N");
  sacct->add_flag("-X,--allocations", a->allocations,
                  "Accepted, no effect: loom jobs have no steps, each line "
                  "is a job's allocation");
  AddOutputFlag(sacct, f, formats);

  CLI::App* report =
      AddVerb(app, f, "report",
              "Accounting reports (like Slurm's sreport): `report usage` sums "
              "GPU-hours per project and/or user");
  report->require_subcommand(1);
  AddOutputFlag(report, f, formats);
  CLI::App* usage = report->add_subcommand(
      "usage",
      "GPU-hours per project and/or user over a time window, in total or "
      "per hour, day or month");
  usage->footer(kExitFooter);
  AddServerFlags(usage, f);
  usage
      ->add_option("--by", a->by,
                   "What to sum per: project, user, or project,user")
      ->required()
      ->type_name("KEYS");
  usage
      ->add_option("-S,--since", a->since,
                   absl::StrCat("From this time: ", kAcctTimeForms,
                                " (default: the first of this month, UTC)"))
      ->type_name("TIME");
  usage->add_option("-E,--until", a->until, "Until this time (default: now)")
      ->type_name("TIME");
  usage
      ->add_option("--per", a->per,
                   "One row per hour, day or month, or all (the default): "
                   "periods of UTC")
      ->check(CLI::IsMember({"hour", "day", "month", "all"}));
  AddOutputFlag(usage, f, formats);
  usage->callback([a] { a->report = "usage"; });
}

std::optional<int> RunAccountingVerb(const Verb& v) {
  if (v.name == "sacct") return Sacct(v);
  if (v.name != "report") return std::nullopt;
  if (v.flags.accounting.report == "usage") {
    return ReportUsage(Verb{"report usage", v.flags, v.ctx});
  }
  return v.Fail(kExitUsage, "give a report: usage");
}

}  // namespace cli
}  // namespace loom
