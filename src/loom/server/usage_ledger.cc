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
  return UsageEntry{*project, *user, *t, v};
}

std::string EntryText(const UsageEntry& e) {
  return JobStoreText({{"project", e.project},
                       {"user", e.user},
                       {"hour", FormatTimestamp(e.hour)},
                       {"gpu_seconds", e.gpu_seconds}});
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
    totals_[{e->project, e->user}] += e->gpu_seconds;
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
    for (const auto& [hour, seconds] : SplitByHour(c.span)) {
      const std::string key = UsageKey(c.project, c.user, hour);
      auto [it, fresh] = adds.try_emplace(key);
      if (fresh) it->second = UsageEntry{c.project, c.user, hour, 0};
      it->second.gpu_seconds += seconds;
      pending_[{c.project, c.user}] += seconds;
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
    for (const auto& [key, s] : pending_) totals_[key] += s;
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
  std::map<Row, double> sums;
  double total = 0;
  for (const UsageEntry& e : entries) {
    sums[{PeriodOf(e.hour, g.per), g.project ? e.project : "",
          g.user ? e.user : ""}] += e.gpu_seconds;
    total += e.gpu_seconds;
  }
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [row, s] : sums) {
    nlohmann::json r;
    r["period"] = g.per == UsageGrouping::Per::kAll
                      ? nlohmann::json(nullptr)
                      : nlohmann::json(FormatTimestamp(std::get<0>(row)));
    if (g.project) r["project"] = std::get<1>(row);
    if (g.user) r["user"] = std::get<2>(row);
    r["gpu_seconds"] = s;
    rows.push_back(std::move(r));
  }
  return {{"rows", std::move(rows)}, {"total_gpu_seconds", total}};
}

}  // namespace loom
