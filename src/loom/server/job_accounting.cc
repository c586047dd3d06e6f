#include "loom/server/job_accounting.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "loom/core/job_array.h"
#include "loom/server/job_events_store.h"

namespace loom {
namespace {

nlohmann::json TimeOrNull(const std::optional<absl::Time>& t) {
  return t ? nlohmann::json(FormatTimestamp(*t)) : nlohmann::json(nullptr);
}

}  // namespace

nlohmann::json JobAccountingJson(const JobRecord& job, absl::Time now,
                                 bool live) {
  nlohmann::json j;
  j["id"] = job.id;
  j["ref"] = job.array_job != 0
                 ? absl::StrCat(job.array_job, "_", job.array_index)
                 : absl::StrCat(job.id);
  j["array_job"] = job.array_job;
  j["array_index"] = job.array_index;
  // The record of a whole array (its elements have rows of their own, IDs
  // from the array's + 1 on, one per index).
  if (!job.spec.array.empty() && job.array_job == 0) {
    j["array"] = true;
    if (absl::StatusOr<ArraySpec> a = ParseArraySpec(job.spec.array); a.ok()) {
      j["elements"] = a->indices.size();
    }
  }
  j["name"] = job.spec.name;
  j["user"] = job.spec.user;
  j["project"] = job.spec.project;
  j["kind"] = std::string(JobKindName(job.spec.kind));
  j["state"] = std::string(JobStateName(job.state));
  j["exit_code"] =
      job.exit_code ? nlohmann::json(*job.exit_code) : nlohmann::json(nullptr);
  j["submit_time"] = FormatTimestamp(job.submit_time);
  j["start_time"] = TimeOrNull(job.start_time);
  j["end_time"] = TimeOrNull(job.end_time);
  double elapsed = 0;
  if (job.start_time) {
    const absl::Time end = job.end_time.value_or(now);
    elapsed = std::max(0.0, absl::ToDoubleSeconds(end - *job.start_time));
  }
  j["elapsed_seconds"] = elapsed;
  // The GPUs of the last run; before any, those asked for.
  int gpus = 0;
  std::vector<std::string> nodes;
  for (const TaskRecord& t : job.tasks) {
    gpus += static_cast<int>(t.gpus.size());
    if (std::find(nodes.begin(), nodes.end(), t.node) == nodes.end()) {
      nodes.push_back(t.node);
    }
  }
  if (job.tasks.empty()) {
    gpus = job.spec.gpus > 0 ? job.spec.gpus
                             : job.spec.tasks * job.spec.gpus_per_task;
  }
  j["gpus"] = gpus;
  j["nodes"] = nodes;
  double gpu_seconds = job.gpu_seconds;
  if (job.state == JobState::kRunning || job.state == JobState::kStopping) {
    gpu_seconds += CurrentRunGpuSeconds(job, now);
  }
  j["gpu_seconds"] = gpu_seconds;
  j["restarts"] = job.restart_count;
  j["live"] = live;
  return j;
}

FinishedJob FinishedJobOf(const JobRecord& job) {
  FinishedJob f;
  f.id = job.id;
  f.user = job.spec.user;
  f.project = job.spec.project;
  f.state = std::string(JobStateName(job.state));
  f.submit_time = job.submit_time;
  f.end_time = job.end_time.value_or(job.submit_time);
  f.document = JobStoreText(
      JobAccountingJson(job, job.end_time.value_or(job.submit_time), false));
  return f;
}

bool LiveJobMatches(const FinishedJobQuery& query, const JobRecord& job,
                    absl::Time now) {
  FinishedJob f;
  f.id = job.id;
  f.user = job.spec.user;
  f.project = job.spec.project;
  f.state = std::string(JobStateName(job.state));
  f.submit_time = job.submit_time;
  f.end_time = job.end_time.value_or(now);
  return FinishedJobMatches(query, f);
}

}  // namespace loom
