#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "loom/server/job_record.h"
#include "loom/store/state_store.h"
#include "nlohmann/json.hpp"

namespace loom {

// The usage ledger (docs/accounting.md): GPU-seconds per (project, user,
// UTC hour), kept in the state store under "/usage/" so that a run's end
// and its GPU-seconds are one commit. It outlives the jobs (their purge
// leaves it alone) and is what `loom report usage` and the
// `loom_gpu_seconds_total` counter are made of.
//
// Key: "/usage/" + the hour as a 10-digit count of hours since the Unix
// epoch + "/" + project + "/" + user, so that key order is time order.
// Value: {"project", "user", "hour" (RFC 3339), "gpu_seconds"} and, when
// not zero, "lost_gpu_seconds": of those, the work lost (after the last
// checkpoint of runs that failed, lost a node or were preempted: goodput).

inline constexpr std::string_view kUsagePrefix = "/usage/";

// What one run of a job used, charged to its project and user.
struct UsageCharge {
  std::string project;
  std::string user;
  GpuSpan span;
};

// One ledger entry: the GPU-seconds of `project` and `user` in the hour
// that starts at `hour`.
struct UsageEntry {
  std::string project;
  std::string user;
  absl::Time hour;
  double gpu_seconds = 0;
  double lost_gpu_seconds = 0;
};

// GPU-seconds allocated and, of those, lost.
struct UsageTotals {
  double gpu_seconds = 0;
  double lost_gpu_seconds = 0;
};

// The GPU-seconds of `span` in each UTC hour it touches, oldest first, as
// (start of the hour, seconds); nothing for an empty span. They add up to
// `gpus * (end - start)`.
std::vector<std::pair<absl::Time, double>> SplitByHour(const GpuSpan& span);

// The part of `span` whose work was lost ([lost_from, end)), as a span of
// its own; empty (no GPUs) when none was.
GpuSpan LostPart(const GpuSpan& span);

// `span` as ledger entries of `project` and `user`, one per hour it touches.
std::vector<UsageEntry> SpanEntries(const std::string& project,
                                    const std::string& user,
                                    const GpuSpan& span);

// The start of the UTC hour that holds `t`.
absl::Time HourOf(absl::Time t);

std::string UsageKey(std::string_view project, std::string_view user,
                     absl::Time hour);

// The ledger as the controller keeps it: totals per (project, user) in
// memory (for the counter), the entries themselves only in the store. Not
// thread-safe (the controller's mutex guards it).
class UsageLedger {
 public:
  using Totals = std::map<std::pair<std::string, std::string>, UsageTotals>;

  // Reads the totals from the store (the whole ledger, once at start).
  // Entries that cannot be read are skipped and counted in `*skipped`.
  absl::Status Load(StateStore& store, int* skipped = nullptr);

  // Adds to `conditions` and `mutations` what charging `charges` takes:
  // each entry touched is read from `store` and put back with its sum,
  // on the condition that nobody wrote it meanwhile. The charges are
  // pending until `Finish`.
  absl::Status AddWrites(StateStore& store,
                         const std::vector<UsageCharge>& charges,
                         std::vector<Condition>* conditions,
                         std::vector<Mutation>* mutations);
  // The commit with the pending writes succeeded (`ok`: the totals take
  // them) or not (they are dropped: the caller charges them again).
  void Finish(bool ok);

  const Totals& totals() const { return totals_; }

  // The entries of the hours that overlap [since, until) (the ledger's
  // grain is the hour), in key order (hour, then project, then user);
  // unreadable ones are skipped.
  static absl::StatusOr<std::vector<UsageEntry>> Read(StateStore& store,
                                                      absl::Time since,
                                                      absl::Time until);

 private:
  Totals totals_;
  Totals pending_;
};

// How `loom report usage` groups: by project, user or both, and per hour,
// day, month (UTC) or the whole window (kAll).
struct UsageGrouping {
  enum class Per { kHour, kDay, kMonth, kAll };
  bool project = false;
  bool user = false;
  Per per = Per::kAll;
};

// "hour", "day", "month" or "all".
std::string_view UsagePerName(UsageGrouping::Per per);

// "project", "user", "project,user" (or "user,project"); InvalidArgument
// naming the text otherwise.
absl::StatusOr<UsageGrouping> ParseUsageGrouping(std::string_view by,
                                                 std::string_view per);

// The report of `entries` grouped as `g`: the `GET /v1/usage` reply's
// "rows" (sorted by period, then the keys; each with "gpu_seconds",
// "lost_gpu_seconds" and "goodput", 1 - lost / allocated), and
// "total_gpu_seconds", "total_lost_gpu_seconds", "goodput".
nlohmann::json UsageReport(const std::vector<UsageEntry>& entries,
                           const UsageGrouping& g);

}  // namespace loom
