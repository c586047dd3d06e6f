#include "loom/server/usage_ledger.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/civil_time.h"
#include "loom/server/job_events_store.h"

namespace loom {
namespace {

constexpr int64_t kSecondsPerHour = 3600;

int64_t HourIndex(absl::Time t) {
  const int64_t s = absl::ToUnixSeconds(t);
  // Floor, also before the epoch.
  return s >= 0 ? s / kSecondsPerHour
                : -((-s + kSecondsPerHour - 1) / kSecondsPerHour);
}

// The entry stored under `kv`, or nullopt when it cannot be read.
std::optional<UsageEntry> ReadEntry(const KeyValue& kv) {
  nlohmann::json j = nlohmann::json::parse(kv.value, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  auto text = [&j](const char* key) -> const std::string* {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get_ptr<const std::string*>()
                                            : nullptr;
  };
  const std::string* project = text("project");
  const std::string* user = text("user");
  const std::string* hour = text("hour");
  auto s = j.find("gpu_seconds");
  if (project == nullptr || user == nullptr || hour == nullptr ||
      s == j.end() || !s->is_number()) {
    return std::nullopt;
  }
  absl::StatusOr<absl::Time> t = ParseTimestamp(*hour);
  const double v = s->get<double>();
  if (!t.ok() || !std::isfinite(v) || v < 0) return std::nullopt;
  double lost = 0;
  if (auto l = j.find("lost_gpu_seconds"); l != j.end()) {
    if (!l->is_number()) return std::nullopt;
    lost = l->get<double>();
    if (!std::isfinite(lost) || lost < 0 || lost > v) return std::nullopt;
  }
  return UsageEntry{*project, *user, *t, v, lost};
}

std::string EntryText(const UsageEntry& e) {
  nlohmann::json j = {{"project", e.project},
                      {"user", e.user},
                      {"hour", FormatTimestamp(e.hour)},
                      {"gpu_seconds", e.gpu_seconds}};
  if (e.lost_gpu_seconds > 0) j["lost_gpu_seconds"] = e.lost_gpu_seconds;
  return JobStoreText(j);
}

// 1 - lost / allocated, or null without any GPU-second.
nlohmann::json GoodputOf(double gpu_seconds, double lost) {
  return gpu_seconds > 0 ? nlohmann::json(1.0 - lost / gpu_seconds)
                         : nlohmann::json(nullptr);
}

// The start of the period of `per` that holds `hour` (UTC).
absl::Time PeriodOf(absl::Time hour, UsageGrouping::Per per) {
  const absl::TimeZone utc = absl::UTCTimeZone();
  switch (per) {
    case UsageGrouping::Per::kHour:
      return hour;
    case UsageGrouping::Per::kDay:
      return absl::FromCivil(absl::ToCivilDay(hour, utc), utc);
    case UsageGrouping::Per::kMonth:
      return absl::FromCivil(absl::ToCivilMonth(hour, utc), utc);
    case UsageGrouping::Per::kAll:
      break;
  }
  return absl::InfinitePast();
}

}  // namespace

absl::Time HourOf(absl::Time t) {
  return absl::FromUnixSeconds(HourIndex(t) * kSecondsPerHour);
}

std::vector<std::pair<absl::Time, double>> SplitByHour(const GpuSpan& span) {
  std::vector<std::pair<absl::Time, double>> out;
  if (span.gpus <= 0 || span.end <= span.start) return out;
  absl::Time t = span.start;
  while (t < span.end) {
    const absl::Time hour = HourOf(t);
    const absl::Time next =
        std::min(span.end, hour + absl::Seconds(kSecondsPerHour));
    out.emplace_back(hour, span.gpus * absl::ToDoubleSeconds(next - t));
    t = next;
  }
  return out;
}

GpuSpan LostPart(const GpuSpan& span) {
  GpuSpan lost;
  if (!span.lost_from) return lost;
  lost.start = std::clamp(*span.lost_from, span.start, span.end);
  lost.end = span.end;
  lost.gpus = span.gpus;
  return lost;
}

std::vector<UsageEntry> SpanEntries(const std::string& project,
                                    const std::string& user,
                                    const GpuSpan& span) {
  std::vector<UsageEntry> out;
  for (const auto& [hour, seconds] : SplitByHour(span)) {
    out.push_back({project, user, hour, seconds, 0});
  }
  // The lost part's hours are among the span's (it ends the span).
  for (const auto& [hour, seconds] : SplitByHour(LostPart(span))) {
    for (UsageEntry& e : out) {
      if (e.hour == hour) e.lost_gpu_seconds += seconds;
    }
  }
  return out;
}

std::string UsageKey(std::string_view project, std::string_view user,
                     absl::Time hour) {
  return absl::StrFormat("%s%010d/%s/%s", std::string(kUsagePrefix),
                         HourIndex(hour), std::string(project),
                         std::string(user));
}

absl::Status UsageLedger::Load(StateStore& store, int* skipped) {
  absl::StatusOr<std::vector<KeyValue>> kvs = store.List(kUsagePrefix);
  if (!kvs.ok()) return kvs.status();
  totals_.clear();
  int bad = 0;
  for (const KeyValue& kv : *kvs) {
    std::optional<UsageEntry> e = ReadEntry(kv);
    if (!e) {
      ++bad;
      continue;
    }
    UsageTotals& t = totals_[{e->project, e->user}];
    t.gpu_seconds += e->gpu_seconds;
    t.lost_gpu_seconds += e->lost_gpu_seconds;
  }
  if (skipped != nullptr) *skipped = bad;
  return absl::OkStatus();
}

absl::Status UsageLedger::AddWrites(StateStore& store,
                                    const std::vector<UsageCharge>& charges,
                                    std::vector<Condition>* conditions,
                                    std::vector<Mutation>* mutations) {
  // The sums by key first: one read and one write per entry touched.
  std::map<std::string, UsageEntry> adds;
  for (const UsageCharge& c : charges) {
    for (const UsageEntry& e : SpanEntries(c.project, c.user, c.span)) {
      const std::string key = UsageKey(c.project, c.user, e.hour);
      auto [it, fresh] = adds.try_emplace(key);
      if (fresh) it->second = UsageEntry{c.project, c.user, e.hour, 0, 0};
      it->second.gpu_seconds += e.gpu_seconds;
      it->second.lost_gpu_seconds += e.lost_gpu_seconds;
      UsageTotals& t = pending_[{c.project, c.user}];
      t.gpu_seconds += e.gpu_seconds;
      t.lost_gpu_seconds += e.lost_gpu_seconds;
    }
  }
  for (auto& [key, add] : adds) {
    absl::StatusOr<KeyValue> kv = store.Get(key);
    Condition cond{key, Condition::kMustNotExist};
    UsageEntry sum = add;
    if (kv.ok()) {
      cond.version = kv->version;
      // An entry that cannot be read is replaced (it is counted in no
      // total either).
      if (std::optional<UsageEntry> old = ReadEntry(*kv)) {
        sum.gpu_seconds += old->gpu_seconds;
        sum.lost_gpu_seconds += old->lost_gpu_seconds;
      }
    } else if (!absl::IsNotFound(kv.status())) {
      pending_.clear();
      return kv.status();
    }
    conditions->push_back(std::move(cond));
    mutations->push_back(Mutation::Put(key, EntryText(sum)));
  }
  return absl::OkStatus();
}

void UsageLedger::Finish(bool ok) {
  if (ok) {
    for (const auto& [key, s] : pending_) {
      totals_[key].gpu_seconds += s.gpu_seconds;
      totals_[key].lost_gpu_seconds += s.lost_gpu_seconds;
    }
  }
  pending_.clear();
}

absl::StatusOr<std::vector<UsageEntry>> UsageLedger::Read(StateStore& store,
                                                          absl::Time since,
                                                          absl::Time until) {
  absl::StatusOr<std::vector<KeyValue>> kvs = store.List(kUsagePrefix);
  if (!kvs.ok()) return kvs.status();
  std::vector<UsageEntry> out;
  for (const KeyValue& kv : *kvs) {
    std::optional<UsageEntry> e = ReadEntry(kv);
    if (!e || e->hour < HourOf(since) || e->hour >= until) continue;
    out.push_back(*std::move(e));
  }
  return out;
}

std::string_view UsagePerName(UsageGrouping::Per per) {
  switch (per) {
    case UsageGrouping::Per::kHour:
      return "hour";
    case UsageGrouping::Per::kDay:
      return "day";
    case UsageGrouping::Per::kMonth:
      return "month";
    case UsageGrouping::Per::kAll:
      break;
  }
  return "all";
}

absl::StatusOr<UsageGrouping> ParseUsageGrouping(std::string_view by,
                                                 std::string_view per) {
  UsageGrouping g;
  if (by == "project") {
    g.project = true;
  } else if (by == "user") {
    g.user = true;
  } else if (by == "project,user" || by == "user,project") {
    g.project = g.user = true;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("by: expected project, user or project,user, not \"",
                     std::string(by), "\""));
  }
  if (per == "hour") {
    g.per = UsageGrouping::Per::kHour;
  } else if (per == "day") {
    g.per = UsageGrouping::Per::kDay;
  } else if (per == "month") {
    g.per = UsageGrouping::Per::kMonth;
  } else if (per == "all" || per.empty()) {
    g.per = UsageGrouping::Per::kAll;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("per: expected hour, day, month or all, not \"",
                     std::string(per), "\""));
  }
  return g;
}

nlohmann::json UsageReport(const std::vector<UsageEntry>& entries,
                           const UsageGrouping& g) {
  using Row = std::tuple<absl::Time, std::string, std::string>;
  std::map<Row, UsageTotals> sums;
  UsageTotals total;
  for (const UsageEntry& e : entries) {
    UsageTotals& s = sums[{PeriodOf(e.hour, g.per), g.project ? e.project : "",
                           g.user ? e.user : ""}];
    s.gpu_seconds += e.gpu_seconds;
    s.lost_gpu_seconds += e.lost_gpu_seconds;
    total.gpu_seconds += e.gpu_seconds;
    total.lost_gpu_seconds += e.lost_gpu_seconds;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [row, s] : sums) {
    nlohmann::json r;
    r["period"] = g.per == UsageGrouping::Per::kAll
                      ? nlohmann::json(nullptr)
                      : nlohmann::json(FormatTimestamp(std::get<0>(row)));
    if (g.project) r["project"] = std::get<1>(row);
    if (g.user) r["user"] = std::get<2>(row);
    r["gpu_seconds"] = s.gpu_seconds;
    r["lost_gpu_seconds"] = s.lost_gpu_seconds;
    r["goodput"] = GoodputOf(s.gpu_seconds, s.lost_gpu_seconds);
    rows.push_back(std::move(r));
  }
  return {{"rows", std::move(rows)},
          {"total_gpu_seconds", total.gpu_seconds},
          {"total_lost_gpu_seconds", total.lost_gpu_seconds},
          {"goodput", GoodputOf(total.gpu_seconds, total.lost_gpu_seconds)}};
}

}  // namespace loom
