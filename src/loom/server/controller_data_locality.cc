// Data locality and prefetch on the live cluster (docs/datasets.md,
// "Locality and prefetch"; docs/scheduling.md): agents report the complete
// dataset versions their caches hold, which the scheduler prefers for jobs
// that read them (`Scheduler::SetNodeDatasets`; the jobs' versions come
// with their requests, `AddPlacementHints`); and when a pass gives a gang a
// backfill reservation on nodes that lack its versions
// (`PassResult::prefetch`), each of those nodes is asked to fill them
// ahead of the gang (`POST /v1/datasets/prefetch` on its agent).

#include <algorithm>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "loom/core/dataset_spec.h"
#include "loom/server/controller.h"

namespace loom {
namespace {

constexpr size_t kMaxNodeDatasets = 256;  // as agents cap their lists

}  // namespace

void Controller::ApplyDatasets(int n, const nlohmann::json& body) {
  // What prefetches the server asked of the node copied: counted once.
  if (auto p = body.find("prefetched"); p != body.end() && p->is_array()) {
    size_t seen = 0;
    for (const nlohmann::json& item : *p) {
      if (++seen > kMaxNodeDatasets) break;
      datasets_.RecordPrefetch(cluster_->nodes[n].name, item);
    }
  }
  auto it = body.find("datasets");
  // Absent (an older agent, or a heartbeat whose list did not change) or
  // not a list: what the scheduler knows stays.
  if (it == body.end() || !it->is_array()) return;
  std::set<std::string> versions;
  for (const nlohmann::json& v : *it) {
    if (versions.size() >= kMaxNodeDatasets) break;
    if (!v.is_string() || !IsDatasetVersion(v.get_ref<const std::string&>())) {
      continue;  // malformed: dropped
    }
    versions.insert(v.get<std::string>());
  }
  scheduler_->SetNodeDatasets(
      n, std::vector<std::string>(versions.begin(), versions.end()));
}

void Controller::SendPrefetches(const PassResult& pass, absl::Time now,
                                std::vector<const JobRecord*>* dirty) {
  for (const PassResult::Prefetch& p : pass.prefetch) {
    auto it = jobs_.find(p.job);
    if (it == jobs_.end()) continue;
    JobRecord& job = it->second;
    std::vector<std::string> sources;
    for (const JobDataVersion& d : job.data_versions) {
      if (std::find(p.datasets.begin(), p.datasets.end(), d.version) !=
          p.datasets.end()) {
        sources.push_back(absl::StrCat(d.source, " (", d.version, ")"));
      }
    }
    if (sources.empty()) continue;
    // The items of a launch's `data` for the versions the nodes lack, as a
    // launch on these nodes would have them: per leaf, the nodes that hold
    // a version serve it; without any, the leaf's first node reads the
    // cold store and the others wait for it and copy from it.
    std::vector<int> usable;
    for (int n : p.nodes) {
      if (DataPeerUsable(n)) usable.push_back(n);
    }
    std::vector<std::string> asked;
    for (int n : usable) {
      nlohmann::json data = DataLaunchJson(job, n, usable, &p.datasets);
      for (const nlohmann::json& item : data) {
        // Its report is counted under the job's name for it, if any.
        const std::string version = item.value("version", "");
        for (size_t i = 0; i < job.data_versions.size(); ++i) {
          if (job.data_versions[i].version != version) continue;
          datasets_.NotePrefetchAsked(
              cluster_->nodes[n].name, version,
              i < job.spec.data.size() ? job.spec.data[i].name : "",
              job.data_versions[i].source);
          break;
        }
      }
      AgentAction a;
      a.kind = AgentAction::Kind::kPrefetch;
      a.node = cluster_->nodes[n].name;
      a.address = nodes_[n].address;
      a.job = job.id;
      a.body = {{"data", std::move(data)}};
      asked.push_back(a.node);
      actions_.push_back(std::move(a));
    }
    if (asked.empty()) continue;
    job.AddEvent(
        now, absl::StrCat("prefetching dataset ", absl::StrJoin(sources, ", "),
                          " on ", absl::StrJoin(asked, ", "),
                          " (reserved for this job)"));
    dirty->push_back(&job);
  }
}

}  // namespace loom
