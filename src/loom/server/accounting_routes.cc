// The routes of history and usage (docs/accounting.md): the jobs that
// `loom sacct` lists and the GPU-hours that `loom report usage` reports.

#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/civil_time.h"
#include "absl/time/clock.h"
#include "loom/common/job_id.h"
#include "loom/core/job_array.h"
#include "loom/server/http_server.h"
#include "loom/server/redact.h"
#include "loom/server/route_util.h"
#include "loom/server/usage_ledger.h"

namespace loom {
namespace {

// A time parameter: RFC 3339 ("2026-12-03T10:00:00Z", with fractions or an
// offset); nullopt when absent.
absl::StatusOr<std::optional<absl::Time>> AcctTimeParam(
    const http::HttpRequest& req, const char* name) {
  if (!req.has_param(name)) return std::nullopt;
  const std::string text = req.get_param_value(name);
  absl::Time t;
  std::string err;
  if (absl::StatusOr<absl::Time> z = ParseTimestamp(text); z.ok()) {
    t = *z;
  } else if (!absl::ParseTime(absl::RFC3339_full, text, &t, &err)) {
    t = absl::InfinitePast();
  }
  // absl also takes "infinite-past"; no job is older than 1970 or newer
  // than 9999.
  static const absl::Time kLast = absl::FromCivil(
      absl::CivilSecond(10000, 1, 1, 0, 0, 0), absl::UTCTimeZone());
  if (t < absl::UnixEpoch() || t >= kLast) {
    return absl::InvalidArgumentError(
        absl::StrCat(name,
                     ": expected an RFC 3339 time from 1970 to 9999 "
                     "(2026-12-03T10:00:00Z), not \"",
                     text, "\""));
  }
  return t;
}

absl::StatusOr<FinishedJobQuery> AcctQueryOf(
    const http::HttpRequest& req, std::vector<ArrayElementRef>* elements) {
  FinishedJobQuery q;
  if (req.has_param("ids")) {
    // Job IDs and array elements ("12_7"), as sacct -j takes them.
    for (absl::string_view s :
         absl::StrSplit(req.get_param_value("ids"), ',', absl::SkipEmpty())) {
      if (s.find('_') != absl::string_view::npos) {
        absl::StatusOr<ArrayElementRef> ref =
            ParseArrayElementRef(std::string_view(s.data(), s.size()));
        if (!ref.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("ids: bad array element \"", std::string(s), "\""));
        }
        elements->push_back(*ref);
        continue;
      }
      absl::StatusOr<int64_t> id = ParseJobId(std::string(s));
      if (!id.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ids: bad job id \"", std::string(s), "\""));
      }
      q.ids.push_back(*id);
    }
  }
  if (req.has_param("state")) {
    for (absl::string_view s :
         absl::StrSplit(req.get_param_value("state"), ',', absl::SkipEmpty())) {
      absl::StatusOr<JobState> st = ParseJobState(std::string(s));
      if (!st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("state: ", st.status().message()));
      }
      q.states.push_back(std::string(JobStateName(*st)));
    }
  }
  q.user = req.get_param_value("user");
  q.project = req.get_param_value("project");
  absl::StatusOr<std::optional<absl::Time>> since = AcctTimeParam(req, "since");
  if (!since.ok()) return since.status();
  absl::StatusOr<std::optional<absl::Time>> until = AcctTimeParam(req, "until");
  if (!until.ok()) return until.status();
  q.since = *since;
  q.until = *until;
  if (req.has_param("limit") &&
      (!absl::SimpleAtoi(req.get_param_value("limit"), &q.limit) ||
       q.limit < 0)) {
    return absl::InvalidArgumentError("limit: not a number of 0 or more");
  }
  return q;
}

}  // namespace

void HttpServer::AccountingRoutes() {
  Handle("GET", "/v1/accounting/jobs",
         [this](const Request& req, Response& res) {
           std::vector<ArrayElementRef> elements;
           absl::StatusOr<FinishedJobQuery> q = AcctQueryOf(req, &elements);
           if (!q.ok()) return ReplyError(res, q.status());
           const Principal p = PrincipalOf(req);
           const PrivateData hidden = controller_->cluster()->private_data;
           FinishedJobQuery all = *q;
           if (HidesJobsFrom(p, hidden)) all.limit = 0;  // filtered, then cut
           absl::StatusOr<nlohmann::json> rows =
               controller_->AccountingJobs(all, absl::Now(), elements);
           if (rows.ok()) FilterJobsFor(p, hidden, q->limit, (*rows)["jobs"]);
           ReplyResult(res, rows);
         });
  Handle("GET", "/v1/usage", [this](const Request& req, Response& res) {
    if (!req.has_param("by")) {
      return ReplyError(
          res, absl::InvalidArgumentError("by: required (project, user or "
                                          "project,user)"));
    }
    absl::StatusOr<UsageGrouping> g = ParseUsageGrouping(
        req.get_param_value("by"), req.get_param_value("per"));
    if (!g.ok()) return ReplyError(res, g.status());
    absl::StatusOr<std::optional<absl::Time>> since =
        AcctTimeParam(req, "since");
    if (!since.ok()) return ReplyError(res, since.status());
    absl::StatusOr<std::optional<absl::Time>> until =
        AcctTimeParam(req, "until");
    if (!until.ok()) return ReplyError(res, until.status());
    const absl::Time now = absl::Now();
    absl::StatusOr<nlohmann::json> report = controller_->ReportUsage(
        *g, since->value_or(absl::UnixEpoch()), until->value_or(now), now);
    if (report.ok()) {
      FilterUsageFor(PrincipalOf(req), controller_->cluster()->private_data,
                     *report);
    }
    ReplyResult(res, report);
  });
}

}  // namespace loom
