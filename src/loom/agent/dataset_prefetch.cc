#include "loom/agent/dataset_prefetch.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace loom {

DatasetPrefetches::~DatasetPrefetches() { Shutdown(); }

void DatasetPrefetches::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [version, fill] : fills_) {
      if (fill.thread.joinable()) threads.push_back(std::move(fill.thread));
    }
  }
  for (std::thread& t : threads) t.join();
}

nlohmann::json DatasetPrefetches::Reports(uint64_t* through) {
  absl::MutexLock lock(&mu_);
  nlohmann::json out = nlohmann::json::array();
  *through = 0;
  for (const auto& [number, item] : reports_) {
    out.push_back(item);
    *through = number;
  }
  return out;
}

void DatasetPrefetches::Acknowledge(uint64_t through) {
  absl::MutexLock lock(&mu_);
  while (!reports_.empty() && reports_.front().first <= through) {
    reports_.pop_front();
  }
}

std::vector<std::thread> DatasetPrefetches::TakeEnded() {
  std::vector<std::thread> ended;
  for (auto it = fills_.begin(); it != fills_.end();) {
    if (it->second.running) {
      ++it;
      continue;
    }
    if (it->second.thread.joinable()) {
      ended.push_back(std::move(it->second.thread));
    }
    it = fills_.erase(it);
  }
  return ended;
}

std::string DatasetPrefetches::Start(const DatasetWant& want) {
  if (cache_->Manifest(want.version).ok()) return "present";
  // A local path is read with the rights of the job's user, which a
  // prefetch does not carry: its launch fills it (dataset_local_read.h).
  if (IsLocalDatasetSource(want.source) && ::geteuid() == 0) {
    return "local";
  }
  std::vector<std::thread> ended;
  std::string state;
  {
    absl::MutexLock lock(&mu_);
    ended = TakeEnded();
    if (fills_.contains(want.version)) {
      state = "filling";
    } else if (fills_.size() >= kMaxPrefetchFills) {
      state = "busy";
      log_("warn", node_,
           absl::StrCat("dataset ", want.source, " version ", want.version,
                        ": prefetch not started (", kMaxPrefetchFills,
                        " fills run already)"));
    } else {
      state = "started";
      log_("info", node_,
           absl::StrCat("prefetching dataset ", want.source, " version ",
                        want.version, " (asked by the server)"));
      Fill& fill = fills_[want.version];
      fill.thread = std::thread([this, want] {
        const absl::Time start = absl::Now();
        DatasetFillStats stats;
        absl::StatusOr<std::shared_ptr<DatasetHold>> hold = cache_->Ensure(
            want, [](int64_t, int64_t) {}, &stats);
        const bool ok = hold.ok();
        const std::string why = ok ? "" : std::string(hold.status().message());
        hold = absl::CancelledError();  // released: evictable like any other
        absl::MutexLock lock(&mu_);
        if (ok && stats.peer_bytes + stats.cold_bytes > 0) {
          if (reports_.size() >= kMaxPrefetchReports) reports_.pop_front();
          reports_.emplace_back(
              ++last_report_,
              nlohmann::json{
                  {"source", want.source},
                  {"version", want.version},
                  {"peer_bytes", stats.peer_bytes},
                  {"cold_bytes", stats.cold_bytes},
                  {"fill_ms", absl::ToInt64Milliseconds(stats.fill_time)},
                  {"verified_files", stats.verified_files}});
        }
        if (ok) {
          log_("info", node_,
               absl::StrCat("prefetched dataset ", want.source, " version ",
                            want.version, " in ",
                            absl::FormatDuration(absl::Trunc(
                                absl::Now() - start, absl::Milliseconds(1)))));
        } else {
          log_("warn", node_,
               absl::StrCat("prefetching dataset ", want.source, " version ",
                            want.version, " failed: ", why));
        }
        if (auto it = fills_.find(want.version); it != fills_.end()) {
          it->second.running = false;
        }
      });
    }
  }
  for (std::thread& t : ended) t.join();
  return state;
}

}  // namespace loom
