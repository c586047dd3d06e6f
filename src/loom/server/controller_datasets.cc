// Datasets (docs/datasets.md): a job with `data` is queued only once the
// versions of its datasets are known for this run. `QueueJob` holds it back
// and asks the `DatasetResolver`, whose thread lists the sources off the
// controller's lock; `Tick` takes the answers: the job is queued with its
// versions (every task of the run gets the same ones in its launch), or,
// when a store cannot be listed, it waits, saying why, and is asked again
// after a backoff. The nodes are not involved until the job starts.

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

constexpr absl::Duration kFirstRetry = absl::Seconds(2);
constexpr absl::Duration kMaxRetry = absl::Seconds(60);

}  // namespace

void Controller::WaitForDatasetListings() { dataset_resolver_->WaitIdle(); }

bool Controller::HoldForDatasets(const JobRecord& job) {
  if (job.spec.data.empty()) return false;
  if (data_ready_.erase(job.id) > 0) return false;
  if (!data_waiting_.insert(job.id).second) return true;  // asked already
  DatasetAsk ask{job.id, job.restart_count, {}};
  for (const DatasetSpec& d : job.spec.data) ask.sources.push_back(d.source);
  dataset_resolver_->Ask(std::move(ask));
  return true;
}

void Controller::ForgetDatasets(JobId id) {
  data_waiting_.erase(id);
  data_ready_.erase(id);
  data_retry_.erase(id);
}

void Controller::StepDatasets(absl::Time now,
                              std::vector<const JobRecord*>* dirty) {
  for (DatasetAnswer& a : dataset_resolver_->Take()) {
    auto it = jobs_.find(a.job);
    if (it == jobs_.end() || !data_waiting_.contains(a.job)) continue;
    JobRecord& job = it->second;
    if (job.state != JobState::kPending || job.restart_count != a.run) {
      ForgetDatasets(a.job);
      continue;
    }
    if (!a.status.ok()) {
      DataRetry& r = data_retry_[a.job];
      r.delay = r.delay == absl::ZeroDuration()
                    ? kFirstRetry
                    : std::min(r.delay * 2, kMaxRetry);
      r.retry_at = now + r.delay;
      r.asked = false;
      const std::string reason =
          absl::StrCat("dataset ", a.failed_source,
                       ": cold store unreachable: ", a.status.message());
      if (job.reason != reason) {
        job.reason = reason;
        job.AddEvent(now, reason);
        dirty->push_back(&job);
      }
      continue;
    }
    data_retry_.erase(a.job);
    data_waiting_.erase(a.job);
    job.data_versions.clear();
    for (size_t i = 0; i < job.spec.data.size() && i < a.listings.size(); ++i) {
      const DatasetListing& l = a.listings[i];
      job.data_versions.push_back({job.spec.data[i].source,
                                   job.spec.data[i].mount, l.version, l.files,
                                   l.bytes});
      job.AddEvent(now, absl::StrCat("dataset ", job.spec.data[i].source,
                                     ": version ", l.version, " (", l.files,
                                     " files, ", FormatBytes(l.bytes), ")"));
    }
    job.reason.clear();
    data_ready_.insert(a.job);
    if (absl::Status out = QueueSpec(job, now); !out.ok()) {
      data_ready_.erase(a.job);
      FailUnqueued(job, "cannot be queued: ", out, now);
    }
    dirty->push_back(&job);
  }
  for (auto& [id, r] : data_retry_) {
    if (r.asked || r.retry_at > now) continue;
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    r.asked = true;
    DatasetAsk ask{id, it->second.restart_count, {}};
    for (const DatasetSpec& d : it->second.spec.data) {
      ask.sources.push_back(d.source);
    }
    dataset_resolver_->Ask(std::move(ask));
  }
}

nlohmann::json Controller::DataLaunchJson(const JobRecord& job,
                                          const TaskRecord& t) const {
  // The agents of the job's other nodes, once each, the first task's node
  // first: it fills from the cold store, the others wait for it and copy
  // from it (one cold-store read per version, not per node).
  const std::string& leader = job.tasks.empty() ? t.node : job.tasks[0].node;
  nlohmann::json peers = nlohmann::json::array();
  std::set<std::string> seen = {t.node};
  for (const TaskRecord& other : job.tasks) {
    if (!seen.insert(other.node).second) continue;
    const int n = NodeIndex(other.node);
    if (n < 0 || nodes_[n].address.empty()) continue;
    peers.push_back({{"node", other.node}, {"address", nodes_[n].address}});
  }
  nlohmann::json out = nlohmann::json::array();
  for (const JobDataVersion& d : job.data_versions) {
    out.push_back({{"source", d.source},
                   {"mount", d.mount},
                   {"version", d.version},
                   {"files", d.files},
                   {"bytes", d.bytes},
                   {"fill_from_store", t.node == leader},
                   {"peers", peers}});
  }
  return out;
}

}  // namespace loom
