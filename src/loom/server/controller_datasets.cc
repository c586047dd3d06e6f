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
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/common/units.h"
#include "loom/sched/node_mask.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

constexpr absl::Duration kFirstRetry = absl::Seconds(2);
constexpr absl::Duration kMaxRetry = absl::Seconds(60);

// What the resolver lists for a job's run: its sources, as its user.
DatasetAsk DatasetAskFor(const JobRecord& job) {
  DatasetAsk ask{job.id, job.restart_count, {}, job.spec.user};
  for (const DatasetSpec& d : job.spec.data) ask.sources.push_back(d.source);
  return ask;
}

}  // namespace

void Controller::WaitForDatasetListings() { dataset_resolver_->WaitIdle(); }

bool Controller::HoldForDatasets(const JobRecord& job) {
  if (job.spec.data.empty()) return false;
  if (data_ready_.erase(job.id) > 0) return false;
  if (!data_waiting_.insert(job.id).second) return true;  // asked already
  dataset_resolver_->Ask(DatasetAskFor(job));
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
    // The cluster's policy now (an apply since the submit may have
    // narrowed it).
    if (absl::Status st = CheckJobDatasets(cluster_->datasets, job.spec.data);
        a.status.ok() && !st.ok()) {
      a.status = absl::PermissionDeniedError(st.message());
    }
    if (!a.status.ok()) {
      DataRetry& r = data_retry_[a.job];
      r.delay = r.delay == absl::ZeroDuration()
                    ? kFirstRetry
                    : std::min(r.delay * 2, kMaxRetry);
      r.retry_at = now + r.delay;
      r.asked = false;
      const std::string reason =
          absl::IsPermissionDenied(a.status)
              ? (a.failed_source.empty()
                     ? std::string(a.status.message())
                     : absl::StrCat("dataset ", a.failed_source, ": ",
                                    a.status.message()))
              : absl::StrCat("dataset ", a.failed_source,
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
    dataset_resolver_->Ask(DatasetAskFor(it->second));
  }
}

nlohmann::json Controller::DataPeerJson(int n) const {
  return {{"node", cluster_->nodes[n].name}, {"address", nodes_[n].address}};
}

nlohmann::json Controller::DataHolderPeers(const std::string& version, int self,
                                           bool* held_here,
                                           int* near_count) const {
  const Topology& topo = cluster_->topology;
  const int leaf = self >= 0 ? topo.leaf_of(self) : -1;
  NodeMask scratch(0);
  const NodeMask* holders = scheduler_->NodesWithDatasets({version}, &scratch);
  *held_here = holders != nullptr && self >= 0 && self < holders->size() &&
               holders->Contains(self);
  std::vector<int> near, far;  // under this leaf, and elsewhere
  if (holders != nullptr) {
    for (int n = 0; n < holders->size() && near.size() < 64; ++n) {
      if (n == self || !holders->Contains(n) || !DataPeerUsable(n)) continue;
      if (topo.leaf_of(n) == leaf) {
        near.push_back(n);
      } else if (far.size() < 3) {
        far.push_back(n);
      }
    }
  }
  if (near_count != nullptr) *near_count = static_cast<int>(near.size());
  nlohmann::json peers = nlohmann::json::array();
  for (int n : near) peers.push_back(DataPeerJson(n));
  for (int n : far) peers.push_back(DataPeerJson(n));
  return peers;
}

bool Controller::DataPeerUsable(int n) const {
  return n >= 0 && n < static_cast<int>(nodes_.size()) &&
         nodes_[n].state == Node::State::kUp && !nodes_[n].address.empty();
}

nlohmann::json Controller::DataLaunchJson(
    const JobRecord& job, int self, const std::vector<int>& nodes,
    const std::vector<std::string>* only) const {
  // One cold-store read per version and leaf switch, not per node
  // (docs/datasets.md, "Peers"). Per version, this node copies from a node
  // under its leaf whose cache holds the version, if any; else the job's
  // first node under the leaf (the leaf's filler) reads the cold store, or
  // a node under another leaf that holds the version, and the job's other
  // nodes under the leaf wait for it and copy from it.
  const Topology& topo = cluster_->topology;
  const int leaf = self >= 0 ? topo.leaf_of(self) : -1;
  // The job's nodes under this leaf, in the order given, once each; the
  // first is the leaf's filler.
  std::vector<int> mates;
  {
    std::set<int> seen;
    for (const int n : nodes) {
      if (n < 0 || self < 0 || topo.leaf_of(n) != leaf) continue;
      if (seen.insert(n).second) mates.push_back(n);
    }
  }
  const int filler = mates.empty() ? self : mates[0];
  nlohmann::json out = nlohmann::json::array();
  for (const JobDataVersion& d : job.data_versions) {
    if (only != nullptr &&
        std::find(only->begin(), only->end(), d.version) == only->end()) {
      continue;
    }
    bool held_here = false;
    int near = 0;
    nlohmann::json peers = DataHolderPeers(d.version, self, &held_here, &near);
    bool from_store = true;
    if (!held_here && near == 0 && filler != self) {
      // Wait for the leaf's filler and copy from it (its mates after it).
      peers = nlohmann::json::array();
      for (int n : mates) {
        if (n != self && DataPeerUsable(n)) peers.push_back(DataPeerJson(n));
      }
      // A filler that cannot be reached: no one to wait for.
      from_store = !DataPeerUsable(filler);
    }
    out.push_back({{"source", d.source},
                   {"mount", d.mount},
                   {"version", d.version},
                   {"files", d.files},
                   {"bytes", d.bytes},
                   {"fill_from_store", from_store},
                   {"peers", peers}});
  }
  return out;
}

void Controller::NoteDataUse(const JobRecord& job, TaskRecord& task,
                             const nlohmann::json& report, absl::Time now) {
  if (!report.is_array()) return;
  task.data_counted = true;
  for (const nlohmann::json& item : report) {
    if (!item.is_object()) continue;
    const std::string version = item.value("version", "");
    // The job's dataset of that version: counted under its name, else its
    // source (what the agent says of the source is not trusted).
    for (size_t i = 0; i < job.data_versions.size(); ++i) {
      if (job.data_versions[i].version != version) continue;
      const std::string& name =
          i < job.spec.data.size() ? job.spec.data[i].name : "";
      datasets_.RecordUse(name, job.data_versions[i].source, item, now);
      break;
    }
  }
}

absl::StatusOr<nlohmann::json> Controller::AddDataset(
    const nlohmann::json& body, const std::string& user, absl::Time now) {
  if (!body.is_object()) {
    return absl::InvalidArgumentError(
        "body: must be a JSON object {name, source, description}");
  }
  NamedDataset d;
  for (auto [key, dest, required] :
       {std::tuple{"name", &d.name, true},
        std::tuple{"source", &d.source, true},
        std::tuple{"description", &d.description, false}}) {
    auto it = body.find(key);
    if (it == body.end() && !required) continue;
    if (it == body.end() || !it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, ": ", required ? "required, " : "", "a string"));
    }
    *dest = it->get<std::string>();
  }
  d.created_by = user;
  d.created = now;
  absl::MutexLock lock(&mu_);
  absl::StatusOr<NamedDataset> added = datasets_.Add(std::move(d));
  if (!added.ok()) return added.status();
  return nlohmann::json({{"name", added->name}, {"source", added->source}});
}

absl::Status Controller::RemoveDataset(const std::string& name) {
  absl::MutexLock lock(&mu_);
  return datasets_.Remove(name);
}

nlohmann::json Controller::ListDatasets() const {
  absl::MutexLock lock(&mu_);
  auto holders =
      [this](const std::string& version) ABSL_NO_THREAD_SAFETY_ANALYSIS {
        std::vector<std::string> out;
        NodeMask scratch(0);
        const NodeMask* m = scheduler_->NodesWithDatasets({version}, &scratch);
        for (int n = 0; m != nullptr && n < m->size(); ++n) {
          if (m->Contains(n)) {
            out.push_back(cluster_->nodes[n].name);
          }
        }
        return out;
      };
  return {{"datasets", datasets_.Json(holders)}};
}

std::set<std::string> Controller::DatasetSourcesOf(
    const std::string& user) const {
  absl::MutexLock lock(&mu_);
  std::set<std::string> out;
  for (const auto& [id, job] : jobs_) {
    if (job.spec.user != user) continue;
    for (const DatasetSpec& d : job.spec.data) out.insert(d.source);
  }
  return out;
}

}  // namespace loom
