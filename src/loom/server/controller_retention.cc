// History and usage (docs/accounting.md): finished jobs leave the live state
// once their retention is over and move to the accounting store; `loom
// sacct` reads both; `loom report usage` reads the usage ledger.

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/server/controller.h"
#include "loom/server/idempotency_keys.h"
#include "loom/server/job_accounting.h"
#include "loom/server/job_events_store.h"

namespace loom {
namespace {

// How often the live state is scanned for jobs to purge, and how many jobs
// one pass moves at most (a larger array moves over several passes).
constexpr absl::Duration kRetentionScanEvery = absl::Seconds(1);
constexpr size_t kPurgePerPass = 2000;
// Writes per store commit (etcd refuses transactions of over 128
// operations by default).
constexpr size_t kDeletesPerCommit = 100;

}  // namespace

std::vector<GpuSpan> Controller::UnledgeredSpans(const JobRecord& job,
                                                 absl::Time now) const {
  std::vector<GpuSpan> out = job.unledgered;
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    if (std::optional<GpuSpan> run = CurrentRunSpan(job, now)) {
      out.push_back(*run);
    }
  }
  return out;
}

int Controller::PurgeExpiredJobs(absl::Time now) {
  absl::MutexLock lock(&mu_);
  if (now - last_retention_scan_ < kRetentionScanEvery) return 0;
  last_retention_scan_ = now;
  // Runs whose end could not be written (a failed commit) go to the
  // ledger now, with their records.
  std::vector<const JobRecord*> unwritten;
  for (const auto& [id, job] : jobs_) {
    if (!job.unledgered.empty()) unwritten.push_back(&job);
  }
  // One at a time: one that cannot be written never holds back the rest.
  for (const JobRecord* j : unwritten) (void)Persist({j});
  if (accounting_ == nullptr) return 0;
  const absl::Time cutoff = now - options_.job_retention;
  // The jobs to move; an array's elements go with it, before it.
  std::vector<const JobRecord*> moving;
  for (const auto& [id, job] : jobs_) {
    if (moving.size() >= kPurgePerPass) break;
    if (!IsFinal(job.state) || !job.end_time || *job.end_time > cutoff ||
        !job.unledgered.empty() || unsaved_.contains(id)) {
      continue;
    }
    // An element leaves with its array (whose counts it is part of),
    // unless the array is gone already.
    if (job.array_job != 0 && jobs_.contains(job.array_job)) continue;
    if (!IsArrayJob(job)) {
      moving.push_back(&job);
      continue;
    }
    std::vector<const JobRecord*> elements;
    bool ready = true;
    const auto end = jobs_.upper_bound(
        id + static_cast<JobId>(
                 arrays_.count(id) > 0 ? arrays_.at(id).indices.size() : 0));
    for (auto e = jobs_.upper_bound(id); e != end; ++e) {
      if (e->second.array_job != id) continue;
      if (!IsFinal(e->second.state) || !e->second.unledgered.empty() ||
          unsaved_.contains(e->first)) {
        ready = false;
        break;
      }
      elements.push_back(&e->second);
    }
    if (!ready) continue;
    // A large array moves over several passes (elements first, the array
    // last), so that no pass holds the controller for long: its
    // heartbeats wait meanwhile.
    const size_t room = kPurgePerPass - moving.size();
    moving.insert(moving.end(), elements.begin(),
                  elements.begin() + std::min(room, elements.size()));
    if (elements.size() < room) moving.push_back(&job);
  }
  if (moving.empty()) return 0;
  // First into the accounting store (idempotent: a pass that fails later
  // is done again), then out of the live state.
  std::vector<FinishedJob> rows;
  rows.reserve(moving.size());
  for (const JobRecord* j : moving) rows.push_back(FinishedJobOf(*j));
  // A failure leaves them all in the live state, tried again next pass.
  if (!accounting_->Add(rows).ok()) return 0;
  int moved = 0;
  for (size_t i = 0; i < moving.size(); i += kDeletesPerCommit / 3) {
    const size_t n = std::min(moving.size() - i, kDeletesPerCommit / 3);
    // Job IDs are never used twice: the next one outlives the records it
    // was counted from.
    std::vector<Mutation> m = {
        Mutation::Put(std::string(kNextJobIdKey), absl::StrCat(next_id_))};
    for (size_t k = i; k < i + n; ++k) {
      const JobRecord& j = *moving[k];
      m.push_back(Mutation::Delete(JobKey(j.id)));
      m.push_back(Mutation::Delete(EventsKey(j.id)));
      // Its idempotency key, unless the key expired and a newer job
      // took it (PurgeRequests deletes expired keys).
      if (const IdempotencyRecord* r = j.request_id.empty()
                                           ? nullptr
                                           : requests_.Find(j.request_id, now);
          r != nullptr && r->job == j.id) {
        m.push_back(Mutation::Delete(IdempotencyStoreKey(j.request_id)));
      }
    }
    if (!store_->Commit({}, m).ok()) break;  // the rest on the next pass
    for (size_t k = i; k < i + n; ++k) {
      const JobId id = moving[k]->id;
      const std::string request = moving[k]->request_id;
      if (const IdempotencyRecord* r =
              request.empty() ? nullptr : requests_.Find(request, now);
          r != nullptr && r->job == id) {
        requests_.Erase(request);
      }
      ForgetJob(id);  // invalidates moving[k]
      ++moved;
      ++counters_.purged;
    }
  }
  return moved;
}

void Controller::ForgetJob(JobId id) {
  if (auto it = jobs_.find(id); it != jobs_.end()) {
    const JobRecord& job = it->second;
    user_jobs_.Remove(job.spec.user, id);
    auto named = unfinished_by_name_.find({job.spec.user, job.spec.name});
    if (named != unfinished_by_name_.end()) {
      named->second.erase(id);
      if (named->second.empty()) unfinished_by_name_.erase(named);
    }
  }
  jobs_.erase(id);
  written_.Forget(id);
  arrays_.erase(id);
  arrays_to_feed_.erase(id);
  dep_waiters_.erase(id);
  dep_recheck_.erase(id);
  dep_waiting_.erase(id);
  ForgetDatasets(id);
  backoff_.erase(id);
  failed_at_.erase(id);
  unsaved_.erase(id);
}

absl::StatusOr<const JobRecord*> Controller::DependeeOf(
    JobId id, std::optional<JobRecord>* purged) const {
  if (auto it = jobs_.find(id); it != jobs_.end()) return &it->second;
  if (accounting_ == nullptr || id <= 0 || id >= next_id_) return nullptr;
  absl::StatusOr<std::optional<FinishedJob>> row = accounting_->Get(id);
  if (!row.ok()) return row.status();
  if (!row->has_value()) return nullptr;
  absl::StatusOr<JobState> state = ParseJobState((*row)->state);
  if (!state.ok()) return nullptr;
  purged->emplace();
  (*purged)->id = id;
  (*purged)->state = *state;
  // It ran (a final job that is in accounting ended after its start, or
  // was cancelled before it).
  (*purged)->restart_count = *state == JobState::kCancelled ? 0 : 1;
  return &**purged;
}

namespace {

// The accounting rows of the elements of purged array `array` (index
// `index`, or all for -1) that match `query`'s filters, into `rows`. The
// elements' IDs follow the array's, one per index (`elements`, or, in rows
// written before it was kept, until a batch of IDs holds none of them).
absl::Status StoredElements(AccountingStore& accounting,
                            const FinishedJobQuery& query, JobId array,
                            int64_t elements, int index,
                            std::map<JobId, nlohmann::json>* rows) {
  constexpr int64_t kBatch = 1000;
  FinishedJobQuery filters = query;
  filters.ids.clear();
  for (int64_t first = array + 1;; first += kBatch) {
    if (elements > 0 && first > array + elements) break;
    FinishedJobQuery batch;
    for (int64_t id = first; id < first + kBatch; ++id) {
      batch.ids.push_back(id);
    }
    absl::StatusOr<std::vector<FinishedJob>> found = accounting.Find(batch);
    if (!found.ok()) return found.status();
    bool any = false;
    for (const FinishedJob& f : *found) {
      nlohmann::json doc = nlohmann::json::parse(f.document, nullptr, false);
      if (!doc.is_object() || doc.value("array_job", JobId{0}) != array) {
        continue;
      }
      any = true;
      if ((index >= 0 && doc.value("array_index", -1) != index) ||
          !FinishedJobMatches(filters, f) || rows->contains(f.id)) {
        continue;
      }
      (*rows)[f.id] = std::move(doc);
    }
    if (!any && elements <= 0) break;
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<nlohmann::json> Controller::AccountingJobs(
    const FinishedJobQuery& given, absl::Time now,
    const std::vector<ArrayElementRef>& elements) const {
  if (given.limit < 0) {
    return absl::InvalidArgumentError("limit: must be 0 or more");
  }
  // Jobs named (sacct -j): an array's ID stands for its elements, an
  // element ("12_7") for itself; those of arrays no longer live are looked
  // up in the store.
  const bool named = !given.ids.empty() || !elements.empty();
  FinishedJobQuery query = given;
  std::vector<ArrayElementRef> stored_elements;
  // Live jobs first, then the store: a job purged in between is in the
  // store by then (it is written there before it leaves the live state),
  // and one in both is shown once, as live.
  std::map<JobId, nlohmann::json> rows;
  AccountingStore* accounting = nullptr;
  {
    absl::MutexLock lock(&mu_);
    accounting = accounting_;
    for (JobId id : given.ids) {
      auto array = arrays_.find(id);
      if (array == arrays_.end()) continue;
      for (size_t p = 0; p < array->second.indices.size(); ++p) {
        query.ids.push_back(id + 1 + static_cast<JobId>(p));
      }
    }
    for (const ArrayElementRef& ref : elements) {
      if (absl::StatusOr<JobId> e = ElementIdLocked(ref); e.ok()) {
        query.ids.push_back(*e);
      } else if (!jobs_.contains(ref.array_job)) {
        stored_elements.push_back(ref);
      }
    }
    for (const auto& [id, job] : jobs_) {
      if ((named && query.ids.empty()) || IsArrayJob(job) ||
          !LiveJobMatches(query, job, now)) {
        continue;
      }
      rows[id] = JobAccountingJson(job, now, true);
    }
  }
  if (accounting != nullptr) {
    FinishedJobQuery q = query;
    q.limit = 0;  // array records are dropped below
    absl::StatusOr<std::vector<FinishedJob>> stored =
        std::vector<FinishedJob>();
    if (!named || !q.ids.empty()) stored = accounting->Find(q);
    if (!stored.ok()) return stored.status();
    for (const FinishedJob& f : *stored) {
      if (rows.contains(f.id)) continue;
      nlohmann::json doc = nlohmann::json::parse(f.document, nullptr, false);
      if (!doc.is_object()) continue;
      if (doc.value("array", false)) {
        // A purged array named by its ID: its elements.
        if (std::find(given.ids.begin(), given.ids.end(), f.id) !=
            given.ids.end()) {
          if (absl::Status s =
                  StoredElements(*accounting, given, f.id,
                                 doc.value("elements", int64_t{0}), -1, &rows);
              !s.ok()) {
            return s;
          }
        }
        continue;
      }
      rows[f.id] = std::move(doc);
    }
    for (const ArrayElementRef& ref : stored_elements) {
      absl::StatusOr<std::optional<FinishedJob>> array =
          accounting->Get(ref.array_job);
      if (!array.ok()) return array.status();
      if (!array->has_value()) continue;
      nlohmann::json doc =
          nlohmann::json::parse((*array)->document, nullptr, false);
      if (!doc.is_object() || !doc.value("array", false)) continue;
      if (absl::Status s = StoredElements(*accounting, given, ref.array_job,
                                          doc.value("elements", int64_t{0}),
                                          ref.index, &rows);
          !s.ok()) {
        return s;
      }
    }
  }
  nlohmann::json jobs = nlohmann::json::array();
  for (auto& [id, row] : rows) {
    if (query.limit > 0 && static_cast<int64_t>(jobs.size()) >= query.limit) {
      break;
    }
    jobs.push_back(std::move(row));
  }
  return nlohmann::json{{"jobs", std::move(jobs)}};
}

absl::StatusOr<nlohmann::json> Controller::ReportUsage(const UsageGrouping& g,
                                                       absl::Time since,
                                                       absl::Time until,
                                                       absl::Time now) const {
  if (until <= since) {
    return absl::InvalidArgumentError("until: must be after since");
  }
  absl::MutexLock lock(&mu_);
  absl::StatusOr<std::vector<UsageEntry>> entries =
      UsageLedger::Read(*store_, since, until);
  if (!entries.ok()) return entries.status();
  // What is not in the ledger yet, split into hours as the ledger is.
  const absl::Time first = HourOf(since);
  for (const auto& [id, job] : jobs_) {
    for (const GpuSpan& span : UnledgeredSpans(job, now)) {
      for (UsageEntry& e : SpanEntries(job.spec.project, job.spec.user, span)) {
        if (e.hour < first || e.hour >= until) continue;
        entries->push_back(std::move(e));
      }
    }
  }
  nlohmann::json out = UsageReport(*entries, g);
  nlohmann::json by = nlohmann::json::array();
  if (g.project) by.push_back("project");
  if (g.user) by.push_back("user");
  out["by"] = std::move(by);
  out["per"] = std::string(UsagePerName(g.per));
  out["since"] = FormatTimestamp(since);
  out["until"] = FormatTimestamp(until);
  return out;
}

}  // namespace loom
